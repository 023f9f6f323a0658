"""The Markov family of oracles' params: ``bernoulli``, ``markov`` and ``clustered``.

Each params dataclass validates its ``availability.params`` section (errors naming the
field and the allowed values) and builds its ClientManager; the table of every oracle is
:data:`fedram_flwr.availability.specs.oracles.ORACLES`. Kept apart from ``oracles.py``
to keep each module short.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from fedram_flwr.availability import (
    BernoulliClientManager,
    MarkovClientManager,
    OracleClientManager,
    ca_fed_cluster_law,
    ca_fed_markov_law,
    check_markov_law,
    contiguous_clusters,
    fedar_spread,
    label_permutation,
)
from fedram_flwr.availability.specs.checks import as_scenario_error, check_ids, check_length
from fedram_flwr.availability.specs.labels import check_label_rule, label_p
from fedram_flwr.availability.specs.oracle_spec import OracleParams
from fedram_flwr.rng import stream
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.scenario.schema import check_range


def label_perm(scenario: Scenario, label_correlated: bool, pi: np.ndarray) -> np.ndarray:
    """Return the permutation of clients by label.

    Identity, or when ``label_correlated`` the re-assignment by label of
    :func:`~fedram_flwr.availability.label_permutation` on ``data.client_classes``.
    """
    if not label_correlated:
        return np.arange(pi.size)
    if scenario.data.client_classes is None:
        raise ScenarioError(
            "availability.params.label_correlated: needs data.client_classes (the classes "
            "of each client) to rank clients by label; without it the rare-pattern split "
            "already gives the rare classes to the least available clients"
        )
    return label_permutation(pi, scenario.data.client_classes)


# ------------------------------------------------------------ Markov family
@dataclass(frozen=True)
class BernoulliParams(OracleParams):
    """Params of the ``bernoulli`` oracle.

    Independent Bernoulli availability (FedAR Sec. 6.1): explicit ``p`` (one per
    client), or spread evenly from 1 (client 0) down to ``p_min`` (FedAR: 0.1
    "challenging", 0.5 "mild"), or ``p: labels``: the FedAWE paper's p_i = <nu_i, phi>
    from each client's labels, Phi_c = ``phi_max`` (App. J.3; :mod:`.labels`).
    ``label_correlated``: clients holding lower class ids get the higher p
    (:func:`~fedram_flwr.availability.label_permutation`).
    """

    p: tuple[float, ...] | Literal["labels"] | None = None
    p_min: float = 0.1
    label_correlated: bool = False
    phi_max: tuple[float, ...] | None = None

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        check_range("availability.params.p_min", self.p_min, 0.0, 1.0)
        if self.p == "labels":
            if self.label_correlated:
                raise ScenarioError(
                    "availability.params.label_correlated: p: labels already ties each "
                    "client's p to its labels; give one of them"
                )
            return check_label_rule(scenario, self.phi_max)
        if self.phi_max is not None:
            raise ScenarioError("availability.params.phi_max: only with p: labels")
        check_length("availability.params.p", self.p, scenario.data.num_clients, "data.num_clients")
        p = self.law(scenario)
        as_scenario_error(check_markov_law, p, np.zeros_like(p), pi_field="availability.params.p")

    def law(self, scenario: Scenario) -> np.ndarray:
        """Each client's p, permuted by label when ``label_correlated``."""
        k = scenario.data.num_clients
        p = fedar_spread(k, self.p_min) if self.p is None else np.asarray(self.p, dtype=float)
        return p[label_perm(scenario, self.label_correlated, p)]


def build_bernoulli(params: BernoulliParams, scenario: Scenario, seed: int) -> OracleClientManager:
    """Build the ``bernoulli`` oracle's ClientManager for ``seed``."""
    if params.p == "labels":
        return BernoulliClientManager(label_p(scenario, seed, params.phi_max), seed)
    return BernoulliClientManager(params.law(scenario), seed)


@dataclass(frozen=True)
class MarkovParams(OracleParams):
    """Params of the ``markov`` oracle.

    Two-state Markov chain per client (CA-Fed Sec. III-D): explicit ``pi`` and
    ``lam`` (one each per client), or the paper's generator (Sec. V-A a): half the
    clients pi = 1/2 + g, half pi = 1/2 - g, each half split into lambda = nu and
    lambda ~ N(0, eps^2). ``label_correlated``: clients holding lower class ids get the
    higher pi (:func:`~fedram_flwr.availability.label_permutation`).
    """

    pi: tuple[float, ...] | None = None
    lam: tuple[float, ...] | None = None
    g: float = 0.4
    nu: float = 0.9
    eps: float = 1e-2
    label_correlated: bool = False

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        check_range("availability.params.g", self.g, 0.0, 0.5)
        check_range("availability.params.eps", self.eps, 0.0, None)
        lo = -(0.5 - self.g) / (0.5 + self.g)  # lambda_min of pi = 1/2 -+ g
        if not lo <= self.nu < 1:
            raise ScenarioError(
                f"availability.params.nu: {self.nu!r} is outside the allowed range "
                f"[{lo:.4g}, 1) for pi = 1/2 -+ g"
            )
        if (self.pi is None) != (self.lam is None):
            raise ScenarioError(
                "availability.params: give both pi and lam (one per client), or neither "
                "(the paper's generator with g, nu, eps)"
            )
        k = scenario.data.num_clients
        check_length("availability.params.pi", self.pi, k, "data.num_clients")
        check_length("availability.params.lam", self.lam, k, "data.num_clients")
        as_scenario_error(check_markov_law, *self.law(scenario, 0))

    def law(self, scenario: Scenario, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Each client's (pi, lambda): the scenario's, or generated from ``markov-law``."""
        if self.pi is None:
            rng = stream("markov-law", seed)
            pi, lam = ca_fed_markov_law(scenario.data.num_clients, self.g, self.nu, self.eps, rng)
        else:
            pi, lam = np.asarray(self.pi, dtype=float), np.asarray(self.lam, dtype=float)
        perm = label_perm(scenario, self.label_correlated, pi)
        return pi[perm], lam[perm]


def build_markov(params: MarkovParams, scenario: Scenario, seed: int) -> OracleClientManager:
    """Build the ``markov`` oracle's ClientManager for ``seed``."""
    return MarkovClientManager(*params.law(scenario, seed), seed)


@dataclass(frozen=True)
class ClusteredParams(OracleParams):
    """Params of the ``clustered`` oracle.

    One Markov chain per cluster switches all its clients together (CA-Fed Sec. V-B
    e). ``cluster_of``: each client's cluster (default: equal contiguous blocks of ids);
    explicit ``pi`` and ``lam`` per cluster, or the paper's: the first half of the
    clusters pi = 1/2 + g, lambda = 0, the others pi = 1/2 - g, lambda_c = c / C.
    """

    num_clusters: int = 10
    cluster_of: tuple[int, ...] | None = None
    pi: tuple[float, ...] | None = None
    lam: tuple[float, ...] | None = None
    g: float = 0.4

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        k = scenario.data.num_clients
        check_range("availability.params.num_clusters", self.num_clusters, 1, k)
        check_range("availability.params.g", self.g, 0.0, 0.5)
        if (self.pi is None) != (self.lam is None):
            raise ScenarioError(
                "availability.params: give both pi and lam (one per cluster), or neither "
                "(the paper's clusters with g)"
            )
        c = self.num_clusters
        check_length("availability.params.cluster_of", self.cluster_of, k, "data.num_clients")
        check_length("availability.params.pi", self.pi, c, "availability.params.num_clusters")
        check_length("availability.params.lam", self.lam, c, "availability.params.num_clusters")
        pi, lam = self.law()
        as_scenario_error(
            check_markov_law, np.asarray(pi, dtype=float), np.asarray(lam, dtype=float)
        )
        check_ids("availability.params.cluster_of", self.cluster_of, c, "a cluster")

    def law(self) -> tuple[Any, Any]:
        """Each cluster's (pi, lambda)."""
        return (
            ca_fed_cluster_law(self.num_clusters, self.g)
            if self.pi is None
            else (self.pi, self.lam)
        )

    def clusters(self, scenario: Scenario) -> Any:
        """Each client's cluster."""
        k, c = scenario.data.num_clients, self.num_clusters
        return contiguous_clusters(k, c) if self.cluster_of is None else self.cluster_of


def build_clustered(params: ClusteredParams, scenario: Scenario, seed: int) -> OracleClientManager:
    """Build the ``clustered`` oracle's ClientManager for ``seed``."""
    pi, lam = params.law()
    return MarkovClientManager(pi, lam, seed, cluster_of=params.clusters(scenario))
