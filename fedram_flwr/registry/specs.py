"""The two spec shapes of the registry: one for oracles, one for algorithms.

An oracle or an algorithm is declared once, as one :class:`OracleSpec` in
:mod:`fedram_flwr.availability.specs.oracles` or one :class:`AlgorithmSpec` in
:mod:`fedram_flwr.registry.algorithms`, with real class references (a rename fails at
import). Its params dataclass validates the scenario's ``params`` section: ``check``
raises :class:`~fedram_flwr.scenario.config.ScenarioError` naming the scenario field and the
allowed values; it never builds a ClientManager or a strategy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from flwr.common import NDArrays
from flwr.server.strategy import Strategy
from flwr.serverapp.strategy import Strategy as MessageStrategy

from fedram_flwr.availability import OracleClientManager
from fedram_flwr.availability.specs.oracle_spec import Hidden, RoundLaw
from fedram_flwr.availability.specs.oracle_spec import OracleParams as OracleParams
from fedram_flwr.availability.specs.oracle_spec import OracleSpec as OracleSpec
from fedram_flwr.availability.specs.oracle_spec import least_available as least_available
from fedram_flwr.data import FederatedData
from fedram_flwr.registry.params import AlgorithmParams, params_for
from fedram_flwr.scenario.config import Scenario, ScenarioError


# ---------------------------------------------------------------- algorithms
class Run(Protocol):
    """What ``strategy_kwargs`` may read of the run being built
    (:class:`fedram_flwr.engines.experiment.Experiment`): data sizes, the seed and, in
    oracle-informed mode only, the oracle's hidden law (``availability_law``: constant;
    ``known_availability``: per round where the oracle's law changes with the round,
    :meth:`OracleSpec.known_law`)."""

    scenario: Scenario
    seed: int

    @property
    def data(self) -> FederatedData: ...

    def availability_law(self) -> np.ndarray: ...

    def known_availability(self) -> np.ndarray | RoundLaw: ...

    def client_manager(self) -> OracleClientManager: ...


AP = TypeVar("AP", bound=AlgorithmParams)


@dataclass(frozen=True)
class AlgorithmSpec(Generic[AP]):
    """One algorithm: ``strategy`` its legacy server (a
    :class:`~fedram_flwr.strategies.base.CoreStrategy` over its core),
    ``message_strategy`` its Message-API server (:mod:`fedram_flwr.message_api.algorithms`,
    same core); ``reads_hidden`` the hidden oracle parameters it
    reads when ``params.oracle_informed``. ``params``, the dataclass of its
    ``algorithm.params``, is derived from the core's declarations
    (:func:`~fedram_flwr.registry.params.params_for`) over ``scenario`` (what a scenario
    adds beyond the core: :class:`~fedram_flwr.registry.params.OracleInformed`'s
    switch, checks against the data); only a strategy without a core (Flower's q-FFL)
    gives ``params`` itself."""

    name: str
    strategy: type[Strategy]
    message_strategy: type[MessageStrategy]
    reads_hidden: frozenset[Hidden] = frozenset()
    scenario: type[AlgorithmParams] = AlgorithmParams
    params: type[AP] = None  # type: ignore[assignment]  # derived when not given

    def __post_init__(self) -> None:
        if self.params is None:
            object.__setattr__(
                self,
                "params",
                params_for(self.strategy.core_type, self.scenario, self.reads_hidden),
            )

    def build_strategy(self, params: AP, run: Run, initial: NDArrays, **common: Any) -> Strategy:
        with scenario_errors(params):
            return self.strategy(**params.strategy_kwargs(run, initial), **common)

    def build_message_strategy(self, params: AP, run: Run, **common: Any) -> MessageStrategy:
        with scenario_errors(params):
            return self.message_strategy(**params.message_kwargs(run), **common)


ROUND_SAMPLING = (
    "fraction_train",
    "fraction_evaluate",
    "min_train_nodes",
    "min_evaluate_nodes",
    "min_available_nodes",
    "train_metrics_aggr_fn",
)
"""Flower FedAvg's round-sampling arguments (``Experiment.message_strategy`` gives them):
an asynchronous strategy keeps C training and samples no rounds, so they do not apply."""


@dataclass(frozen=True)
class AsyncAlgorithmSpec(Generic[AP]):
    """One asynchronous algorithm (FedBuff): no rounds, so no legacy Flower strategy.

    ``core`` is its Flower-free core (its ``algorithm.params`` are derived from its
    declarations, as :class:`AlgorithmSpec`'s; its clients are found by name on the client
    side, :func:`~fedram_flwr.clients.train_blocks.objective_of`), ``message_strategy`` its
    Message-API strategy (:class:`~fedram_flwr.message_api.fedbuff.FedBuff`: push and pull,
    not rounds), ``left`` what runs instead of a round-based legacy strategy (said when one
    is asked for). Flower's legacy API runs it with a server loop of its own
    (:class:`~fedram_flwr.engines.fedbuff_server.FedBuffServer`, in-process:
    :mod:`fedram_flwr.engines.fedbuff_in_process`), the Message API in-process and on
    Flower's engines with :mod:`fedram_flwr.engines.fedbuff_message`."""

    name: str
    core: type
    message_strategy: type[MessageStrategy]
    left: str
    reads_hidden: frozenset[Hidden] = frozenset()
    scenario: type[AlgorithmParams] = AlgorithmParams
    params: type[AP] = None  # type: ignore[assignment]  # derived

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", params_for(self.core, self.scenario, self.reads_hidden))

    def refusal(self, where: str) -> ScenarioError:
        """The error asking for a round-based legacy Strategy gives: what runs instead."""
        return ScenarioError(
            f"algorithm.name: {self.name} is asynchronous (no rounds): {where} is not "
            f"built; {self.left}"
        )

    def build_core(self, params: AP, run: Run) -> Any:
        """The core, from the scenario's params and what the run gives."""
        with scenario_errors(params):
            return self.core(**params.core_kwargs(run))

    def build_strategy(self, params: AP, run: Run, initial: NDArrays, **common: Any) -> Strategy:
        """Refuse: no legacy Flower strategy (:meth:`refusal`)."""
        raise self.refusal("a legacy Flower strategy")

    def build_message_strategy(self, params: AP, run: Run, **common: Any) -> MessageStrategy:
        """The Message-API strategy: the core's params, ``run``'s seed and nodes
        (``data.num_clients``), and ``common`` but Flower's round sampling
        (:data:`ROUND_SAMPLING`)."""
        kwargs = {k: v for k, v in common.items() if k not in ROUND_SAMPLING}
        kwargs.setdefault("seed", run.seed)
        kwargs.setdefault("min_nodes", run.scenario.data.num_clients)
        with scenario_errors(params):
            return self.message_strategy(**params.core_kwargs(run), **kwargs)


@contextmanager
def scenario_errors(params: AlgorithmParams) -> Iterator[None]:
    """A core's ``ValueError`` that names one of the scenario's fields (the core raises
    in its own names) as a :class:`ScenarioError` naming ``algorithm.params.<field>``."""
    try:
        yield
    except ValueError as err:
        text = str(err)
        if any(text.startswith(f"{name}:") for name, _ in params.scenario_fields()):
            raise ScenarioError(f"algorithm.params.{text}") from None
        raise
