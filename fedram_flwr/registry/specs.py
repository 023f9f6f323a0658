"""The two spec shapes of the registry: one for oracles, one for algorithms.

An oracle or an algorithm is declared once, as one :class:`OracleSpec` in
:mod:`fedram_flwr.registry.oracles` or one :class:`AlgorithmSpec` in
:mod:`fedram_flwr.registry.algorithms`, with real class references (a rename fails at
import). Its params dataclass validates the scenario's ``params`` section: ``check``
raises :class:`~fedram_flwr.config.ScenarioError` naming the scenario field and the
allowed values; it never builds a ClientManager or a strategy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

import numpy as np
from flwr.client import NumPyClient
from flwr.common import NDArrays
from flwr.server.strategy import Strategy
from flwr.serverapp.strategy import Strategy as MessageStrategy

from fedram_flwr.availability import OracleClientManager
from fedram_flwr.config import Scenario, ScenarioError
from fedram_flwr.data import FederatedData
from fedram_flwr.registry.params import AlgorithmParams, params_for

# ------------------------------------------------------------------- oracles
RoundLaw = Callable[[int], np.ndarray]
"""A non-stationary law: server round -> each client's probability p_i^t of being
available in that round."""

Hidden = Literal["pi", "lam"]
"""A hidden parameter of an oracle: ``pi`` each client's long-run availability, ``lam``
its Markov chain's correlation lambda_k (CA-Fed Sec. III-D)."""


@dataclass(frozen=True)
class OracleParams:
    """Base of every oracle's ``availability.params``."""

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""


OP = TypeVar("OP", bound=OracleParams)


@dataclass(frozen=True)
class OracleSpec(Generic[OP]):
    """One oracle: ``build(params, scenario, seed)`` makes its ClientManager;
    ``hidden_law(params, scenario, seed)`` gives each client's long-run availability (the
    built manager's ``pi`` unless given); ``round_law(params, scenario, seed)``, only for
    a law that changes with the round, gives a function server round -> each client's
    p_i^t; ``hidden`` names the hidden parameters its manager exposes, which an
    oracle-informed strategy may read."""

    name: str
    params: type[OP]
    build: Callable[[OP, Scenario, int], OracleClientManager]
    hidden_law: Callable[[OP, Scenario, int], np.ndarray] | None = None
    hidden: frozenset[Hidden] = frozenset({"pi"})
    round_law: Callable[[OP, Scenario, int], RoundLaw] | None = None

    def law(self, params: OP, scenario: Scenario, seed: int) -> np.ndarray:
        if self.hidden_law is not None:
            return self.hidden_law(params, scenario, seed)
        return self.build(params, scenario, seed).pi

    def known_law(self, params: OP, scenario: Scenario, seed: int) -> np.ndarray | RoundLaw:
        """What an algorithm that knows p_i^t reads: the per-round law where the oracle
        has one (``round_law``), else the constant :meth:`law` (a stationary oracle)."""
        if self.round_law is not None:
            return self.round_law(params, scenario, seed)
        return self.law(params, scenario, seed)

    def rare_clients(self, params: OP, scenario: Scenario, seed: int) -> tuple[int, ...]:
        """The (100 - M)% least available clients hold the rare patterns (Sec. 4)."""
        return least_available(self.law(params, scenario, seed), scenario.data.num_rare_clients)


def least_available(law: np.ndarray, k: int) -> tuple[int, ...]:
    """The ``k`` clients least likely to be relayed (ties: lower ids first)."""
    return tuple(sorted(int(i) for i in np.argsort(law, kind="stable")[:k]))


# ---------------------------------------------------------------- algorithms
class Run(Protocol):
    """What ``strategy_kwargs`` may read of the run being built
    (:class:`fedram_flwr.experiment.Experiment`): data sizes, the seed and, in
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
    same core), ``client`` each client; ``reads_hidden`` the hidden oracle parameters it
    reads when ``params.oracle_informed``. ``params``, the dataclass of its
    ``algorithm.params``, is derived from the core's declarations
    (:func:`~fedram_flwr.registry.params.params_for`) over ``scenario`` (what a scenario
    adds beyond the core: :class:`~fedram_flwr.registry.params.OracleInformed`'s
    switch, checks against the data); only a strategy without a core (Flower's q-FFL)
    gives ``params`` itself."""

    name: str
    strategy: type[Strategy]
    message_strategy: type[MessageStrategy]
    client: type[NumPyClient]
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


@dataclass(frozen=True)
class AsyncAlgorithmSpec(Generic[AP]):
    """One asynchronous algorithm (FedBuff): no round, so no Flower strategy yet.

    ``core`` is its Flower-free core (its ``algorithm.params`` are derived from its
    declarations, as :class:`AlgorithmSpec`'s), ``client`` each client, ``left`` what is
    not built yet (said when a Flower engine or API is asked for it). The in-process
    engine runs it with its event loop
    (:mod:`fedram_flwr.engines.fedbuff_in_process`)."""

    name: str
    core: type
    client: type[NumPyClient]
    left: str
    reads_hidden: frozenset[Hidden] = frozenset()
    scenario: type[AlgorithmParams] = AlgorithmParams
    params: type[AP] = None  # type: ignore[assignment]  # derived

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", params_for(self.core, self.scenario, self.reads_hidden))

    def refusal(self, where: str) -> ScenarioError:
        """The error a Flower engine or API gives: which item is left."""
        return ScenarioError(
            f"algorithm.name: {self.name} is asynchronous and runs on the in-process engine "
            f"with the legacy clients only (fedram run without --engine and --api); {where} "
            f"is not built yet: {self.left}"
        )

    def build_core(self, params: AP, run: Run) -> Any:
        """The core, from the scenario's params and what the run gives."""
        with scenario_errors(params):
            return self.core(**params.core_kwargs(run))

    def build_strategy(self, params: AP, run: Run, initial: NDArrays, **common: Any) -> Strategy:
        """Refuse: no legacy Flower strategy (:meth:`refusal`)."""
        raise self.refusal("a legacy Flower strategy")

    def build_message_strategy(self, params: AP, run: Run, **common: Any) -> MessageStrategy:
        """Refuse: no Message-API strategy (:meth:`refusal`)."""
        raise self.refusal("a Message-API strategy")


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
