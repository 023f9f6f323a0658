"""FedStale (Rodio and Neglia 2024), both variants: the authors' rule and ``fedstale-active``.

A. Rodio, G. Neglia, "FedStale: leveraging stale client updates in federated learning"
(arXiv:2405.04171, 2024): a convex combination, weight beta, of FedVARP's direction and
FedAvg's, both importance-weighted, as the authors implement it (:class:`FedStaleCore`:
the fresh updates weighted a_i / p_i, p_i the oracle's or FedAU's estimate), and this
project's earlier rule over the active set (:class:`FedStaleActiveCore`: weighted
1 / |S|). The pure functions first, then the cores over the stale-update memory
(:class:`~fedram_flwr.strategies.update_memory.MemoryCore`), then the Flower adapters.
The family's rules and their directions are compared in
:mod:`~fedram_flwr.strategies.stale_updates`, which re-exports this module's names.

Flower's Message API: ``FedStale``, ``FedStaleActive`` in :mod:`fedram_flwr.message_api`
(same core, same arguments).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedram_flwr.protocol import ClientReply
from fedram_flwr.strategies.core import Outcome
from fedram_flwr.strategies.fedau import FedAUState, fedau_round
from fedram_flwr.strategies.hyper import hyper
from fedram_flwr.strategies.participation import (
    KnownP,
    check_known_p,
    known_p_hyper,
    known_probabilities,
)
from fedram_flwr.strategies.update_memory import MemoryCore, MemoryState, fedvarp_direction
from fedram_flwr.strategies.vector import VectorStrategy, client_models


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

    This project's rule before 2026-11-26: :func:`fedstale_active_direction` with weight
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
