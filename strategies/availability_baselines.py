"""The baselines CA-Fed is compared with (Rodio et al., IEEE/ACM ToN 2024, Sec. V-A c).

Cores on :class:`~fedram_flwr.strategies.ca_fed.AvailabilityAwareCore` with thin Flower
adapters: every active client trains, the server takes the step of eq. 3 with weights
q^(t).

- Unbiased: q_k = alpha_k / pi_k for every active client (Thm. 1's unbiased choice);
- More available: the same weights for the "more available" clients (pi_k >= 1/2 in
  the paper's population), the others always excluded;
- AdaFed (Tan et al., "AdaFed: Optimizing Participation-Aware Federated Learning with
  Adaptive Aggregation Weights", IEEE TNSE 2022): alpha_k / pi_k normalised over the
  active clients, q_k = (alpha_k / pi_k) / sum_{h in A_t} alpha_h / pi_h;
- F3AST (Ribero, Vikalo, de Veciana, "Federated Learning Under Intermittent Client
  Availability and Time-Varying Communication Constraints", IEEE JSTSP 17(1), 2023,
  arXiv:2205.06730): under a budget of m clients per round, the m active clients with
  the largest alpha_k^2 / r_k^2 take part with weights alpha_k / r_k, favouring the
  less available ones. r_k is F3AST's own estimate of client k's participation rate,
  as its authors' code computes it (``mriberodiaz/f3ast``, utils/training_utils.py,
  ``update_vectors`` and ``build_availability_client_datasets_fn``): the selection
  ranks by the gradient p_k^2 / r_k^2 of sum_k p_k^2 / r_k (``negative_variance_fn``)
  masked by availability (``tf.math.top_k``: ties to the lower id), then
  r <- (1 - beta) r + beta 1{k selected} (the *selected* clients, not the available
  ones), and the weights p_k / r_k use r after that update; r starts at the data
  shares p (their default ``initialize_p=True``; p is alpha here), beta 0.01 by
  default (their ``--beta`` flag; the FedAWE paper tunes 0.001). ``rate: ca-fed``
  keeps this project's earlier choice, r_k = pi_k (oracle or estimated, as CA-Fed's
  experiments give every baseline, Sec. V-A c).

``pi`` is the oracle's true availability in oracle-informed scenarios and the Beta
posterior mean pi_hat (Sec. IV-B) otherwise.

Flower's Message API: ``Unbiased``, ``MoreAvailable``, ``AdaFed``, ``F3AST``
in :mod:`fedram_flwr.message_api` (same core, same arguments).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedram_flwr.strategies.ca_fed import (
    AvailabilityAwareCore,
    AvailabilityAwareStrategy,
    AvailabilityState,
)
from fedram_flwr.strategies.ca_fed_math import unbiased_weights
from fedram_flwr.strategies.hyper import hyper

F3AST_RATES = ("smoothed", "ca-fed")  # F3AST's own r_k, or CA-Fed's pi_k


# ------------------------------------------------------------------ weights
def adafed_weights(alpha: np.ndarray, pi: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Return AdaFed's weights (Tan et al. 2022; CA-Fed Sec. V-A c).

    q_k = (alpha_k / pi_k) / sum_{h in A_t} alpha_h / pi_h on the active clients, 0
    elsewhere.

    Parameters
    ----------
    alpha : np.ndarray
        Shape (N,): the target importance, > 0, summing to 1.
    pi : np.ndarray
        Shape (N,): each client's availability, in (0, 1].
    active : np.ndarray
        Shape (N,), bool: A_t, at least one client.

    Returns
    -------
    np.ndarray
        q, shape (N,), summing to 1.
    """
    w = np.where(active, unbiased_weights(alpha, pi), 0.0)
    return w / w.sum()


def more_available_weights(alpha: np.ndarray, pi: np.ndarray, min_pi: float) -> np.ndarray:
    """Return the "more available" weights: q_k = alpha_k / pi_k if pi_k >= min_pi, else 0.

    Parameters
    ----------
    alpha : np.ndarray
        Shape (N,): the target importance, > 0, summing to 1.
    pi : np.ndarray
        Shape (N,): each client's availability, in (0, 1].
    min_pi : float
        The least pi_k a client needs to be aggregated, in [0, 1].

    Returns
    -------
    np.ndarray
        q, shape (N,), >= 0.
    """
    return np.where(pi >= min_pi, unbiased_weights(alpha, pi), 0.0)


def f3ast_selection(
    alpha: np.ndarray, rate: np.ndarray, active: np.ndarray, budget: int
) -> np.ndarray:
    """Select F3AST's participants (Ribero et al. 2023; the authors' code).

    The ``budget`` active clients with the largest alpha_k^2 / r_k^2, ranked by
    alpha_k / r_k (the same order: both are positive); ties: lower id, as
    ``tf.math.top_k``.

    Parameters
    ----------
    alpha : np.ndarray
        Shape (N,): the target importance, > 0, summing to 1.
    rate : np.ndarray
        Shape (N,): r_k, each client's participation-rate estimate, in (0, 1].
    active : np.ndarray
        Shape (N,), bool: A_t.
    budget : int
        m, the most participants a round, >= 1.

    Returns
    -------
    np.ndarray
        Shape (N,), bool: the selected clients (all active ones when fewer than m).
    """
    key = np.where(active, unbiased_weights(alpha, rate), -np.inf)
    ranked = np.argsort(-key, kind="stable")
    selected = np.zeros(alpha.size, dtype=bool)
    selected[ranked[: min(budget, int(np.count_nonzero(active)))]] = True
    return selected


def smoothed_rate(rate: np.ndarray, selected: np.ndarray, beta: float) -> np.ndarray:
    """Update F3AST's participation-rate estimate after a round.

    r <- (1 - beta) r + beta 1{k selected} (the authors' ``update_vectors``).

    Parameters
    ----------
    rate : np.ndarray
        Shape (N,): r, in [0, 1].
    selected : np.ndarray
        Shape (N,), bool: the round's selected clients.
    beta : float
        The smoothing, in (0, 1].

    Returns
    -------
    np.ndarray
        The new r, shape (N,).
    """
    return (1.0 - beta) * rate + beta * selected


def f3ast_weights(
    alpha: np.ndarray, rate: np.ndarray, active: np.ndarray, budget: int
) -> np.ndarray:
    """Return F3AST's weights for a given rate: q_k = alpha_k / r_k if selected, else 0.

    Parameters
    ----------
    alpha, rate, active, budget
        As :func:`f3ast_selection`'s.

    Returns
    -------
    np.ndarray
        q, shape (N,), >= 0.
    """
    selected = f3ast_selection(alpha, rate, active, budget)
    return np.where(selected, unbiased_weights(alpha, rate), 0.0)


# ------------------------------------------------------------------------ cores
@dataclass(frozen=True, eq=False, kw_only=True)
class UnbiasedCore(AvailabilityAwareCore):
    """Unbiased aggregation's core: q = alpha / pi (CA-Fed Sec. V-A c, baseline 1)."""

    def weights(self, state, active, replies):
        """Weigh every active client alpha_k / pi_k (:func:`unbiased_weights`)."""
        return unbiased_weights(self.alpha, self.availability(state)[0]), {}, state


@dataclass(frozen=True, eq=False, kw_only=True)
class MoreAvailableCore(AvailabilityAwareCore):
    """More available's core: only the clients with pi_k >= ``min_pi`` (baseline 2).

    CA-Fed Sec. V-A c.
    """

    min_pi: float = hyper(
        0.5,
        doc="the least pi_k a client needs to be aggregated (1/2 splits pi = 1/2 +- g)",
        lo=0.0,
        hi=1.0,
    )

    def weights(self, state, active, replies):
        """Weigh the more available clients alpha_k / pi_k (:func:`more_available_weights`)."""
        pi = self.availability(state)[0]
        return more_available_weights(self.alpha, pi, self.min_pi), {}, state


@dataclass(frozen=True, eq=False, kw_only=True)
class AdaFedCore(AvailabilityAwareCore):
    """AdaFed's core, with full participation of the active clients (baseline 3)."""

    def weights(self, state, active, replies):
        """Weigh the active clients by :func:`adafed_weights`."""
        return adafed_weights(self.alpha, self.availability(state)[0], active), {}, state


@dataclass(frozen=True, eq=False)
class F3ASTState(AvailabilityState):
    """F3AST's state: CA-Fed's (theta, tracker, q) and its rate estimate.

    Parameters
    ----------
    theta, tracker, q, losses
        As :class:`~fedram_flwr.strategies.ca_fed.AvailabilityState`'s.
    rate : np.ndarray or None
        Shape (N,): r, the participation-rate estimate, in [0, 1] (r_0 = alpha).
    rate_rounds : int
        The rounds the tracker had seen when r was last updated, >= 0.
    """

    rate: np.ndarray | None = None
    rate_rounds: int = 0


@dataclass(frozen=True, eq=False, kw_only=True)
class F3ASTCore(AvailabilityAwareCore):
    """F3AST's core (Ribero et al., IEEE JSTSP 2023; CA-Fed's baseline 4).

    A budget of ``clients_per_round`` participants. ``rate``: ``smoothed`` (F3AST's own
    estimate: :func:`smoothed_rate` with ``beta``, r_0 = alpha; the selection ranks by
    r_t, the weights use r_{t+1}; a round in which nobody was available selects nobody:
    r <- (1 - beta) r) or ``ca-fed`` (r = pi, the oracle's or CA-Fed's estimate: this
    project's rule before 2026-11-26). F3AST's own estimate reads no oracle parameter.
    """

    clients_per_round: int | None = hyper(
        None,
        doc="the budget: at most this many participants a round (None: half the clients, "
        "as CA-Fed's code)",
        lo=1,
        hi="num-clients",
    )
    beta: float = hyper(
        0.01,
        doc="beta, the rate estimate's smoothing (the authors' code: 0.01)",
        lo=0.0,
        hi=1.0,
        lo_open=True,
    )
    rate: str = hyper(
        "smoothed",
        doc="smoothed: F3AST's own participation-rate estimate; ca-fed: r = pi (CA-Fed's)",
        choices=F3AST_RATES,
    )

    def __post_init__(self) -> None:
        """Check the hyper-parameters, and ``clients_per_round`` against N."""
        super().__post_init__()
        if self.clients_per_round is not None and self.clients_per_round > self.alpha.size:
            raise ValueError(
                f"clients_per_round: {self.clients_per_round} is outside the allowed range "
                f"[1, {self.alpha.size}] (the number of clients)"
            )

    @property
    def budget(self) -> int:
        """Return m, the participants a round: ``clients_per_round``, or half the clients."""
        return self.clients_per_round or max(1, self.alpha.size // 2)

    def init(self, initial_arrays: Sequence[np.ndarray]) -> F3ASTState:
        """Start as CA-Fed's core, with r_0 = alpha."""
        state = super().init(initial_arrays)
        return F3ASTState(state.theta, state.tracker, state.q, rate=self.alpha.copy())

    def weights(self, state, active, replies):
        """Select by r_t, update r, weigh the selected clients alpha_k / r_{t+1}."""
        if self.rate == "ca-fed":
            rate = self.availability(state)[0]
            return f3ast_weights(self.alpha, rate, active, self.budget), {}, state
        rate = state.rate
        for _ in range(state.tracker.rounds - state.rate_rounds - 1):  # nobody available
            rate = smoothed_rate(rate, np.zeros(rate.size, dtype=bool), self.beta)
        selected = f3ast_selection(self.alpha, rate, active, self.budget)
        rate = smoothed_rate(rate, selected, self.beta)
        q = np.where(selected, unbiased_weights(self.alpha, rate), 0.0)
        return q, {}, replace(state, rate=rate, rate_rounds=state.tracker.rounds)


# --------------------------------------------------------------- Flower adapters
class Unbiased(AvailabilityAwareStrategy):
    """Unbiased aggregation (CA-Fed Sec. V-A c) as a Flower Strategy over :class:`UnbiasedCore`."""

    core_type = UnbiasedCore


class MoreAvailable(AvailabilityAwareStrategy):
    """More available (CA-Fed Sec. V-A c) as a Flower Strategy over :class:`MoreAvailableCore`."""

    core_type = MoreAvailableCore


class AdaFed(AvailabilityAwareStrategy):
    """AdaFed (Tan et al., IEEE TNSE 2022) as a Flower Strategy over :class:`AdaFedCore`."""

    core_type = AdaFedCore


class F3AST(AvailabilityAwareStrategy):
    """F3AST (Ribero et al., IEEE JSTSP 2023) as a Flower Strategy over :class:`F3ASTCore`."""

    core_type = F3ASTCore
