"""AFL: agnostic federated learning.

M. Mohri, G. Sivek, A. T. Suresh, "Agnostic Federated Learning", ICML 2019. The model
minimises the worst mixture of the client losses, min_w max_{lambda in Delta_n}
sum_k lambda_k f_k(w), by stochastic gradient descent on w and projected gradient
ascent on lambda (their Algorithm 1, Stochastic-AFL), both at (w_t, lambda_t):

    w_{t+1} = w_t - gamma_w sum_k lambda_k grad f_k(w_t),
    lambda_{t+1} = Proj_Delta(lambda_t + gamma_lambda (f_1(w_t), ..., f_n(w_t))).

Federated form used here (and by the RC-FL paper's baseline): each client runs the same
local SGD as FedAvg's from w_t and reports f_k(w_t); the server takes the
lambda-weighted mean of the returned models (one local step: exactly the w step above)
and the lambda step with the reported losses (clients not heard from add 0).
"""

from __future__ import annotations

import numpy as np
from flwr.common import (
    FitRes,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy.aggregate import aggregate

from fedram_flwr.protocol import PARTITION_ID
from fedram_flwr.strategies.ca_fed import RECEIVED_LOSS
from fedram_flwr.strategies.fedavg import FedAvg, in_partition_order


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the probability simplex (sort-based; Held et al. 1974,
    Duchi et al. 2008): max(v - theta, 0) with theta making the sum 1."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.arange(1, v.size + 1)
    rho = np.flatnonzero(u - css / k > 0)[-1]
    return np.maximum(v - css[rho] / (rho + 1), 0.0)


def afl_lambda_step(lam: np.ndarray, losses: dict[int, float], lr: float) -> np.ndarray:
    """lambda <- Proj_Delta(lambda + gamma_lambda g), g_k = f_k(w_t) for the clients
    that reported a loss, 0 for the others."""
    g = np.zeros_like(lam)
    for k, loss in losses.items():
        g[k] = loss
    return project_simplex(lam + lr * g)


class AFL(FedAvg):
    """AFL as a Flower Strategy: holds lambda over ``num_clients`` clients (uniform at
    start), aggregates the returned models with weights lambda_k (renormalised over the
    clients that returned) and then steps lambda with the losses they reported.

    Clients return their trained model and report ``partition-id`` and
    ``received-loss`` = f_k(w_t), their loss at the received model, in the fit metrics
    (``CAFedClient`` does: the loss of its first batch, the full training loss when the
    batch holds all of the client's data). Metrics add ``lambda-max`` and the entropy of
    lambda (``lambda-entropy``, log n when uniform)."""

    def __init__(self, *, num_clients: int, lr_lambda: float = 0.01, **fedavg_kwargs) -> None:
        if num_clients < 1 or lr_lambda < 0:
            raise ValueError(
                f"num_clients ({num_clients}) must be >= 1, "
                f"algorithm.params.lr_lambda ({lr_lambda}) >= 0"
            )
        super().__init__(**fedavg_kwargs)
        self.lr_lambda = lr_lambda
        self.lam = np.full(num_clients, 1.0 / num_clients)

    def __repr__(self) -> str:
        return f"AFL(n={self.lam.size}, lr_lambda={self.lr_lambda})"

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        if not results or (failures and not self.accept_failures):
            return None, {}
        ordered = in_partition_order(results)
        ids = [int(r.metrics[PARTITION_ID]) for r in ordered]
        weights = self.lam[ids]
        new = None  # every returning client has lambda_k = 0: the model stays
        if weights.sum() > 0:
            models = [
                (parameters_to_ndarrays(r.parameters), float(w)) for r, w in zip(ordered, weights)
            ]
            new = ndarrays_to_parameters(aggregate(models))  # type: ignore[arg-type]
        losses = {k: float(r.metrics[RECEIVED_LOSS]) for k, r in zip(ids, ordered)}
        self.lam = afl_lambda_step(self.lam, losses, self.lr_lambda)
        metrics: dict[str, Scalar] = {}
        if self.fit_metrics_aggregation_fn:
            metrics = self.fit_metrics_aggregation_fn(
                [(r.num_examples, r.metrics) for r in ordered]
            )
        positive = self.lam[self.lam > 0]
        return new, {
            **metrics,
            "lambda-max": float(self.lam.max()),
            "lambda-entropy": float(-(positive * np.log(positive)).sum()),
        }
