"""The availability oracles a scenario may name in ``availability.oracle``.

Each oracle is declared once, as an :class:`OracleSpec`: its name, the dataclass of its
``availability.params`` (whose ``check`` raises errors naming the scenario field and the
allowed values), how it builds its ClientManager for one seed, and its hidden law (each
client's long-run probability of being relayed), from which the rare clients follow.
Checks never build a ClientManager; building happens in :mod:`fedram_flwr.engines.experiment`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedram_flwr.availability import (
    CyclicClientManager,
    MinSeparationClientManager,
    OracleClientManager,
    RandomAccessClientManager,
    evenly_spread_phases,
    fedar_spread,
    group_phases,
    ram_probabilities,
)
from fedram_flwr.availability.separation import check_separation_law
from fedram_flwr.availability.specs.checks import as_scenario_error, check_length, lookup
from fedram_flwr.availability.specs.markov_oracles import (
    BernoulliParams,
    ClusteredParams,
    MarkovParams,
    build_bernoulli,
    build_clustered,
    build_markov,
)
from fedram_flwr.availability.specs.nonstationary import (
    NonStationaryParams,
    build_nonstationary,
    nonstationary_round_law,
)
from fedram_flwr.availability.specs.observed import (
    ConnectedParams,
    TraceParams,
    build_connected,
    build_trace,
)
from fedram_flwr.availability.specs.oracle_spec import Hidden, OracleParams, OracleSpec
from fedram_flwr.rng import stream
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.scenario.schema import build_dataclass, check_range


# ---------------------------------------------------------------------- RAM
@dataclass(frozen=True)
class RAMParams(OracleParams):
    """Params of the ``ram`` oracle.

    Random Access Model: explicit ``rho``, or generated as in the paper (rho_i ~
    U(0,1) normalised; ``rare_rho`` pins the rare users' probabilities).
    """

    clients_per_round: int = 1
    rho: tuple[float, ...] | None = None
    rare_rho: tuple[float, ...] | None = None

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        k = scenario.data.num_clients
        check_range("availability.params.clients_per_round", self.clients_per_round, 1, k)
        if self.rho is not None and self.rare_rho is not None:
            raise ScenarioError("availability.params: give rho or rare_rho, not both")
        if self.rho is not None:
            rho = np.asarray(self.rho)
            if rho.size != k:
                raise ScenarioError(
                    f"availability.params.rho: has {rho.size} entries, data.num_clients is {k}"
                )
            if np.any(rho < 0) or abs(rho.sum() - 1.0) > 1e-6:
                raise ScenarioError(
                    "availability.params.rho: probabilities must be >= 0 and sum to 1 "
                    f"(they sum to {rho.sum():.6g})"
                )
        if self.rare_rho is not None:
            if len(self.rare_rho) != scenario.data.num_rare_clients:
                raise ScenarioError(
                    f"availability.params.rare_rho: has {len(self.rare_rho)} entries; the "
                    f"scenario has {scenario.data.num_rare_clients} rare clients "
                    "((1 - data.frequent_fraction) x data.num_clients)"
                )
            k_f = k - len(self.rare_rho)
            if min(self.rare_rho) <= 0 or sum(self.rare_rho) + k_f * max(self.rare_rho) >= 1:
                raise ScenarioError(
                    "availability.params.rare_rho: values must be > 0 and leave every one "
                    f"of the {k_f} frequent clients more likely than the rarest ones "
                    f"(sum + {k_f} x max < 1); got {list(self.rare_rho)}"
                )


def ram_rho(params: RAMParams, scenario: Scenario, seed: int) -> np.ndarray:
    """Return the RAM's law rho: the scenario's, or drawn from the ``ram-rho`` stream."""
    if params.rho is not None:
        return np.asarray(params.rho, dtype=float)
    rng = stream("ram-rho", seed)
    return as_scenario_error(
        ram_probabilities,
        scenario.data.num_clients,
        scenario.data.num_rare_clients,
        rng,
        params.rare_rho,
    )


def build_ram(params: RAMParams, scenario: Scenario, seed: int) -> OracleClientManager:
    """Build the ``ram`` oracle's ClientManager for ``seed``."""
    rho = ram_rho(params, scenario, seed)
    return RandomAccessClientManager(rho, seed, clients_per_round=params.clients_per_round)


# ------------------------------------------------------------------- cyclic
@dataclass(frozen=True)
class CyclicParams(OracleParams):
    """Params of the ``cyclic`` oracle.

    Client k is active ``window`` consecutive rounds of every ``period``, from round
    phase_k + 1 on; ``phase`` (one per client) defaults to evenly spread starts, or with
    ``groups`` G to G contiguous blocks of ids taking turns (block g from round
    g P / G + 1). ``clients_per_round``: relay m of the active clients, drawn uniformly
    (default: all). Crawshaw and Liu's periodic participation (NeurIPS 2024, their
    FashionMNIST run) is period 20, window 4, groups 5, clients_per_round 10 of 250.
    """

    period: int = 10
    window: int = 5
    phase: tuple[int, ...] | None = None
    groups: int | None = None
    clients_per_round: int | None = None

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        check_range("availability.params.period", self.period, 1, None)
        check_range("availability.params.window", self.window, 1, self.period)
        k = scenario.data.num_clients
        if self.clients_per_round is not None:
            check_range("availability.params.clients_per_round", self.clients_per_round, 1, k)
        if self.groups is not None:
            check_range("availability.params.groups", self.groups, 1, k)
            if self.phase is not None:
                raise ScenarioError("availability.params: give phase or groups, not both")
        check_length("availability.params.phase", self.phase, k, "data.num_clients")
        bad = [i for i, v in enumerate(self.phase or ()) if not 0 <= v < self.period]
        if bad:
            raise ScenarioError(
                f"availability.params.phase[{bad[0]}]: {self.phase[bad[0]]} is outside "
                f"0..{self.period - 1}"
            )


def build_cyclic(params: CyclicParams, scenario: Scenario, seed: int) -> OracleClientManager:
    """Build the ``cyclic`` oracle's ClientManager for ``seed``."""
    k = scenario.data.num_clients
    if params.phase is not None:
        phase: Any = params.phase
    elif params.groups is not None:
        phase = group_phases(k, params.period, params.groups)
    else:
        phase = evenly_spread_phases(k, params.period)
    return CyclicClientManager(
        phase, params.period, params.window, seed, clients_per_round=params.clients_per_round
    )


# ----------------------------------------------------------- min-separation
@dataclass(frozen=True)
class MinSeparationParams(OracleParams):
    """Params of the ``min-separation`` oracle.

    Minimum-separation participation (Sun et al., ICLR 2025, Sec. 3): each round
    ``clients_per_round`` (m) clients among those that did not participate in the last
    ``separation`` (R) rounds, drawn proportionally to their weights ``q`` (one per
    client; default spread evenly from 1 down to ``q_min``: the paper's values are not
    public). Needs (R + 1) m <= data.num_clients; equality is the paper's cyclic case.
    """

    separation: int = 1
    clients_per_round: int = 1
    q: tuple[float, ...] | None = None
    q_min: float = 0.1

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        k = scenario.data.num_clients
        check_range("availability.params.clients_per_round", self.clients_per_round, 1, k)
        check_range("availability.params.q_min", self.q_min, 0.0, 1.0, lo_open=True)
        hi = k // self.clients_per_round - 1
        check_range("availability.params.separation", self.separation, 0, hi)
        check_length("availability.params.q", self.q, k, "data.num_clients")
        as_scenario_error(
            check_separation_law, self.weights(scenario), self.clients_per_round, self.separation
        )

    def weights(self, scenario: Scenario) -> np.ndarray:
        """Each client's q_i."""
        k = scenario.data.num_clients
        return fedar_spread(k, self.q_min) if self.q is None else np.asarray(self.q, dtype=float)


def build_min_separation(
    params: MinSeparationParams, scenario: Scenario, seed: int
) -> OracleClientManager:
    """Build the ``min-separation`` oracle's ClientManager for ``seed``."""
    return MinSeparationClientManager(
        params.weights(scenario),
        seed,
        clients_per_round=params.clients_per_round,
        separation=params.separation,
    )


# ------------------------------------------------------------------ the table
MARKOV: frozenset[Hidden] = frozenset({"pi", "lam"})

ORACLES: dict[str, OracleSpec[Any]] = {
    spec.name: spec
    for spec in (
        OracleSpec("ram", RAMParams, build_ram, hidden_law=ram_rho),
        OracleSpec("bernoulli", BernoulliParams, build_bernoulli, hidden=MARKOV),
        OracleSpec("markov", MarkovParams, build_markov, hidden=MARKOV),
        OracleSpec("clustered", ClusteredParams, build_clustered, hidden=MARKOV),
        OracleSpec("cyclic", CyclicParams, build_cyclic),
        OracleSpec("min-separation", MinSeparationParams, build_min_separation),
        OracleSpec("trace", TraceParams, build_trace),
        OracleSpec(
            "nonstationary",
            NonStationaryParams,
            build_nonstationary,
            round_law=nonstationary_round_law,
        ),
        OracleSpec("connected", ConnectedParams, build_connected),
    )
}


def oracle_spec(scenario: Scenario) -> OracleSpec[Any]:
    """Return the spec ``availability.oracle`` names."""
    return lookup(ORACLES, scenario.availability.oracle, "availability.oracle")


def oracle_params(scenario: Scenario) -> OracleParams:
    """Return ``availability.params`` as its oracle's params dataclass.

    ``availability.params`` as its oracle's params dataclass (keys and types
    checked; :func:`~fedram_flwr.registry.validate.validate` runs its ``check``).
    """
    spec = oracle_spec(scenario)
    return build_dataclass(spec.params, scenario.availability.params, "availability.params.")
