"""CA-Fed: Correlation-Aware Federated learning.

A. Rodio, F. Faticanti, O. Marfoq, G. Neglia, E. Leonardi, "Federated Learning under
Heterogeneous and Correlated Client Availability", IEEE/ACM Transactions on Networking
32(2), 2024 (``papers/ca-fed_correlated-availability.md``). Section IV, Algorithm 1.

Pure numpy functions, vectorised over clients, first: the estimated total error
(eq. 18-20), the greedy exclusion ``get`` (Alg. 1, lines 13-22) and the weights q
(lines 5-7), the server step (eq. 3); the estimators of pi_k, lambda_k, F_hat and F_hat*
(Sec. IV-B) are in :mod:`~fedram_flwr.strategies.availability_estimates`. Then the core
:class:`AvailabilityAwareCore`, which CA-Fed shares with its baselines
(:mod:`fedram_flwr.strategies.availability_baselines`), :class:`CAFedCore`, and their
thin Flower adapters.

Flower's Message API: ``CAFed`` in :mod:`fedram_flwr.message_api` (same core, same
arguments; ``strategy.start(grid=..., initial_arrays=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from flwr.common import FitIns, NDArrays, Parameters
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.protocol import (
    LOCAL_OPTIMUM,
    RECEIVED_LOSS,
    REPORT_LOCAL_OPTIMUM,
    Arrays,
    ClientReply,
)
from fedram_flwr.strategies.availability_estimates import (
    AvailabilityTracker,
    LossEstimates,
    lambda_hat,
    pi_hat,
    transition_counts,
    transition_matrix_hat,
)
from fedram_flwr.strategies.base import CoreStrategy, to_arrays
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.hyper import hyper, server_lr_hyper

__all__ = [
    "LOCAL_OPTIMUM",
    "RECEIVED_LOSS",
    "REPORT_LOCAL_OPTIMUM",
    "AvailabilityTracker",
    "LossEstimates",
    "lambda_hat",
    "pi_hat",
    "transition_counts",
    "transition_matrix_hat",
]

LOSS_FLOORS = ("running-min", "local-optimum")  # how CA-Fed estimates F_k*


# ----------------------------------------------------- weights (eq. 18-20, Alg. 1)
def unbiased_weights(alpha: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """Return q_k = alpha_k / pi_k, the weights without bias (Thm. 1; Alg. 1 line 5).

    The biased importance p of eq. 4 then equals alpha, so the bias term vanishes.

    Parameters
    ----------
    alpha : np.ndarray
        Shape (N,): the target importance, > 0, summing to 1 (eq. 1).
    pi : np.ndarray
        Shape (N,): each client's availability, in (0, 1].

    Returns
    -------
    np.ndarray
        q, shape (N,), > 0.
    """
    return alpha / pi


def biased_importance(pi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Return the biased importance p = pi (~*) q (eq. 4, notation of eq. 18).

    p_k = pi_k q_k / sum_h pi_h q_h.

    Parameters
    ----------
    pi : np.ndarray
        Shape (N,): each client's availability, in [0, 1].
    q : np.ndarray
        Shape (N,): the aggregation weights, >= 0, with sum_h pi_h q_h > 0.

    Returns
    -------
    np.ndarray
        p, shape (N,), a probability vector.
    """
    u = pi * q
    return u / u.sum()


def tv_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Return the total variation distance d_TV(a, b) = 1/2 sum_k |a_k - b_k| (Thm. 3).

    Parameters
    ----------
    a, b : np.ndarray
        Shape (N,): probability vectors.

    Returns
    -------
    float
        In [0, 1].
    """
    return 0.5 * float(np.abs(a - b).sum())


def estimated_error(
    q: np.ndarray, alpha: np.ndarray, gap: np.ndarray, pi: np.ndarray, kappa2: float
) -> float:
    """Return eps_hat, CA-Fed's estimated total error (eq. 20).

    eps_hat = <F_hat - F_hat*, p> (eq. 18) + 4 kappa2 d_TV^2(alpha, p) Gamma_hat', with
    p = pi (~*) q and Gamma_hat' = max_k (F_hat_k - F_hat*_k) (eq. 19).

    Parameters
    ----------
    q : np.ndarray
        Shape (N,): the aggregation weights, >= 0.
    alpha : np.ndarray
        Shape (N,): the target importance, > 0, summing to 1.
    gap : np.ndarray
        Shape (N,): F_hat_k - F_hat*_k, in loss units.
    pi : np.ndarray
        Shape (N,): each client's availability, in (0, 1].
    kappa2 : float
        kappa_bar^2, the bound of Sec. IV-C, >= 0.

    Returns
    -------
    float
        eps_hat, in loss units.
    """
    p = biased_importance(pi, q)
    return float(gap @ p) + 4.0 * kappa2 * tv_distance(alpha, p) ** 2 * float(gap.max())


def get(
    included: np.ndarray,
    order: np.ndarray,
    alpha: np.ndarray,
    gap: np.ndarray,
    kappa2: float,
    tau: float,
) -> np.ndarray:
    """Exclude clients greedily: Alg. 1's ``get`` (lines 13-22).

    On q = alpha / pi restricted to ``included``: visit the clients in ``order`` and
    exclude each one (q_k <- 0) if that lowers eps_hat (eq. 20) by at least ``tau``.

    Alg. 1 starts from q = alpha / pi (line 5) and ``get`` only zeroes entries, so q is
    alpha / pi on an inclusion set I throughout. Then p = alpha 1_I / alpha(I), and with
    sum_k alpha_k = 1, d_TV(alpha, p) = 1 - alpha(I): eq. 20 is
    A / S + 4 kappa2 Gamma' (1 - S)^2 with S = alpha(I), A = sum_I alpha_k gap_k. Each
    candidate costs O(1) from these running sums instead of the O(N) re-evaluation
    of the paper's pseudo-code: a pass is O(N) after the O(N log N) sort.

    Two guards the pseudo-code leaves implicit: the last included client is never
    excluded (p would be undefined; the authors' code stops there too), and an
    exclusion needs a strict decrease, so ties keep the client (with tau = 0 and every
    gap zero, e.g. in round 1 where F_hat* = F_hat, ">= tau" would exclude all but one).

    Parameters
    ----------
    included : np.ndarray
        Shape (N,), bool: the inclusion set I before the pass, at least one client.
    order : np.ndarray
        A permutation of 0..N-1: the order the clients are visited in.
    alpha : np.ndarray
        Shape (N,): the target importance, > 0, summing to 1.
    gap : np.ndarray
        Shape (N,): F_hat_k - F_hat*_k, in loss units.
    kappa2 : float
        kappa_bar^2 (Sec. IV-C), >= 0.
    tau : float
        The exclusion threshold (line 19), >= 0, in loss units.

    Returns
    -------
    np.ndarray
        Shape (N,), bool: the new inclusion mask, a subset of ``included``.
    """
    weighted = alpha * gap
    keep = included[order].tolist()
    ag, al = weighted[order].tolist(), alpha[order].tolist()
    c = 4.0 * kappa2 * float(gap.max())
    a_sum, s_sum, n = float(weighted[included].sum()), float(alpha[included].sum()), sum(keep)
    eps = a_sum / s_sum + c * (1.0 - s_sum) ** 2
    for i in range(len(keep)):
        if n == 1:
            break
        if not keep[i]:
            continue
        a_new, s_new = a_sum - ag[i], s_sum - al[i]
        eps_new = a_new / s_new + c * (1.0 - s_new) ** 2
        if eps_new < eps and eps - eps_new >= tau:
            keep[i] = False
            a_sum, s_sum, eps, n = a_new, s_new, eps_new, n - 1
    out = np.empty_like(included)
    out[order] = keep
    return out


def ca_fed_weights(
    alpha: np.ndarray,
    pi: np.ndarray,
    lam: np.ndarray,
    gap: np.ndarray,
    kappa2: float,
    tau: float,
) -> np.ndarray:
    """Return CA-Fed's weights q^(t) (Alg. 1 lines 5-7).

    q = alpha / pi (line 5), then ``get`` in descending order of correlation (line 6;
    |lambda|, since lambda(P_k) is the second largest eigenvalue *modulus*, Sec. III-A),
    then in ascending order of pi (line 7).

    Ties, which the paper leaves open, are broken by the other key (then by id): among
    equally correlated clients the less available come first in line 6's pass, and
    among equally available ones the more correlated first in line 7's. This matters in
    the paper's own population, where every correlated client has lambda = nu exactly
    (oracle-informed): the greedy pass excludes its first candidates most cheaply (the
    bias term grows with each exclusion), so breaking lambda's ties by id would favour
    excluding whichever group has the lower ids, instead of the "less available,
    correlated" clients that Guidelines A and B (Sec. III-D) single out.

    Parameters
    ----------
    alpha : np.ndarray
        Shape (N,): the target importance, > 0, summing to 1 (eq. 1).
    pi : np.ndarray
        Shape (N,): each client's availability (estimated or known), in (0, 1].
    lam : np.ndarray
        Shape (N,): each client's correlation lambda_k, in [-1, 1].
    gap : np.ndarray
        Shape (N,): F_hat_k - F_hat*_k, in loss units.
    kappa2 : float
        kappa_bar^2 (Sec. IV-C), >= 0.
    tau : float
        The exclusion threshold (line 19), >= 0, in loss units.

    Returns
    -------
    np.ndarray
        q^(t), shape (N,): alpha_k / pi_k for the included clients, 0 for the excluded.
    """
    corr = np.abs(lam)
    by_lambda = np.lexsort((pi, -corr))  # last key is primary; lexsort is stable
    included = get(np.ones(alpha.size, bool), by_lambda, alpha, gap, kappa2, tau)
    included = get(included, np.lexsort((-corr, pi)), alpha, gap, kappa2, tau)
    return np.where(included, unbiased_weights(alpha, pi), 0.0)


def server_step(
    theta: NDArrays, updates: Sequence[NDArrays], q: Sequence[float], eta: float
) -> NDArrays:
    """Take CA-Fed's server step, eq. 3 with W = R^d (the projection is the identity).

    theta + eta_bar sum_k q_k (theta_k - theta), the sum in the given order and in
    float64, each array cast back to its dtype.

    Parameters
    ----------
    theta : NDArrays
        The global model the round's clients received.
    updates : sequence of NDArrays
        theta_k, the models returned by the participants (q_k > 0).
    q : sequence of float
        q_k, one per returned model, > 0.
    eta : float
        eta_bar, the server learning rate, > 0.

    Returns
    -------
    NDArrays
        The new global model, layer by layer.
    """
    out = []
    for i, layer in enumerate(theta):
        base = layer.astype(np.float64)
        step = np.zeros_like(base)
        for update, qk in zip(updates, q):
            step += qk * (update[i].astype(np.float64) - base)
        out.append((base + eta * step).astype(layer.dtype))
    return out


# ------------------------------------------------------------------------ cores
@dataclass(frozen=True, eq=False)
class AvailabilityState:
    """CA-Fed's server state (and its baselines').

    Parameters
    ----------
    theta : Arrays
        The model the round's clients receive.
    tracker : AvailabilityTracker
        What the server has seen of availability.
    q : np.ndarray
        Shape (N,): the last aggregation's weights over all clients.
    losses : LossEstimates or None
        The loss estimates (CA-Fed only; ``None`` before the first reports).
    """

    theta: Arrays
    tracker: AvailabilityTracker
    q: np.ndarray
    losses: LossEstimates | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class AvailabilityAwareCore(Core[AvailabilityState]):
    """The base of CA-Fed and its baselines (Rodio et al. 2024, Sec. V-A c).

    Every active client the oracle relays trains from the global theta; the server
    weighs their updates with q^(t)
    from :meth:`weights` and takes the step of eq. 3 with the server learning rate
    eta_bar, summing in partition-id order.

    ``alpha``: the target importance of each client (eq. 1; sums to 1, e.g. proportional
    to data sizes). The server always tracks availability (:class:`AvailabilityTracker`;
    the active set A_t is who returned an update; a round in which nobody was relayed is
    observed as all inactive, when it comes or, under a server that skips it, with the
    next one).
    :meth:`availability` gives its estimates, or the oracle's true ``known_pi`` /
    ``known_lam`` when the scenario runs oracle-informed.
    """

    alpha: np.ndarray = hyper(
        doc="alpha_k, each client's target importance (eq. 1; > 0, sums to 1)", run="data-shares"
    )
    server_lr: float = server_lr_hyper()
    known_pi: np.ndarray | None = hyper(
        None,
        doc="pi_k, each client's true availability (oracle-informed; None: estimated)",
        run="known-pi",
    )
    known_lam: np.ndarray | None = hyper(
        None,
        doc="lambda_k, each client's true Markov correlation (oracle-informed)",
        run="known-lam",
    )

    def __post_init__(self) -> None:
        """Check the hyper-parameters, alpha (> 0, sums to 1) and ``known_pi`` (> 0)."""
        super().__post_init__()
        alpha = np.asarray(self.alpha, dtype=float)
        if np.any(alpha <= 0) or abs(alpha.sum() - 1.0) > 1e-9:
            raise ValueError("alpha (target importance): must be > 0 and sum to 1")
        if self.known_pi is not None and not np.all(np.asarray(self.known_pi) > 0):
            raise ValueError("oracle-informed pi: every client needs pi_k > 0 (q = alpha / pi)")
        object.__setattr__(self, "alpha", alpha)
        for name in ("known_pi", "known_lam"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, np.asarray(value, dtype=float))

    def client_count(self) -> int:
        """Return N, the number of target importances alpha_k."""
        return self.alpha.size  # one target importance per client

    def init(self, initial_arrays: Sequence[np.ndarray]) -> AvailabilityState:
        """Start from the initial model, nothing observed, q = 0."""
        n = self.alpha.size
        return AvailabilityState(list(initial_arrays), AvailabilityTracker.start(n), np.zeros(n))

    def arrays(self, state: AvailabilityState) -> Arrays:
        """Broadcast theta."""
        return state.theta

    def availability(self, state: AvailabilityState) -> tuple[np.ndarray, np.ndarray]:
        """Return (pi, lambda) of every client: the oracle's if known, else the estimates."""
        pi, lam = state.tracker.estimates()
        return (
            pi if self.known_pi is None else self.known_pi,
            lam if self.known_lam is None else self.known_lam,
        )

    def weights(
        self, state: AvailabilityState, active: np.ndarray, replies: dict[int, ClientReply]
    ) -> tuple[np.ndarray, dict[str, Any], AvailabilityState]:
        """Return the weights q^(t), diagnostics and the state with what they learnt.

        Parameters
        ----------
        state : AvailabilityState
            The state; its tracker has observed ``active``.
        active : np.ndarray
            Shape (N,), bool: A_t, the clients that replied.
        replies : dict of int to ClientReply
            Each active client's reply by partition id.

        Returns
        -------
        tuple of (np.ndarray, dict, AvailabilityState)
            q^(t), shape (N,), >= 0 (only active clients with q_k > 0 take part), the
            diagnostics and the state with what the weights learnt.
        """
        raise NotImplementedError

    def aggregate(
        self,
        state: AvailabilityState,
        server_round: int,
        replies: Sequence[ClientReply],
        elapsed: int,
    ) -> Outcome[AvailabilityState]:
        """Observe A_t, weigh the replies by :meth:`weights`, step by eq. 3."""
        n = self.alpha.size
        tracker = state.tracker
        for _ in range(elapsed - 1):  # rounds with nobody relayed
            tracker = tracker.observe(np.zeros(n, bool))
        by_id = {r.partition_id: r for r in replies}
        ids = sorted(by_id)
        active = np.zeros(n, bool)
        active[ids] = True
        state = replace(state, tracker=tracker.observe(active))
        if not ids:
            return Outcome(state, {}, aggregated=False)
        q, diagnostics, state = self.weights(state, active, {k: by_id[k] for k in ids})
        taking_part = [k for k in ids if q[k] > 0]
        updates = [by_id[k].arrays() for k in taking_part]
        theta = server_step(state.theta, updates, q[taking_part], self.server_lr)
        return Outcome(
            replace(state, theta=theta, q=q),
            {"participants": len(taking_part), **diagnostics},
        )

    def diagnostics(self, state: AvailabilityState) -> dict[str, Any]:
        """Log ``q`` and ``availability``.

        ``q``: the last aggregation's weights; ``availability``: the tracker's
        (pi_hat, lambda_hat) (it tracks in both modes), ``None`` before round 1.
        """
        tracked = state.tracker.estimates() if state.tracker.rounds else None
        return {"q": state.q, "availability": tracked}


@dataclass(frozen=True, eq=False, kw_only=True)
class CAFedCore(AvailabilityAwareCore):
    """CA-Fed's core (Rodio et al., IEEE/ACM ToN 2024, Alg. 1).

    q^(t) from the loss estimates and the availability by :func:`ca_fed_weights`.
    ``kappa2`` (kappa_bar^2, Sec. IV-C), ``beta`` (eq. 17), ``tau``
    (line 19), ``loss_floor``: how F_hat* is estimated (:class:`LossEstimates`):
    ``running-min`` (the paper's text, Sec. IV-B) or ``local-optimum`` (each client
    reports its minimum local loss F_k* once, as the authors' code computes it; the fit
    config then carries ``report-local-optimum``). Diagnostics per round: ``eps-hat``
    (eq. 20 at the chosen q), ``gamma-hat`` (eq. 19) and ``excluded`` (clients with
    q_k = 0).
    """

    kappa2: float = hyper(1.0, doc="kappa_bar^2, the bound of Sec. IV-C", lo=0.0)
    beta: float = hyper(
        1.0, doc="beta, the smoothing of the loss estimates (eq. 17)", lo=0.0, hi=1.0, lo_open=True
    )
    tau: float = hyper(0.0, doc="tau, the exclusion threshold (Alg. 1 line 19)", lo=0.0)
    loss_floor: str = hyper(
        "running-min",
        doc="how F_k* is estimated: the paper's running minimum or the client's local optimum",
        choices=LOSS_FLOORS,
    )

    def fit_config(self, state: AvailabilityState, server_round: int) -> dict[str, Any]:
        """Ask for ``report-local-optimum`` when F_k* is the clients' local optimum."""
        return {REPORT_LOCAL_OPTIMUM: True} if self.loss_floor == "local-optimum" else {}

    def weights(self, state, active, replies):
        """Update the loss estimates (eq. 17) and choose q^(t) (:func:`ca_fed_weights`)."""
        keys = [RECEIVED_LOSS] + ([LOCAL_OPTIMUM] if self.loss_floor == "local-optimum" else [])
        reported = {key: np.full(active.size, np.nan) for key in keys}
        for k, reply in replies.items():
            for key in keys:
                if key not in reply.metrics:
                    raise ValueError(
                        f"client {k} sent no '{key}' fit metric: CA-Fed needs the loss at "
                        "the received model (and with loss_floor: local-optimum, its "
                        "minimum local loss); use CAFedClient"
                    )
                reported[key][k] = float(reply.metrics[key])
        losses, floors = reported[RECEIVED_LOSS], reported.get(LOCAL_OPTIMUM)
        estimates = (
            LossEstimates.start(active, losses, floors)
            if state.losses is None
            else state.losses.observe(active, losses, self.beta, floors)
        )
        pi, lam = self.availability(state)
        gap = estimates.gap
        q = ca_fed_weights(self.alpha, pi, lam, gap, self.kappa2, self.tau)
        diagnostics = {
            "eps-hat": estimated_error(q, self.alpha, gap, pi, self.kappa2),
            "gamma-hat": float(gap.max()),
            "excluded": int(np.count_nonzero(q == 0)),
        }
        return q, diagnostics, replace(state, losses=estimates)


# --------------------------------------------------------------- Flower adapters
class AvailabilityAwareStrategy(CoreStrategy):
    """The Flower adapter of an :class:`AvailabilityAwareCore`.

    The model theta the core steps from is the one each round broadcasts.
    """

    core_type: type[AvailabilityAwareCore]

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Record the broadcast model as theta, then configure the round as the base does."""
        self.state = replace(self.state, theta=to_arrays(parameters))
        return super().configure_fit(server_round, parameters, client_manager)


class CAFed(AvailabilityAwareStrategy):
    """CA-Fed (Rodio et al., IEEE/ACM ToN 2024, Alg. 1) as a Flower Strategy.

    Over :class:`CAFedCore`.

    How it fits Flower's legacy round (configure_fit -> fit -> aggregate_fit): the
    paper's server first receives A_t and the losses F_k^(t) (line 3), chooses q^(t)
    (lines 4-7), and only then lets the clients with q_k > 0 train (lines 8-11). Here
    every active client trains in the same round and reports F_k^(t) beside its update:
    the loss of its first local mini-batch B_{t,0}, computed at the received model
    before the first SGD step (``received-loss`` fit metric of
    :class:`~fedram_flwr.clients.CAFedClient`). The aggregation then updates F_hat,
    F_hat*, Gamma_hat', pi_hat, lambda_hat, computes q^(t) exactly as Alg. 1 does and
    aggregates the participants (line 12, eq. 3). The cost: no extra round trip and no
    extra computation for the loss, but the active clients CA-Fed excludes train and
    upload an update that is then discarded (the same bytes and work as FedAvg's round).
    """

    core_type = CAFedCore
