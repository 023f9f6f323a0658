"""The oracles' spec shape and the rare clients it implies.

The oracles' spec shape (:class:`OracleSpec`, :class:`OracleParams`), apart from the
algorithms' (:mod:`fedram_flwr.registry.specs`, which re-exports it): a node reads the
oracles (:mod:`fedram_flwr.clients.node`: its data depends on who is rarely available) without
the algorithms' declarations and strategies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import numpy as np

from fedram_flwr.availability import OracleClientManager
from fedram_flwr.scenario.config import Scenario

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
    """One availability oracle, declared once.

    One oracle: ``build(params, scenario, seed)`` makes its ClientManager;
    ``hidden_law(params, scenario, seed)`` gives each client's long-run availability (the
    built manager's ``pi`` unless given); ``round_law(params, scenario, seed)``, only for
    a law that changes with the round, gives a function server round -> each client's
    p_i^t; ``hidden`` names the hidden parameters its manager exposes, which an
    oracle-informed strategy may read.
    """

    name: str
    params: type[OP]
    build: Callable[[OP, Scenario, int], OracleClientManager]
    hidden_law: Callable[[OP, Scenario, int], np.ndarray] | None = None
    hidden: frozenset[Hidden] = frozenset({"pi"})
    round_law: Callable[[OP, Scenario, int], RoundLaw] | None = None

    def law(self, params: OP, scenario: Scenario, seed: int) -> np.ndarray:
        """Return each client's long-run availability (the hidden law)."""
        if self.hidden_law is not None:
            return self.hidden_law(params, scenario, seed)
        return self.build(params, scenario, seed).pi

    def known_law(self, params: OP, scenario: Scenario, seed: int) -> np.ndarray | RoundLaw:
        """Return what an algorithm that knows p_i^t reads.

        The per-round law where the oracle has one (``round_law``), else the constant
        :meth:`law` (a stationary oracle).
        """
        if self.round_law is not None:
            return self.round_law(params, scenario, seed)
        return self.law(params, scenario, seed)

    def rare_clients(self, params: OP, scenario: Scenario, seed: int) -> tuple[int, ...]:
        """Return the (100 - M)% least available clients, who hold the rare patterns (Sec. 4)."""
        return least_available(self.law(params, scenario, seed), scenario.data.num_rare_clients)


def least_available(law: np.ndarray, k: int) -> tuple[int, ...]:
    """Return the ``k`` clients least likely to be relayed (ties: lower ids first)."""
    return tuple(sorted(int(i) for i in np.argsort(law, kind="stable")[:k]))
