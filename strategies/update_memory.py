"""The stale-update memory that MIFA, FedVARP, FedStale and FedAR share, and its base core.

:class:`UpdateMemory` keeps every client's latest update G_i (FedAR eq. 4; MIFA's G_i,
FedVARP's y_i): one preallocated float32 (N x d) array whose rows are overwritten in
place, never copied, plus the running sum of its rows and the inactivity counters tau
(FedAR eq. 5, :func:`inactivity`). :class:`MemoryCore` is the base of the cores over it
(store the round's updates, advance tau, step along the rule's direction);
:func:`mifa_direction` and :func:`fedvarp_direction` are the two directions the others
build on. The rules themselves: :mod:`~fedram_flwr.strategies.stale_updates` (MIFA,
FedVARP, which re-exports this module's names), :mod:`~fedram_flwr.strategies.fedstale`
and :mod:`~fedram_flwr.strategies.fedar`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedram_flwr.protocol import Arrays, ClientReply
from fedram_flwr.strategies.core import Outcome
from fedram_flwr.strategies.vector import VectorCore, client_models


# ------------------------------------------------------------------ pure functions
def inactivity(tau: np.ndarray, active: np.ndarray, elapsed: int = 1) -> np.ndarray:
    """Count the rounds since each client's update: FedAR eq. (5).

    tau(i, t) = 0 if i in A(t), else tau(i, t - 1) + 1.

    Parameters
    ----------
    tau : np.ndarray
        Shape (N,), int: tau(i, t - 1), rounds.
    active : np.ndarray
        Shape (N,), bool: i in A(t).
    elapsed : int
        Rounds since the previous call, >= 1 (> 1: rounds in which nobody was
        available, counted first).

    Returns
    -------
    np.ndarray
        tau(i, t), shape (N,).
    """
    return np.where(active, 0, tau + elapsed)


def mifa_direction(total: np.ndarray, num_clients: int) -> np.ndarray:
    """Return MIFA's direction (Gu et al. 2021, Alg. 1): (1/N) sum_i G_i.

    Parameters
    ----------
    total : np.ndarray
        Shape (d,): sum_i G_i over all N clients' latest updates.
    num_clients : int
        N, >= 1.

    Returns
    -------
    np.ndarray
        v_t, shape (d,).
    """
    return total / num_clients


def fedvarp_direction(
    total_before: np.ndarray, total_after: np.ndarray, num_clients: int, num_active: int
) -> np.ndarray:
    """Return FedVARP's direction (Jhunjhunwala et al. 2022, Alg. 1).

    v_t = (1/N) sum_j y_j + (1/|S|) sum_{i in S} (Delta_i - y_i), with y the memory
    before the round; sum_{i in S} (Delta_i - y_i) = total_after - total_before.

    Parameters
    ----------
    total_before, total_after : np.ndarray
        Shape (d,): the memory's row sum before and after storing the round's updates.
    num_clients : int
        N, >= 1.
    num_active : int
        |S|, >= 0 (0: the memory mean alone).

    Returns
    -------
    np.ndarray
        v_t, shape (d,).
    """
    mean = total_before / num_clients
    return mean if num_active == 0 else mean + (total_after - total_before) / num_active


@dataclass
class UpdateMemory:
    """Each client's latest update (FedAR eq. 4 G[t]), their running sum and eq. (5).

    Parameters
    ----------
    updates : np.ndarray
        Shape (N, d), float32: row i = G_i, zero until client i is seen.
    total : np.ndarray
        Shape (d,), float64: sum_i G_i, kept as rows change (MIFA's aggregate).
    tau : np.ndarray
        Shape (N,), int64: rounds since G_i was refreshed (eq. 5).
    seen : np.ndarray
        Shape (N,), bool: the clients ever received (Alg. 1's set E).
    """

    updates: np.ndarray  # (N, d) float32, row i = G_i; zero until client i is seen
    total: np.ndarray  # (d,) float64, sum_i G_i kept as rows change (MIFA's aggregate)
    tau: np.ndarray  # (N,) int64, rounds since G_i was refreshed (eq. 5)
    seen: np.ndarray  # (N,) bool, the clients ever received (Alg. 1's set E)

    @classmethod
    def zeros(cls, num_clients: int, dim: int) -> UpdateMemory:
        """Return an empty memory for N = ``num_clients`` models of ``dim`` parameters."""
        return cls(
            updates=np.zeros((num_clients, dim), dtype=np.float32),
            total=np.zeros(dim, dtype=np.float64),
            tau=np.zeros(num_clients, dtype=np.int64),
            seen=np.zeros(num_clients, dtype=bool),
        )

    def store(self, i: int, w: np.ndarray, client_model: np.ndarray, eta: float) -> None:
        """Store client i's update, eq. (4): G_i <- (w_t - w_{t,K}^i) / eta_t, in place.

        Parameters
        ----------
        i : int
            The client's partition id, in 0..N-1, i in A(t).
        w : np.ndarray
            w_t, shape (d,): the model broadcast this round.
        client_model : np.ndarray
            w_{t,K}^i, shape (d,): the model it returned.
        eta : float
            eta_t, the round's step size, > 0.
        """
        row = self.updates[i]  # a view: the memory is written, not copied
        self.total -= row
        np.subtract(w, client_model, out=row)
        row /= np.float32(eta)
        self.total += row
        self.seen[i] = True

    def weighted_sum(self, ids: Sequence[int], weights: Sequence[float]) -> np.ndarray:
        """Return sum_k weights_k G_{ids_k} in float64, row by row (no |S| x d temporary).

        Parameters
        ----------
        ids : sequence of int
            Partition ids, in 0..N-1.
        weights : sequence of float
            One weight per id.

        Returns
        -------
        np.ndarray
            Shape (d,), float64.
        """
        out = np.zeros(self.total.shape, dtype=np.float64)
        for i, weight in zip(ids, weights, strict=True):
            out += weight * self.updates[i]
        return out

    def advance(self, active: Sequence[int], elapsed: int) -> None:
        """Advance tau by eq. (5) for the round whose available clients are ``active``.

        ``elapsed`` (>= 1) is the number of rounds since the previous call.
        """
        mask = np.zeros(self.tau.size, dtype=bool)
        mask[list(active)] = True
        self.tau[:] = inactivity(self.tau, mask, elapsed)


@dataclass(frozen=True)
class MemoryState:
    """The stale-update cores' state: the global model and the update memory.

    The memory is the documented exception to "state replaced each round": its N x d
    rows are overwritten in place (a copy per round would double the server's memory).

    Parameters
    ----------
    w : np.ndarray
        w_t, shape (d,), float32, replaced each round.
    memory : UpdateMemory
        The clients' latest updates, updated in place.
    """

    w: np.ndarray
    memory: UpdateMemory


@dataclass(frozen=True, eq=False, kw_only=True)
class MemoryCore(VectorCore[MemoryState]):
    """The base of the stale-update cores: memory, then a step along :meth:`direction`.

    Stores the round's updates in the memory (FedAR eq. 4, 5), then steps
    w <- w - (eta_g eta_t) v_t along :meth:`direction` (no step when it is ``None``);
    eta_g = ``server_lr`` is exactly 1 unless a subclass declares it, and 1 * eta_t is
    eta_t exactly, so the step is then bit for bit w - eta_t v_t.
    """

    late_updates = "rebase"  # G_i = (w - reply) / eta: a late reply is re-based on w

    def init(self, initial_arrays: Sequence[np.ndarray]) -> MemoryState:
        """Start from the initial model and an empty memory."""
        w = self.vector(initial_arrays)
        return MemoryState(w, UpdateMemory.zeros(self.num_clients, w.size))

    def arrays(self, state: MemoryState) -> Arrays:
        """Broadcast w_t."""
        return self.unflatten(state.w)

    def direction(
        self, server_round: int, memory: UpdateMemory, active: list[int], total_before: np.ndarray
    ) -> tuple[np.ndarray | None, dict[str, Any]]:
        """Return v_t from the updated memory (``None``: no step), and diagnostics.

        Parameters
        ----------
        server_round : int
            t, >= 1.
        memory : UpdateMemory
            The memory after the round's updates and eq. (5).
        active : list of int
            S = A(t), the partition ids that replied.
        total_before : np.ndarray
            Shape (d,): the memory's row sum before the round.

        Returns
        -------
        tuple of (np.ndarray or None, dict)
            v_t, shape (d,), and the rule's diagnostics.
        """
        raise NotImplementedError

    def aggregate(
        self, state: MemoryState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[MemoryState]:
        """Store the updates, advance tau, step along :meth:`direction`."""
        eta, memory = self.eta(server_round), state.memory
        total_before = memory.total.copy()
        active = []
        for i, model in client_models(replies, state.w):
            memory.store(i, state.w, model, eta)
            active.append(i)
        memory.advance(active, elapsed)
        v, diagnostics = self.direction(server_round, memory, active, total_before)
        w = state.w
        if v is not None:
            w = w.copy()
            w -= (self.server_lr * eta) * v
        return Outcome(
            MemoryState(w, memory),
            {"lr": eta, "seen": int(memory.seen.sum()), **diagnostics},
            aggregated=v is not None,
        )
