"""What a scenario adds to RC-FL's rFedFair (``algorithm.name: rfedfair``) beyond its
core's declarations, and the params of q-FFL, which is Flower's own ``QFedAvg`` (no core
of ours to derive them from): :data:`~fedram_flwr.registry.algorithms.ALGORITHMS` names
them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flwr.common import NDArrays

from fedram_flwr.registry.params import AlgorithmParams, client_shares
from fedram_flwr.registry.specs import Run
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.scenario.schema import check_range
from fedram_flwr.strategies.rc_fl import check_alpha
from fedram_flwr.strategies.rc_fl_math import per_client


@dataclass(frozen=True)
class RFedFairChecks(AlgorithmParams):
    """What the scenario adds to rFedFair's declarations: its alpha checked against the
    data (one value or one per client, each in [p_i, 1], p_i = m_i / m) when the
    scenario loads and when the run starts, before any training."""

    def check(self, scenario: Scenario) -> None:
        n = scenario.data.num_clients
        alpha = getattr(self, "alpha")
        if len(alpha) not in (1, n):
            raise ScenarioError(
                f"algorithm.params.alpha: give one value or one per client ({n}), got {len(alpha)}"
            )
        super().check(scenario)

    def core_kwargs(self, run: Run) -> dict[str, Any]:
        shares = client_shares(run)
        alpha = per_client(getattr(self, "alpha"), shares.size, "algorithm.params.alpha")
        try:  # fail before training, naming the field
            check_alpha(alpha, shares, "algorithm.params.alpha")
        except ValueError as err:
            raise ScenarioError(str(err)) from None
        return super().core_kwargs(run)


@dataclass(frozen=True)
class QFFLParams(AlgorithmParams):
    """q-FFL (Li et al. 2020) through Flower's QFedAvg: q (q = 0 is FedAvg's objective);
    QFedAvg's learning rate is the clients' ``training.lr`` (L = 1 / lr). Each client's
    F_k(w_t) is the loss of its first mini-batch at w_t: Li et al.'s whole-training-set
    loss only when ``training.batch_size`` >= its examples (``strategies/qffl.py``)."""

    q: float = 1.0

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.q", self.q, 0.0, None)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        return {
            "q_param": self.q,
            "qffl_learning_rate": run.scenario.training.lr,
            "initial_arrays": initial,
        }

    def message_kwargs(self, run: Run) -> dict[str, Any]:
        """Flower's Message-API ``QFedAvg`` names them ``q`` and ``client_learning_rate``."""
        return {"q": self.q, "client_learning_rate": run.scenario.training.lr}
