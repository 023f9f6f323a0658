"""A scenario's ``algorithm.params``, derived from the core's declarations.

Each hyper-parameter is declared once, on its algorithm's core
(:mod:`fedram_flwr.strategies.hyper`). :func:`params_for` turns those declarations into
the dataclass the schema parses ``algorithm.params`` with (the fields a scenario may
give, their types and defaults), whose :meth:`AlgorithmParams.check` raises the
declared ranges as errors naming ``algorithm.params.<field>`` and whose
:meth:`AlgorithmParams.core_kwargs` adds what the run gives (:data:`RUN_VALUES`). What
is left to the registry is only what a scenario adds beyond the core:
:class:`OracleInformed`'s ``availability`` switch, and the checks against the data of
a few algorithms.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from flwr.common import NDArrays

from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.strategies.hyper import Hyper, declared, is_required


def client_shares(run: Any) -> np.ndarray:
    """p_i = m_i / m: each client's share of the training samples."""
    sizes = np.array([len(y) for y in run.data.client_y], dtype=float)
    return sizes / sizes.sum()


RUN_VALUES: dict[str, Callable[[Any], Any]] = {
    "num-clients": lambda run: run.scenario.data.num_clients,
    "training-lr": lambda run: run.scenario.training.lr,
    "seed": lambda run: run.seed,
    "data-shares": client_shares,
    "known-pi": lambda run: run.availability_law(),
    "known-lam": lambda run: run.client_manager().lam,
    "known-p": lambda run: run.known_availability(),
}
"""How the run (:class:`~fedram_flwr.registry.specs.Run`) gives each
:data:`~fedram_flwr.strategies.hyper.RunValue` a core declares."""


KNOWN_READS = {"known-pi": "pi", "known-lam": "lam", "known-p": "pi"}
"""The hidden oracle parameter each run value of the hidden law is (an algorithm's
``reads_hidden`` says which it may be given)."""


def scenario_bounds(scenario: Scenario) -> dict[str, float]:
    """The run values a declared range may name, known from the scenario alone."""
    return {"num-clients": scenario.data.num_clients}


@dataclass(frozen=True)
class AlgorithmParams:
    """Base of every algorithm's ``algorithm.params``; ``core`` is the core class whose
    declarations the fields are (``None``: a hand-written params class, q-FFL's)."""

    core: ClassVar[type | None] = None
    reads: ClassVar[frozenset[str]] = frozenset()  # the hidden parameters it may read

    def scenario_fields(self) -> list[tuple[str, Hyper]]:
        """(name, declaration) of the fields a scenario gives."""
        if self.core is None:
            return []
        return [(f.name, h) for f, h in declared(self.core) if h.run is None]

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``algorithm.params.<field>`` for a value
        outside its declared range or choices."""
        bounds = scenario_bounds(scenario)
        for name, h in self.scenario_fields():
            if why := h.problem(name, getattr(self, name), bounds):
                raise ScenarioError(f"algorithm.params.{why}")

    @property
    def oracle_informed(self) -> bool:
        """Whether the strategy reads the oracle's hidden parameters (the opt-in)."""
        return False

    def core_kwargs(self, run: Any) -> dict[str, Any]:
        """The core's keyword arguments: the scenario's values, then what the run gives
        (the hidden law only when :attr:`oracle_informed`)."""
        out: dict[str, Any] = {}
        for f, h in declared(self.core) if self.core is not None else []:
            if h.run is None:
                value = getattr(self, f.name)
                if value is None and h.run_default is not None:
                    value = RUN_VALUES[h.run_default](run)
                out[f.name] = value
            elif h.run not in KNOWN_READS:
                out[f.name] = RUN_VALUES[h.run](run)
            elif self.oracle_informed and KNOWN_READS[h.run] in self.reads:
                out[f.name] = RUN_VALUES[h.run](run)
        return out

    def strategy_kwargs(self, run: Any, initial: NDArrays) -> dict[str, Any]:
        """The legacy strategy's own keyword arguments, the initial model included."""
        return {"initial_arrays": initial, **self.core_kwargs(run)}

    def message_kwargs(self, run: Any) -> dict[str, Any]:
        """The Message-API strategy's own keyword arguments (``start`` gets the model)."""
        return self.core_kwargs(run)


@dataclass(frozen=True)
class OracleInformed(AlgorithmParams):
    """What a scenario adds to the algorithms that can run oracle-informed (CA-Fed and
    its baselines, FedAR's family): ``availability``, where the rules that weigh by
    availability take it from: ``estimated`` online (each rule its own estimator) or
    ``oracle`` (the oracle's true pi_k, lambda_k or p_i^t, as the CA-Fed paper's and
    FedAR's Sec. 6.1 experiments do). Shared by a family so that one scenario can sweep
    ``algorithm.name``; the rules that weigh by nothing hidden ignore it."""

    availability: Literal["estimated", "oracle"] = "estimated"

    @property
    def oracle_informed(self) -> bool:
        return self.availability == "oracle"


def params_for(
    core_type: type,
    base: type[AlgorithmParams] = AlgorithmParams,
    reads: frozenset[str] = frozenset(),
) -> type:
    """The ``algorithm.params`` dataclass of ``core_type``: one field per declared
    hyper-parameter a scenario gives, with its type and default (a value the run
    supplies when left out, ``run_default``: ``None``), over ``base``; ``reads``: the
    hidden oracle parameters it is given when oracle-informed."""
    hints = typing.get_type_hints(core_type)
    own = []
    for f, h in declared(core_type):
        if h.run is not None:
            continue
        tp = Literal[h.choices] if h.choices else hints[f.name]
        if h.run_default is not None:
            own.append((f.name, tp | None, field(default=None)))
        elif is_required(f):
            own.append((f.name, tp, field()))
        else:
            own.append((f.name, tp, field(default=f.default)))
    name = core_type.__name__.removesuffix("Core") + "Params"
    cls = make_dataclass(
        name,
        own,
        bases=(base,),
        frozen=True,
        kw_only=True,
        namespace={"core": core_type, "reads": reads},
    )
    cls.__module__ = __name__
    return cls
