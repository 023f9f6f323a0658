"""The base of the reweighted FedAvg rules: one step with per-client weights omega_i.

    w_{t+1} = w_t - eta_g (1/N) sum_{i in A(t)} omega_i (w_t - w_{t,K}^i)

:func:`reweighted_step` is the step, :class:`ReweightedCore` the core every rule of
:mod:`~fedram_flwr.strategies.participation` (FedAvg(S), FedAvg over all clients,
FedAvg-IS) and :mod:`~fedram_flwr.strategies.fedau` (FedAU) subclasses with its own
omega_i (:meth:`ReweightedCore.weights`). Re-exported by
:mod:`~fedram_flwr.strategies.participation`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedram_flwr.protocol import Arrays, ClientReply
from fedram_flwr.strategies.core import Outcome
from fedram_flwr.strategies.vector import VectorCore, client_models


# ------------------------------------------------------------------ pure functions
def reweighted_step(
    w: np.ndarray,
    client_models: Iterable[np.ndarray],
    weights: Sequence[float],
    num_clients: int,
    server_lr: float = 1.0,
) -> np.ndarray:
    """Step w_{t+1} = w_t - eta_g (1/N) sum_{i in A(t)} omega_i (w_t - w_{t,K}^i).

    Accumulated in float64, one client at a time (eta_g = 1 multiplies exactly: the
    step is then w - (1/N) sum_i ...).

    Parameters
    ----------
    w : np.ndarray
        w_t, shape (d,), float32.
    client_models : iterable of np.ndarray
        w_{t,K}^i, shape (d,), of the clients in A(t).
    weights : sequence of float
        omega_i, one per model, >= 0.
    num_clients : int
        N, >= 1.
    server_lr : float
        eta_g, the global learning rate, > 0.

    Returns
    -------
    np.ndarray
        w_{t+1}, shape (d,), float32.
    """
    acc = np.zeros(w.shape, dtype=np.float64)
    for model, omega in zip(client_models, weights, strict=True):
        acc += omega * (w - model)
    return (w - server_lr * (acc / num_clients)).astype(np.float32)


# ------------------------------------------------------------------------ cores
@dataclass(frozen=True)
class ReweightedState:
    """The reweighted cores' state.

    Parameters
    ----------
    w : np.ndarray
        w_t, shape (d,), float32.
    estimator : Any
        The rule's own estimator state: ``None`` for FedAvg(S), the availability counts
        for FedAvg-IS, :class:`FedAUState` for FedAU.
    """

    w: np.ndarray
    estimator: Any = None


@dataclass(frozen=True, eq=False, kw_only=True)
class ReweightedCore(VectorCore[ReweightedState]):
    """The base of the reweighted cores: a step with per-client weights omega_i.

    Steps by :func:`reweighted_step` with the omega_i of :meth:`weights` and eta_g =
    ``server_lr`` (exactly 1 unless a subclass declares it).
    """

    def init(self, initial_arrays: Sequence[np.ndarray]) -> ReweightedState:
        """Start from the initial model and :meth:`init_estimator`."""
        return ReweightedState(self.vector(initial_arrays), self.init_estimator())

    def init_estimator(self) -> Any:
        """Return the estimator state before round 1 (none here)."""
        return None

    def arrays(self, state: ReweightedState) -> Arrays:
        """Broadcast w_t."""
        return self.unflatten(state.w)

    def weights(
        self, estimator: Any, server_round: int, active: list[int], elapsed: int
    ) -> tuple[np.ndarray, Any]:
        """Return omega_i of the active clients and the estimator after round t.

        Parameters
        ----------
        estimator : Any
            The estimator state before round t.
        server_round : int
            t, >= 1.
        active : list of int
            The partition ids that replied, in 0..N-1.
        elapsed : int
            Rounds since the last aggregation, >= 1.

        Returns
        -------
        tuple of (np.ndarray, Any)
            omega_i, shape (len(active),), and the estimator after round t.
        """
        raise NotImplementedError

    def aggregate(
        self,
        state: ReweightedState,
        server_round: int,
        replies: Sequence[ClientReply],
        elapsed: int,
    ) -> Outcome[ReweightedState]:
        """Weigh the replies by :meth:`weights` and step by :func:`reweighted_step`."""
        active = [r.partition_id for r in replies]
        omega, estimator = self.weights(state.estimator, server_round, active, elapsed)
        if not active:  # nobody available: the estimator counts the round, w stays
            return Outcome(ReweightedState(state.w, estimator), {}, aggregated=False)
        models = (model for _, model in client_models(replies, state.w))
        w = reweighted_step(state.w, models, omega, self.num_clients, self.server_lr)
        return Outcome(
            ReweightedState(w, estimator),
            {
                "lr": self.eta(server_round),
                "mean-weight": float(np.mean(omega)),
            },
        )
