"""Fed-CVaR-Avg: federated learning under a Random Access Model.

P. Theodoropoulos, K. E. Nikolakakis, D. S. Kalogerias, "Federated Learning Under
Restricted User Availability", ICASSP 2024 (long version: ``papers/fed-cvar-avg_*``).

The risk-aware objective (eq. 4) mixes the CVaR over the RAM law with the mean,
and is minimised jointly in (theta, t) through the per-user objective (eq. 6)

    G_i(theta, t) = (1 - gamma) [t + (f_i(theta) - t)_+ / alpha] + gamma f_i(theta).

Algorithm 1: the server broadcasts the (theta, t) the RAM relayed; a user runs H
epochs of mini-batch SGD on G_i(b; theta, t) with step sizes eta_theta, eta_t (line 8)
and forwards (theta, t) to the RAM. With alpha = 1 or gamma = 1 (and t starting below
the losses) this is FedAvg. The client's math (eq. 6 and its gradient weights) lives in
:mod:`fedram_flwr.objectives`, the (theta, t) layout in :mod:`fedram_flwr.protocol`.

Flower's Message API: ``FedCVaRAvg`` in :mod:`fedram_flwr.message_api` (same core, same
arguments; ``strategy.start(grid=..., initial_arrays=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedram_flwr.objectives import cvar_gradient_weights, cvar_local_objective
from fedram_flwr.protocol import (
    CVAR_ALPHA,
    CVAR_GAMMA,
    LR_T,
    THRESHOLD_T,
    Arrays,
    join_theta_t,
    split_theta_t,
)
from fedram_flwr.strategies.base import CoreStrategy
from fedram_flwr.strategies.fedavg import ModelState, WeightedMeanCore
from fedram_flwr.strategies.hyper import hyper

__all__ = [
    "FedCVaRAvg",
    "FedCVaRAvgCore",
    "cvar_gradient_weights",
    "cvar_local_objective",
    "join_theta_t",
    "split_theta_t",
]


@dataclass(frozen=True)
class FedCVaRAvgCore(WeightedMeanCore):
    """Fed-CVaR-Avg's server (Theodoropoulos et al., ICASSP 2024, Alg. 1).

    State (theta, t) packed as the broadcast arrays; adopts the relayed (theta, t) (an
    example-weighted average when the RAM relays m > 1), sends (alpha, gamma, eta_t).
    It never reads rho.
    """

    alpha: float = hyper(
        0.1, doc="alpha, the CVaR level (eq. 4; 1: the mean, FedAvg)", lo=0.0, hi=1.0, lo_open=True
    )
    gamma: float = hyper(
        0.1, doc="gamma, the weight of the mean beside the CVaR (eq. 4)", lo=0.0, hi=1.0
    )
    lr_t: float = hyper(5e-4, doc="eta_t, the clients' step size on t (Alg. 1 line 8)", lo=0.0)
    t_init: float = hyper(0.0, doc="t before round 1 (the authors' code: 0)")

    def init(self, initial_arrays: Sequence[np.ndarray]) -> ModelState:
        """Start from (theta_0, t_init), packed as one list of arrays."""
        return ModelState(join_theta_t(initial_arrays, self.t_init))

    def fit_config(self, state: ModelState, server_round: int) -> dict[str, Any]:
        """Send alpha, gamma and eta_t (eq. 6, Alg. 1 line 8)."""
        return {CVAR_ALPHA: self.alpha, CVAR_GAMMA: self.gamma, LR_T: self.lr_t}

    def evaluated(self, arrays: Sequence[np.ndarray]) -> tuple[Arrays, dict[str, Any]]:
        """Evaluate theta only; report the global t beside it."""
        theta, t = split_theta_t(arrays)
        return theta, {THRESHOLD_T: t}

    def diagnostics(self, state: ModelState) -> dict[str, Any]:
        """Log the global t."""
        return {THRESHOLD_T: split_theta_t(state.arrays)[1]}


class FedCVaRAvg(CoreStrategy):
    """Fed-CVaR-Avg (Theodoropoulos et al., ICASSP 2024, Alg. 1) as a Flower Strategy.

    Over :class:`FedCVaRAvgCore`.

    ``evaluate_fn`` sees theta only; the reported metrics add the global t. Like
    FedAvg it also serves clients that report no partition id (only one is relayed).
    """

    core_type = FedCVaRAvgCore
    needs_partition_id = False
