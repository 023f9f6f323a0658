"""FedAU (Wang and Ji, ICLR 2024): weights from the observed participation intervals.

S. Wang, M. Ji, "A Lightweight Method for Tackling Unknown Participation Statistics in
Federated Averaging", ICLR 2024 (arXiv:2306.03401), Algorithm 1 with its online weight
estimation: omega_i is the mean of the participation intervals of client i observed
*before* round t (an interval ends when i participates, or is cut at K rounds), and 1
until one has been observed (:func:`fedau_round`; FedStale's estimate of p_i when the
oracle's is not given). Its state and pure functions first, then its core over
:class:`~fedram_flwr.strategies.reweighted.ReweightedCore`, then the Flower adapter.
The other reweighted rules are in :mod:`~fedram_flwr.strategies.participation`, which
re-exports this module's names.

Flower's Message API: ``FedAU`` in :mod:`fedram_flwr.message_api` (same core, same
arguments).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedram_flwr.strategies.hyper import hyper, server_lr_hyper
from fedram_flwr.strategies.reweighted import ReweightedCore
from fedram_flwr.strategies.vector import VectorStrategy


# ------------------------------------------------------------------ pure functions
@dataclass(frozen=True)
class FedAUState:
    """Per-client interval statistics of FedAU's online estimator (Alg. 1).

    Parameters
    ----------
    omega : np.ndarray
        Shape (N,), float: the running mean of the observed participation intervals,
        in rounds.
    count : np.ndarray
        Shape (N,), int: M, the intervals observed so far.
    run : np.ndarray
        Shape (N,), int: R, the rounds in the interval still open.
    """

    omega: np.ndarray  # running mean of the observed intervals
    count: np.ndarray  # M: intervals observed so far
    run: np.ndarray  # R: rounds in the interval still open

    @classmethod
    def zeros(cls, num_clients: int) -> FedAUState:
        """Return the estimator before round 1 for N = ``num_clients`` clients."""
        z = np.zeros(num_clients, dtype=np.int64)
        return cls(np.zeros(num_clients), z, z)


def fedau_update(state: FedAUState, participated: np.ndarray, cutoff: int) -> FedAUState:
    """Advance FedAU's estimator by one round (Wang and Ji 2024, Alg. 1).

    R <- R + 1; if i participated or R = K, the interval R closes:
    omega <- (M omega + R) / (M + 1) (omega = R when M = 0), M <- M + 1, R <- 0.

    Parameters
    ----------
    state : FedAUState
        The estimator before the round.
    participated : np.ndarray
        Shape (N,), bool: who participated in the round.
    cutoff : int
        K, the longest interval counted, >= 1 (``math.inf``: none).

    Returns
    -------
    FedAUState
        The estimator after the round.
    """
    run = state.run + 1
    close = participated | (run >= cutoff)
    mean = (state.count * state.omega + run) / (state.count + 1)
    return FedAUState(
        omega=np.where(close, mean, state.omega),
        count=state.count + close,
        run=np.where(close, 0, run),
    )


def fedau_weights(state: FedAUState) -> np.ndarray:
    """Return FedAU's omega_i: the mean observed interval, 1 before any was observed.

    Parameters
    ----------
    state : FedAUState
        The estimator.

    Returns
    -------
    np.ndarray
        omega, shape (N,), each >= 1 (rounds).
    """
    return np.where(state.count > 0, state.omega, 1.0)


def fedau_round(
    state: FedAUState, num_clients: int, active: list[int], elapsed: int, cutoff: float
) -> tuple[np.ndarray, FedAUState]:
    """Run FedAU's estimator over round t (and the rounds skipped before it).

    Parameters
    ----------
    state : FedAUState
        The estimator after the last aggregated round.
    num_clients : int
        N, >= 1.
    active : list of int
        The partition ids that participated in round t.
    elapsed : int
        Rounds since the last aggregation, >= 1: the ``elapsed`` - 1 rounds skipped
        before t (nobody was available) count as rounds without participation.
    cutoff : float
        K, the longest interval counted, >= 1 (``math.inf``: none).

    Returns
    -------
    tuple of (np.ndarray, FedAUState)
        omega_i of the ``active`` clients in round t (from the rounds before t), and the
        estimator after round t.
    """
    none = np.zeros(num_clients, dtype=bool)
    for _ in range(elapsed - 1):
        state = fedau_update(state, none, cutoff)
    omega = fedau_weights(state)[active]
    participated = none.copy()
    participated[active] = True
    return omega, fedau_update(state, participated, cutoff)


# ------------------------------------------------------------------------ core
@dataclass(frozen=True, eq=False, kw_only=True)
class FedAUCore(ReweightedCore):
    """FedAU's core (Wang and Ji, ICLR 2024, Alg. 1).

    omega_i of :func:`fedau_weights` from the rounds before t, then
    :func:`fedau_update` with round t; skipped rounds (nobody available) count as
    rounds without participation. ``cutoff`` is the paper's K, ``server_lr`` eta_g.
    """

    cutoff: int = hyper(
        50,
        doc="K, the longest participation interval counted (the second variant of Wang & "
        "Ji's code; a K at least the number of rounds: no cut-off, their default)",
        lo=1,
    )
    server_lr: float = server_lr_hyper()

    def init_estimator(self) -> FedAUState:
        """Return FedAU's estimator before round 1."""
        return FedAUState.zeros(self.num_clients)

    def weights(self, estimator, server_round, active, elapsed):
        """Weigh each reply by FedAU's online estimate (:func:`fedau_round`)."""
        return fedau_round(estimator, self.num_clients, active, elapsed, self.cutoff)


# --------------------------------------------------------------- Flower adapter
class FedAU(VectorStrategy):
    """FedAU (Wang and Ji, ICLR 2024) as a Flower Strategy over :class:`FedAUCore`."""

    core_type = FedAUCore
