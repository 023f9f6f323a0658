"""CA-Fed: Correlation-Aware Federated learning.

A. Rodio, F. Faticanti, O. Marfoq, G. Neglia, E. Leonardi, "Federated Learning under
Heterogeneous and Correlated Client Availability", IEEE/ACM Transactions on Networking
32(2), 2024 (``papers/ca-fed_correlated-availability.md``). Section IV, Algorithm 1.

The pure numpy functions, vectorised over clients (the estimated total error, eq.
18-20; the greedy exclusion ``get``, Alg. 1, lines 13-22; the weights q, lines 5-7; the
server step, eq. 3), are in :mod:`~fedram_flwr.strategies.ca_fed_math`, re-exported
here; the estimators of pi_k, lambda_k, F_hat and F_hat* (Sec. IV-B) are in
:mod:`~fedram_flwr.strategies.availability_estimates`. Here: the core
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
from flwr.common import FitIns, Parameters
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
from fedram_flwr.strategies.base import CoreStrategy
from fedram_flwr.strategies.ca_fed_math import biased_importance as biased_importance
from fedram_flwr.strategies.ca_fed_math import ca_fed_weights, estimated_error, server_step
from fedram_flwr.strategies.ca_fed_math import get as get
from fedram_flwr.strategies.ca_fed_math import tv_distance as tv_distance
from fedram_flwr.strategies.ca_fed_math import unbiased_weights as unbiased_weights
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.hyper import hyper, server_lr_hyper
from fedram_flwr.strategies.wire import to_arrays

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
