"""The ``nonstationary`` oracle's spec (FedAWE's non-stationary law).

The ``nonstationary`` oracle's spec: FedAWE's p_i^t = p_i f_i(t) (Xiang et al.,
NeurIPS 2024, Sec. 7, App. J.3; the law is
:mod:`fedram_flwr.availability.nonstationary`).

p_i is the scenario's (``p``) or the paper's rule p_i = <nu_i, phi> on each client's
training labels (:mod:`fedram_flwr.availability.specs.labels`, shared with ``bernoulli``'s
``p: labels``), which needs the data partition at build time: it is read with no rare
clients, so the rule requires a partition that does not depend on them (the rare clients
follow from the law, which would be circular otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedram_flwr.availability.nonstationary import (
    Dynamics,
    NonStationaryClientManager,
    NonStationaryLaw,
)
from fedram_flwr.availability.specs.checks import check_length
from fedram_flwr.availability.specs.labels import check_label_rule, label_p
from fedram_flwr.availability.specs.oracle_spec import OracleParams
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.scenario.schema import check_range


@dataclass(frozen=True)
class NonStationaryParams(OracleParams):
    """Params of the ``nonstationary`` oracle.

    FedAWE's dynamics (App. J.3) with the paper's P = 20, gamma = 0.3, delta_0 = 0.1
    and the staircase's second-half level 0.4 (``staircase_low``); ``dynamics`` defaults
    to ``sine`` (the paper's parameter studies, Tables 8-10). ``p``: each client's base
    probability; default the paper's p_i = <nu_i, phi>, [phi]_c ~ U(0, Phi_c) with
    ``phi_max`` = (Phi_c) per class (default: 1 for the first half of the classes, 0.5
    for the rest; its length is checked against the data's classes at build).
    """

    dynamics: Dynamics = "sine"
    period: int = 20
    gamma: float = 0.3
    delta0: float = 0.1
    staircase_low: float = 0.4
    p: tuple[float, ...] | None = None
    phi_max: tuple[float, ...] | None = None

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        check_range("availability.params.period", self.period, 1, None)
        check_range("availability.params.gamma", self.gamma, 0.0, 0.5)  # keeps f >= 0
        check_range("availability.params.delta0", self.delta0, 0.0, 1.0)
        check_range("availability.params.staircase_low", self.staircase_low, 0.0, 1.0)
        n = scenario.data.num_clients
        check_length("availability.params.p", self.p, n, "data.num_clients")
        for i, v in enumerate(self.p or ()):
            check_range(f"availability.params.p[{i}]", v, 0.0, 1.0)
        if self.p is not None and self.phi_max is not None:
            raise ScenarioError(
                "availability.params: give p (each client's base probability) or phi_max "
                "(the paper's rule p_i = <nu_i, phi>), not both"
            )
        if self.p is None:
            check_label_rule(scenario, self.phi_max)

    def base_p(self, scenario: Scenario, seed: int) -> np.ndarray:
        """Return each client's base probability p_i.

        Each client's p_i: the scenario's, or <nu_i, phi> on the data of ``seed``
        with phi from the ``fedawe-phi`` stream (App. J.3; :func:`label_p`).
        """
        if self.p is not None:
            return np.asarray(self.p, dtype=float)
        return label_p(scenario, seed, self.phi_max)


def nonstationary_round_law(
    params: NonStationaryParams, scenario: Scenario, seed: int
) -> NonStationaryLaw:
    """Return the law p_i^t = p_i f_i(t) the oracle of ``seed`` draws with, per server round."""
    return build_nonstationary(params, scenario, seed).law


def build_nonstationary(
    params: NonStationaryParams, scenario: Scenario, seed: int
) -> NonStationaryClientManager:
    """Build the ``nonstationary`` oracle's ClientManager for ``seed``."""
    return NonStationaryClientManager(
        params.base_p(scenario, seed),
        params.dynamics,
        seed,
        period=params.period,
        gamma=params.gamma,
        delta0=params.delta0,
        low=params.staircase_low,
    )
