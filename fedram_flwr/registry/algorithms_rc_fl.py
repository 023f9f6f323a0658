"""The params of RC-FL's rFedFair (``algorithm.name: rfedfair``) and of its two baselines,
AFL and q-FFL (Flower's QFedAvg), which :data:`~fedram_flwr.registry.algorithms.ALGORITHMS`
names. Kept apart from ``algorithms.py``, as ``algorithms_fedawe.py`` is, to keep each
module short."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flwr.common import NDArrays

from fedram_flwr.config import Scenario, ScenarioError
from fedram_flwr.registry.specs import AlgorithmParams, Run, client_shares
from fedram_flwr.schema import check_range
from fedram_flwr.strategies.rc_fl import check_alpha, per_client


@dataclass(frozen=True)
class RFedFairParams(AlgorithmParams):
    """rFedFair (RC-FL Alg. 1): alpha_i (one value for every client or one per client,
    each in [p_i, 1], p_i = m_i / m; checked against the data when the run starts), the
    smoothing mu of phi_mu (Sec. 4), eta's step size (default: training.lr, Alg. 1's
    beta for both) and start, and ``clients_per_round`` K for partial participation (K
    draws with replacement by p_i; default: full participation)."""

    alpha: tuple[float, ...] = (0.5,)
    mu: float = 0.01
    lr_eta: float | None = None
    eta_init: float = 0.0
    clients_per_round: int | None = None

    def check(self, scenario: Scenario) -> None:
        n = scenario.data.num_clients
        if len(self.alpha) not in (1, n):
            raise ScenarioError(
                f"algorithm.params.alpha: give one value or one per client ({n}), "
                f"got {len(self.alpha)}"
            )
        for i, a in enumerate(self.alpha):
            check_range(f"algorithm.params.alpha[{i}]", a, 0.0, 1.0, lo_open=True)
        check_range("algorithm.params.mu", self.mu, 0.0, None, lo_open=True)
        if self.lr_eta is not None:
            check_range("algorithm.params.lr_eta", self.lr_eta, 0.0, None)
        if self.clients_per_round is not None:
            check_range("algorithm.params.clients_per_round", self.clients_per_round, 1, None)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        shares = client_shares(run)
        alpha = per_client(self.alpha, shares.size, "algorithm.params.alpha")
        try:  # fail before training, naming the field
            check_alpha(alpha, shares, "algorithm.params.alpha")
        except ValueError as err:
            raise ScenarioError(str(err)) from None
        lr = run.scenario.training.lr
        return {
            "initial_arrays": initial,
            "alpha": self.alpha,
            "mu": self.mu,
            "lr_eta": lr if self.lr_eta is None else self.lr_eta,
            "eta_init": self.eta_init,
            "clients_per_round": self.clients_per_round,
            "seed": run.seed,
        }


@dataclass(frozen=True)
class AFLParams(AlgorithmParams):
    """AFL (Mohri et al. 2019): gamma_lambda, the ascent step on the mixture weights."""

    lr_lambda: float = 0.01

    def check(self, scenario: Scenario) -> None:
        check_range("algorithm.params.lr_lambda", self.lr_lambda, 0.0, None)

    def strategy_kwargs(self, run: Run, initial: NDArrays) -> dict[str, Any]:
        return {
            "initial_arrays": initial,
            "num_clients": run.scenario.data.num_clients,
            "lr_lambda": self.lr_lambda,
        }


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
