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

Flower's Message API: ``AFL`` in :mod:`fedram_flwr.message_api` (same core, same
arguments; ``strategy.start(grid=..., initial_arrays=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedram_flwr.protocol import RECEIVED_LOSS, Arrays, ClientReply
from fedram_flwr.strategies.base import CoreStrategy
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.fedavg import weighted_average
from fedram_flwr.strategies.hyper import hyper, num_clients_hyper


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Project ``v`` onto the probability simplex (Euclidean, sort-based).

    Held et al. 1974, Duchi et al. 2008: max(v - theta, 0) with theta making the sum 1
    (Proj_Delta of AFL's Algorithm 1).

    Parameters
    ----------
    v : np.ndarray
        Shape (n,), any real values, n >= 1.

    Returns
    -------
    np.ndarray
        Shape (n,): the nearest point of the simplex, entries in [0, 1] summing to 1.
    """
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.arange(1, v.size + 1)
    rho = np.flatnonzero(u - css / k > 0)[-1]
    return np.maximum(v - css[rho] / (rho + 1), 0.0)


def afl_lambda_step(lam: np.ndarray, losses: dict[int, float], lr: float) -> np.ndarray:
    """Take AFL's ascent step on the mixture weights (Mohri et al. 2019, Algorithm 1).

    lambda <- Proj_Delta(lambda + gamma_lambda g), g_k = f_k(w_t) for the clients that
    reported a loss, 0 for the others.

    Parameters
    ----------
    lam : np.ndarray
        Shape (N,): lambda_t, on the simplex.
    losses : dict of int to float
        f_k(w_t), the loss each reporting client k (a partition id in 0..N-1) had at
        the received model, >= 0.
    lr : float
        gamma_lambda, the ascent step, >= 0.

    Returns
    -------
    np.ndarray
        lambda_{t+1}, shape (N,), on the simplex.
    """
    g = np.zeros_like(lam)
    for k, loss in losses.items():
        g[k] = loss
    return project_simplex(lam + lr * g)


@dataclass(frozen=True)
class AFLState:
    """AFL's server state: the global model and the mixture weights.

    Parameters
    ----------
    arrays : Arrays
        w_t, the global model's arrays.
    lam : np.ndarray
        Shape (N,): lambda_t, the mixture weights over the N clients, on the simplex.
    """

    arrays: Arrays
    lam: np.ndarray


@dataclass(frozen=True, eq=False, kw_only=True)
class AFLCore(Core[AFLState]):
    """AFL's core (Mohri et al., ICML 2019, Algorithm 1, Stochastic-AFL).

    lambda uniform at start; a round aggregates the returned models with weights
    lambda_k (renormalised over the clients that returned; no step when all are 0) and
    then steps lambda with the losses they reported (``received-loss``). Diagnostics:
    ``lambda-max`` and the entropy of lambda (``lambda-entropy``, log n when uniform).
    """

    num_clients: int = num_clients_hyper()
    lr_lambda: float = hyper(
        0.01, doc="gamma_lambda, the ascent step on the mixture weights lambda", lo=0.0
    )

    def init(self, initial_arrays: Sequence[np.ndarray]) -> AFLState:
        """Start from the initial model and uniform lambda."""
        return AFLState(list(initial_arrays), np.full(self.num_clients, 1.0 / self.num_clients))

    def arrays(self, state: AFLState) -> Arrays:
        """Broadcast the global model."""
        return state.arrays

    def aggregate(
        self, state: AFLState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[AFLState]:
        """Average the models with weights lambda_k, then step lambda with the losses."""
        if not replies:
            return Outcome(state, {}, aggregated=False)
        ids = [r.partition_id for r in replies]
        weights = state.lam[ids]
        arrays = state.arrays  # every returning client has lambda_k = 0: the model stays
        moved = bool(weights.sum() > 0)
        if moved:
            arrays = weighted_average([(r.arrays(), float(w)) for r, w in zip(replies, weights)])
        losses = {k: r.metric(RECEIVED_LOSS) for k, r in zip(ids, replies)}
        lam = afl_lambda_step(state.lam, losses, self.lr_lambda)
        positive = lam[lam > 0]
        diagnostics = {
            "lambda-max": float(lam.max()),
            "lambda-entropy": float(-(positive * np.log(positive)).sum()),
        }
        return Outcome(AFLState(arrays, lam), diagnostics, aggregated=moved)

    def diagnostics(self, state: AFLState) -> dict[str, Any]:
        """Log lambda."""
        return {"lambda": state.lam}


class AFL(CoreStrategy):
    """AFL (Mohri et al., ICML 2019) as a Flower Strategy over :class:`AFLCore`.

    Clients return their trained model and report ``partition-id`` and
    ``received-loss`` = f_k(w_t), their loss at the received model, in the fit metrics
    (``CAFedClient`` does: the loss of its first batch, the full training loss when the
    batch holds all of the client's data).
    """

    core_type = AFLCore
