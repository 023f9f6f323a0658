"""Stale-update memory and the baselines built on it: MIFA, FedVARP and FedStale.

- X. Gu, K. Huang, J. Zhang, L. Huang, "Fast Federated Learning in the Presence of
  Arbitrary Device Unavailability" (MIFA), NeurIPS 2021, Algorithm 1.
- D. Jhunjhunwala, P. Sharma, A. Nagarkatti, G. Joshi, "FedVARP: Tackling the Variance
  Due to Partial Client Participation in Federated Learning", UAI 2022, Algorithm 1.
- A. Rodio, G. Neglia, "FedStale: leveraging stale client updates in federated
  learning" (arXiv:2405.04171, 2024): a convex combination, weight beta, of FedVARP's
  direction and FedAvg's, both importance-weighted, as the authors implement it.

The server keeps every client's latest update G_i (FedAR eq. 4; MIFA's G_i, FedVARP's
y_i) in :class:`UpdateMemory`: one preallocated float32 (N x d) array whose rows are
overwritten in place, never copied, plus the running sum of its rows and the
inactivity counters tau (FedAR eq. 5). G_i = (w_t - w_{t,K}^i) / eta_t, so every
rule steps w_{t+1} = w_t - eta_g eta_t v_t with its own direction v_t (eta_g: the
global learning rate ``server_lr`` of MIFA and FedVARP, 1 by default and for FedAR and
FedStale; the FedAU and FedAWE authors' code gives both baselines one, applied to the
aggregated update eta_t v_t), y the memory before round t and S = A(t):

    MIFA:     v_t = (1/N) sum_i G_i                                      (all N clients)
    FedVARP:  v_t = (1/N) sum_i y_i + (1/|S|) sum_{i in S} (G_i - y_i)
    FedStale: v_t = beta (1/N) sum_i y_i + (1/N) sum_{i in S} (1/p_i) (G_i - beta y_i)
    FedStale over the active set (``fedstale-active``, this project's earlier rule):
              v_t = beta (1/N) sum_i y_i + (1/|S|) sum_{i in S} (G_i - beta y_i)

FedStale is the authors' rule (``arodio/FedStale``, ``utils/optim.py`` HistorySGD.step
with ``history_tracker.py`` HistoryTracker.average and ``aggregator.py``
CentralizedAggregator.mix under ``client_sampler.py`` UnbiasedClientsSampler): the
fresh updates are weighted by a_i / p_i (data share over participation probability;
a_i = 1/N here, as for FedAvg-IS and MIFA), so beta = 0 is FedAvg-IS (unbiased) and
beta = 1 is FedVARP with the same importance weights, while ``fedstale-active``'s
1/|S| makes beta = 0 FedAvg over the active clients and beta = 1 FedVARP as above.
The two agree only when every p_i = |S| / N.

A client never seen has G_i = 0 (MIFA's paper asks every client to answer in round 1;
here it simply contributes nothing until it does). FedAR (``fedar.py``) weighs the
same rows by eq. (6).

A round in which nobody is available (the engines' server hands it to the core with no
replies) still advances tau; MIFA (Alg. 1) and FedAR (eq. 7, Alg. 1 line 15) then step
along the stored updates, while FedVARP and FedStale keep the model, as FedVARP's
and FedStale's authors' code does (it skips a round without participants).

Flower's Message API: ``MIFA``, ``FedVARP``, ``FedStale``, ``FedStaleActive``
in :mod:`fedram_flwr.message_api` (same core, same arguments).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedram_flwr.protocol import Arrays, ClientReply
from fedram_flwr.strategies.core import Outcome
from fedram_flwr.strategies.hyper import hyper, server_lr_hyper
from fedram_flwr.strategies.participation import (
    FedAUState,
    KnownP,
    check_known_p,
    fedau_round,
    known_p_hyper,
    known_probabilities,
)
from fedram_flwr.strategies.vector import VectorCore, VectorStrategy, client_models


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


def fedstale_direction(
    total_before: np.ndarray,
    fresh: np.ndarray,
    stale: np.ndarray,
    num_clients: int,
    beta: float,
) -> np.ndarray:
    """Return FedStale's direction as its authors' HistorySGD steps (Rodio and Neglia 2024).

    ``arodio/FedStale``, utils/optim.py:
    d = sum_{i in S} (a_i/p_i) Delta_i + beta [sum_i a_i h_i - sum_{i in S} (a_i/p_i) h_i]
    with a_i = 1/N, i.e. (beta sum_i y_i + fresh - beta stale) / N (y: the memory
    before the round).

    Parameters
    ----------
    total_before : np.ndarray
        Shape (d,): sum_i y_i.
    fresh : np.ndarray
        Shape (d,): sum_{i in S} G_i / p_i.
    stale : np.ndarray
        Shape (d,): sum_{i in S} y_i / p_i.
    num_clients : int
        N, >= 1.
    beta : float
        The stale updates' weight, in [0, 1].

    Returns
    -------
    np.ndarray
        v_t, shape (d,).
    """
    return (beta * total_before + (fresh - beta * stale)) / num_clients


def fedstale_active_direction(varp: np.ndarray, fresh: np.ndarray, num_active: int, beta: float):
    """Return FedStale's direction over the active set (``fedstale-active``).

    v_t = beta v^FedVARP + (1 - beta) (1/|S|) sum_{i in S} Delta_i.

    Parameters
    ----------
    varp : np.ndarray
        Shape (d,): v^FedVARP (:func:`fedvarp_direction`).
    fresh : np.ndarray
        Shape (d,): sum_{i in S} Delta_i.
    num_active : int
        |S|, >= 1.
    beta : float
        In [0, 1]: 1 returns ``varp`` itself (FedVARP bit for bit), 0 the mean fresh
        update (FedAvg over the participating clients).

    Returns
    -------
    np.ndarray
        v_t, shape (d,).
    """
    if beta == 1.0:
        return varp
    mean_fresh = fresh / num_active
    return mean_fresh if beta == 0.0 else beta * varp + (1.0 - beta) * mean_fresh


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


@dataclass(frozen=True, eq=False, kw_only=True)
class MIFACore(MemoryCore):
    """MIFA's core (Gu et al., NeurIPS 2021, Alg. 1).

    Equal weight 1/N to every client's latest update, from the running aggregate
    (updated by the changed rows only); ``server_lr``: eta_g.
    """

    server_lr: float = server_lr_hyper()

    def direction(self, server_round, memory, active, total_before):
        """Return the mean of every client's latest update (:func:`mifa_direction`)."""
        return mifa_direction(memory.total, self.num_clients), {}


@dataclass(frozen=True, eq=False, kw_only=True)
class FedVARPCore(MemoryCore):
    """FedVARP's core (Jhunjhunwala et al., UAI 2022, Alg. 1).

    Server learning rate ``server_lr``, eta_g, 1 by default: the memory mean corrected
    by the fresh updates of the available clients (|S| = |A(t)|); no step in a round
    without them (the authors' code skips it).
    """

    server_lr: float = server_lr_hyper()

    def direction(self, server_round, memory, active, total_before):
        """Return :func:`fedvarp_direction` (``None`` without participants)."""
        if not active:
            return None, {}
        v = fedvarp_direction(total_before, memory.total, self.num_clients, len(active))
        return v, {}


def stale_weight_hyper() -> Any:
    """Declare FedStale's beta once for both variants (a :func:`hyper` field)."""
    return hyper(
        0.5,
        doc="beta, the stale updates' weight (0: no memory, 1: FedVARP; the authors' run.sh: 0.5)",
        lo=0.0,
        hi=1.0,
    )


@dataclass(frozen=True)
class FedStaleState(MemoryState):
    """FedStale's state: w_t, the memory and, when p is estimated, the estimator.

    Parameters
    ----------
    w, memory
        As :class:`MemoryState`'s.
    estimator : FedAUState or None
        FedAU's participation estimator (``None``: p is the oracle's ``known_p``).
    """

    estimator: FedAUState | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class FedStaleCore(MemoryCore):
    """FedStale's core (Rodio and Neglia 2024) as its authors' code runs it.

    :func:`fedstale_direction` with weight ``beta`` in [0, 1] on the stale updates and
    1/p_i on the active clients' rows; no step in a round without participants (their
    CentralizedAggregator.mix returns before the step).

    p_i is the oracle's ``known_p`` (oracle-informed: an array, or a function round ->
    p_i^t, as FedAvg-IS takes it; the authors' UnbiasedClientsSampler reads
    ``participation_dict``) or, when ``None``, estimated as the authors' code does with
    ``--unknown_participation_probs`` (their paper_experiments/*/run.sh):
    activity_estimator.py ActivityEstimator, FedAU's estimator with its default
    cut-off 1e8 (none), 1/p_hat_i = the mean of client i's participation intervals
    observed before round t, 1 until one has been (:func:`fedau_round`).
    """

    beta: float = stale_weight_hyper()
    known_p: KnownP | None = known_p_hyper()

    def __post_init__(self) -> None:
        """Check the hyper-parameters, and ``known_p`` against N."""
        super().__post_init__()
        if self.known_p is not None:
            object.__setattr__(self, "known_p", check_known_p(self.known_p, self.num_clients))

    def init(self, initial_arrays: Sequence[np.ndarray]) -> FedStaleState:
        """Start from the initial model, an empty memory and (p unknown) the estimator."""
        state = super().init(initial_arrays)
        estimator = None if self.known_p is not None else FedAUState.zeros(self.num_clients)
        return FedStaleState(state.w, state.memory, estimator)

    def inverse_p(
        self, estimator: FedAUState | None, server_round: int, active: list[int], elapsed: int
    ) -> tuple[np.ndarray, FedAUState | None]:
        """Return 1/p_i of the ``active`` clients in round t, and the estimator after it.

        Parameters
        ----------
        estimator : FedAUState or None
            The estimator before the round (``None`` with ``known_p``).
        server_round : int
            t, >= 1.
        active : list of int
            The partition ids that replied.
        elapsed : int
            Rounds since the last aggregation, >= 1.

        Returns
        -------
        tuple of (np.ndarray, FedAUState or None)
            1/p_i, shape (len(active),), each >= 1, and the estimator after the round.
        """
        if self.known_p is not None:
            p = known_probabilities(self.known_p, self.num_clients, server_round, active)
            return 1.0 / p, estimator
        return fedau_round(estimator, self.num_clients, active, elapsed, math.inf)

    def aggregate(
        self, state: FedStaleState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[FedStaleState]:
        """Store the updates, then step along :func:`fedstale_direction` (1/p_i weights)."""
        eta, memory = self.eta(server_round), state.memory
        active = [r.partition_id for r in replies]
        weights, estimator = self.inverse_p(state.estimator, server_round, active, elapsed)
        total_before = memory.total.copy()
        stale = memory.weighted_sum(active, weights)  # the rows before the round
        for i, model in client_models(replies, state.w):
            memory.store(i, state.w, model, eta)
        memory.advance(active, elapsed)
        diagnostics = {"lr": eta, "seen": int(memory.seen.sum())}
        if not active:
            return Outcome(replace(state, estimator=estimator), diagnostics, aggregated=False)
        fresh = memory.weighted_sum(active, weights)
        v = fedstale_direction(total_before, fresh, stale, self.num_clients, self.beta)
        w = state.w.copy()
        w -= eta * v
        return Outcome(
            FedStaleState(w, memory, estimator),
            {**diagnostics, "mean-weight": float(np.mean(weights))},
        )


@dataclass(frozen=True, eq=False, kw_only=True)
class FedStaleActiveCore(MemoryCore):
    """FedStale's core over the active set (``fedstale-active``).

    This project's rule before issue 27: :func:`fedstale_active_direction` with weight
    ``beta`` in [0, 1]; no step in a round without participants (as FedVARP). Equal to
    :class:`FedStaleCore` only when every p_i = |S| / N. The fresh sum is accumulated
    row by row.
    """

    beta: float = stale_weight_hyper()

    def direction(self, server_round, memory, active, total_before):
        """Return :func:`fedstale_active_direction` (``None`` without participants)."""
        if not active:
            return None, {}
        varp = fedvarp_direction(total_before, memory.total, self.num_clients, len(active))
        fresh = memory.weighted_sum(active, [1.0] * len(active))
        return fedstale_active_direction(varp, fresh, len(active), self.beta), {}


class MIFA(VectorStrategy):
    """MIFA (Gu et al., NeurIPS 2021) as a Flower Strategy over :class:`MIFACore`."""

    core_type = MIFACore


class FedVARP(VectorStrategy):
    """FedVARP (Jhunjhunwala et al., UAI 2022) as a Flower Strategy over :class:`FedVARPCore`."""

    core_type = FedVARPCore


class FedStale(VectorStrategy):
    """FedStale (Rodio and Neglia 2024) as a Flower Strategy over :class:`FedStaleCore`.

    Fresh updates weighted a_i / p_i, as the authors' code.
    """

    core_type = FedStaleCore


class FedStaleActive(VectorStrategy):
    """FedStale over the active set as a Flower Strategy over :class:`FedStaleActiveCore`.

    Fresh updates weighted 1 / |S|.
    """

    core_type = FedStaleActiveCore
