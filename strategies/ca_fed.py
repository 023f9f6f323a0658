"""CA-Fed: Correlation-Aware Federated learning.

A. Rodio, F. Faticanti, O. Marfoq, G. Neglia, E. Leonardi, "Federated Learning under
Heterogeneous and Correlated Client Availability", IEEE/ACM Transactions on Networking
32(2), 2024 (``papers/ca-fed_correlated-availability.md``). Section IV, Algorithm 1.

Pure numpy functions, vectorised over clients, first: the estimators of each client's
availability pi_k and correlation lambda_k (Sec. IV-B) with the
:class:`AvailabilityTracker` that accumulates their counts; the loss estimates F_hat
(eq. 17) and F_hat*; the estimated total error (eq. 18-20); the greedy exclusion ``get``
(Alg. 1, lines 13-22) and the weights q (lines 5-7); the server step (eq. 3). Then the
thin Flower Strategies: :class:`AvailabilityAwareStrategy`, the base CA-Fed shares with
its baselines (:mod:`fedram_flwr.strategies.availability_baselines`), and
:class:`CAFed`. Client k's availability is a two-state Markov chain (0 inactive,
1 active) with transition matrix P_k; P_k[s, s'] = P(s -> s').
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from flwr.common import (
    FitIns,
    FitRes,
    Metrics,
    NDArrays,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg as FlowerFedAvg
from numpy.typing import ArrayLike

from fedram_flwr.protocol import PARTITION_ID

RECEIVED_LOSS = "received-loss"  # fit metric: F_k^(t), the loss at the received model
LOCAL_OPTIMUM = "local-optimum-loss"  # fit metric: F_k*, the client's minimum local loss
REPORT_LOCAL_OPTIMUM = "report-local-optimum"  # fit config: ask for LOCAL_OPTIMUM
LOSS_FLOORS = ("running-min", "local-optimum")  # how CA-Fed estimates F_k*


# ------------------------------------------------------------------ estimators
def pi_hat(active_counts: ArrayLike, t: int, n_prior: ArrayLike, m_prior: ArrayLike) -> np.ndarray:
    """Posterior mean of pi_k under a Beta(n_k, m_k) prior (Sec. IV-B):
    pi_hat_k = (sum_{s <= t} 1{k in A_s} + n_k) / (t + n_k + m_k)."""
    n_prior, m_prior = np.asarray(n_prior, dtype=float), np.asarray(m_prior, dtype=float)
    return (np.asarray(active_counts) + n_prior) / (t + n_prior + m_prior)


def transition_counts(states: np.ndarray) -> np.ndarray:
    """(N, 2, 2) counts c[k, s, s'] of the transitions s -> s' of each client between
    consecutive rows of a rounds x clients bool matrix (fewer than 2 rows: zeros)."""
    states = np.asarray(states, dtype=bool)
    pair = 2 * states[:-1].astype(np.int64) + states[1:]  # 0: 0->0, 1: 0->1, 2: 1->0, 3: 1->1
    counts = np.stack([(pair == j).sum(axis=0) for j in range(4)], axis=-1)
    return counts.reshape(states.shape[1], 2, 2)


def transition_matrix_hat(counts: np.ndarray, prior: ArrayLike = 1.0) -> np.ndarray:
    """Posterior mean of each P_k (Sec. IV-B): row s of P_k gets a Beta prior with
    pseudo-counts prior[s, s'] (scalar, (2, 2) or (N, 2, 2)), so
    P_hat_k[s, s'] = (c[k, s, s'] + prior[s, s']) / sum_u (c[k, s, u] + prior[s, u]):
    each P_hat(s -> s') is a fraction of the transitions *from* state s."""
    posterior = np.asarray(counts, dtype=float) + np.asarray(prior, dtype=float)
    return posterior / posterior.sum(axis=-1, keepdims=True)


def lambda_hat(p_hat: np.ndarray) -> np.ndarray:
    """Second eigenvalue of each 2x2 stochastic matrix (Sec. IV-B, Appendix F3):
    lambda_hat_k = P_hat_k(1 -> 1) + P_hat_k(0 -> 0) - 1 (trace minus the eigenvalue 1)."""
    return p_hat[..., 1, 1] + p_hat[..., 0, 0] - 1.0


# --------------------------------------------------------------------- tracker
@dataclass(frozen=True, eq=False)
class AvailabilityTracker:
    """What the server has seen of each client's availability after ``rounds`` rounds:
    active counts, transition counts and the last round's active flags. One value,
    replaced every round by :meth:`observe` (easy to checkpoint)."""

    rounds: int
    active_counts: np.ndarray  # (N,) rounds in which each client was active
    transitions: np.ndarray  # (N, 2, 2) counts c[k, s, s'] of s -> s'
    last: np.ndarray | None  # (N,) bool, the last observed round

    @classmethod
    def start(cls, num_clients: int) -> AvailabilityTracker:
        """Nothing observed yet."""
        return cls(
            0, np.zeros(num_clients, np.int64), np.zeros((num_clients, 2, 2), np.int64), None
        )

    def observe(self, active: np.ndarray) -> AvailabilityTracker:
        """The tracker after one more round with active flags ``active`` ((N,) bool)."""
        active = np.asarray(active, dtype=bool)
        seen = active[None] if self.last is None else np.stack([self.last, active])
        return AvailabilityTracker(
            self.rounds + 1,
            self.active_counts + active,
            self.transitions + transition_counts(seen),
            active.copy(),
        )

    def estimates(
        self, pi_prior: tuple[ArrayLike, ArrayLike] = (1.0, 1.0), transition_prior: ArrayLike = 1.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """(pi_hat, lambda_hat) of every client; priors as in :func:`pi_hat`
        (n_k, m_k) and :func:`transition_matrix_hat` (default: uniform Beta(1, 1))."""
        pi = pi_hat(self.active_counts, self.rounds, *pi_prior)
        return pi, lambda_hat(transition_matrix_hat(self.transitions, transition_prior))


# --------------------------------------------------------- loss estimates (IV-B)
def filter_losses(
    f_hat: np.ndarray, active: np.ndarray, losses: np.ndarray, beta: float
) -> np.ndarray:
    """Eq. 17: F_hat^(t) = (1 - beta 1_A) * F_hat^(t-1) + beta 1_A * F^(t); ``losses``
    is read at the active entries only. beta = 1 keeps the last report. The paper's
    experiments state beta = 0, which read literally would freeze F_hat; the authors'
    code weighs the *past* by that parameter, so their setting is beta = 1 here."""
    return np.where(active, (1.0 - beta) * f_hat + beta * losses, f_hat)


@dataclass(frozen=True, eq=False)
class LossEstimates:
    """The server's F_hat^(t) (eq. 17) and its estimate F_hat* of each client's minimum
    loss F_k*; one value, replaced every round by :meth:`observe`.

    F_hat* is either the paper's running minimum F_hat*_k = min_{0 <= s <= t} F_hat_k^(s)
    (Sec. IV-B; ``floors=None``), or each client's own minimum local loss as it reports
    it (``floors``: the authors' code computes F_k* by fitting each client's local model).
    The running minimum is biased, and the bias depends on availability: a client that
    reports often takes the minimum of many noisy one-batch losses, so F_hat - F_hat* is
    the noise above that minimum (> 0), while a client that reports rarely sees the loss
    only fall between its reports (the model improves), so its gap stays near 0. Eq. 18
    then ranks the *more* available clients as the ones slowing convergence.

    Clients that have not reported yet hold the means of the first round's reports, as
    F_hat (Alg. 1 line 1, as in the authors' code) and, with ``floors``, as F_hat* too.
    (With F_hat* = F_hat their gap would be 0, and ``get`` would keep them and exclude
    the clients that have reported; the running minimum has that flaw.)
    """

    f_hat: np.ndarray
    f_star: np.ndarray

    @classmethod
    def start(
        cls, active: np.ndarray, losses: np.ndarray, floors: np.ndarray | None = None
    ) -> LossEstimates:
        """Alg. 1 line 1 and the first reports: the active clients' losses (and floors),
        and for the others the means of those (they have reported nothing yet)."""
        f_hat = np.where(active, losses, np.mean(losses[active]))
        if floors is None:
            return cls(f_hat, f_hat.copy())
        return cls(f_hat, np.where(active, floors, np.mean(floors[active])))

    def observe(
        self,
        active: np.ndarray,
        losses: np.ndarray,
        beta: float,
        floors: np.ndarray | None = None,
    ) -> LossEstimates:
        """One more round: eq. 17 on the active clients' ``losses``; F_hat* from
        their ``floors`` if given (read at the active entries), else the running min."""
        f_hat = filter_losses(self.f_hat, active, losses, beta)
        if floors is None:
            return LossEstimates(f_hat, np.minimum(self.f_star, f_hat))
        return LossEstimates(f_hat, np.where(active, floors, self.f_star))

    @property
    def gap(self) -> np.ndarray:
        """F_hat_k - F_hat*_k (>= 0 for the running minimum)."""
        return self.f_hat - self.f_star


# ----------------------------------------------------- weights (eq. 18-20, Alg. 1)
def unbiased_weights(alpha: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """q_k = alpha_k / pi_k: the biased importance p of eq. 4 equals alpha, so the
    bias term vanishes (Thm. 1; Alg. 1 line 5)."""
    return alpha / pi


def biased_importance(pi: np.ndarray, q: np.ndarray) -> np.ndarray:
    """p = pi (~*) q, p_k = pi_k q_k / sum_h pi_h q_h (eq. 4, notation of eq. 18)."""
    u = pi * q
    return u / u.sum()


def tv_distance(a: np.ndarray, b: np.ndarray) -> float:
    """d_TV(a, b) = 1/2 sum_k |a_k - b_k| (Thm. 3)."""
    return 0.5 * float(np.abs(a - b).sum())


def estimated_error(
    q: np.ndarray, alpha: np.ndarray, gap: np.ndarray, pi: np.ndarray, kappa2: float
) -> float:
    """eps_hat of eq. 20: <F_hat - F_hat*, p> (eq. 18) + 4 kappa2 d_TV^2(alpha, p)
    Gamma_hat' with p = pi (~*) q and Gamma_hat' = max_k (F_hat_k - F_hat*_k) (eq. 19)."""
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
    """Alg. 1's ``get`` (lines 13-22) on q = alpha / pi restricted to ``included``:
    visit the clients in ``order`` and exclude each one (q_k <- 0) if that lowers
    eps_hat (eq. 20) by at least ``tau``. Returns the new inclusion mask.

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
    """q^(t) of Alg. 1 lines 5-7: q = alpha / pi (line 5), then ``get`` in descending
    order of correlation (line 6; |lambda|, since lambda(P_k) is the second largest
    eigenvalue *modulus*, Sec. III-A), then in ascending order of pi (line 7).
    ``alpha`` must sum to 1.

    Ties, which the paper leaves open, are broken by the other key (then by id): among
    equally correlated clients the less available come first in line 6's pass, and
    among equally available ones the more correlated first in line 7's. This matters in
    the paper's own population, where every correlated client has lambda = nu exactly
    (oracle-informed): the greedy pass excludes its first candidates most cheaply (the
    bias term grows with each exclusion), so breaking lambda's ties by id would favour
    excluding whichever group has the lower ids, instead of the "less available,
    correlated" clients that Guidelines A and B (Sec. III-D) single out."""
    corr = np.abs(lam)
    by_lambda = np.lexsort((pi, -corr))  # last key is primary; lexsort is stable
    included = get(np.ones(alpha.size, bool), by_lambda, alpha, gap, kappa2, tau)
    included = get(included, np.lexsort((-corr, pi)), alpha, gap, kappa2, tau)
    return np.where(included, unbiased_weights(alpha, pi), 0.0)


def server_step(
    theta: NDArrays, updates: Sequence[NDArrays], q: Sequence[float], eta: float
) -> NDArrays:
    """Eq. 3 with W = R^d (the projection is the identity): theta + eta_bar sum_k q_k
    (theta_k - theta), the sum in the given order and in float64, each array cast back
    to its dtype."""
    out = []
    for i, layer in enumerate(theta):
        base = layer.astype(np.float64)
        step = np.zeros_like(base)
        for update, qk in zip(updates, q):
            step += qk * (update[i].astype(np.float64) - base)
        out.append((base + eta * step).astype(layer.dtype))
    return out


# ------------------------------------------------------------------- strategies
class AvailabilityAwareStrategy(FlowerFedAvg):
    """Base of CA-Fed and its baselines (Sec. V-A c): every active client the oracle
    relays trains from the global theta; the server weighs their updates with q^(t)
    from :meth:`weights` and takes the step of eq. 3 with the server learning rate
    eta_bar, summing in partition-id order.

    ``alpha``: the target importance of each client (eq. 1; sums to 1, e.g. proportional
    to data sizes). The server always tracks availability (:class:`AvailabilityTracker`;
    the active set A_t is who returned an update, and a round in which nobody was
    relayed, which Flower skips, is observed as all inactive when the next one comes).
    :meth:`availability` gives its estimates, or the oracle's true ``known_pi`` /
    ``known_lam`` when the scenario runs oracle-informed.
    """

    def __init__(
        self,
        *,
        initial_theta: NDArrays,
        alpha: ArrayLike,
        server_lr: float = 1.0,
        known_pi: ArrayLike | None = None,
        known_lam: ArrayLike | None = None,
        **fedavg_kwargs,
    ) -> None:
        alpha = np.asarray(alpha, dtype=float)
        if np.any(alpha <= 0) or abs(alpha.sum() - 1.0) > 1e-9:
            raise ValueError("alpha (target importance): must be > 0 and sum to 1")
        if server_lr <= 0:
            raise ValueError(f"algorithm.params.server_lr: {server_lr} must be > 0")
        if known_pi is not None and not np.all(np.asarray(known_pi) > 0):
            raise ValueError("oracle-informed pi: every client needs pi_k > 0 (q = alpha / pi)")
        super().__init__(initial_parameters=ndarrays_to_parameters(initial_theta), **fedavg_kwargs)
        self.alpha, self.server_lr = alpha, server_lr
        self.known_pi = None if known_pi is None else np.asarray(known_pi, dtype=float)
        self.known_lam = None if known_lam is None else np.asarray(known_lam, dtype=float)
        self.tracker = AvailabilityTracker.start(alpha.size)
        self.theta = list(initial_theta)  # the global model the round's clients receive
        self.q = np.zeros(alpha.size)  # the last round's weights (diagnostics)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(server_lr={self.server_lr})"

    def availability(self) -> tuple[np.ndarray, np.ndarray]:
        """(pi, lambda) of every client: the oracle's if known, else the estimates."""
        pi, lam = self.tracker.estimates()
        return (
            pi if self.known_pi is None else self.known_pi,
            lam if self.known_lam is None else self.known_lam,
        )

    @abstractmethod
    def weights(
        self, active: np.ndarray, reports: dict[int, Metrics]
    ) -> tuple[np.ndarray, dict[str, Scalar]]:
        """q^(t) over all clients (only active ones with q_k > 0 take part) and
        diagnostics, once the tracker has observed ``active``; ``reports``: each active
        client's fit metrics by partition id."""

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        self.theta = parameters_to_ndarrays(parameters)
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        n = self.alpha.size
        while self.tracker.rounds < server_round - 1:  # rounds with nobody relayed
            self.tracker = self.tracker.observe(np.zeros(n, bool))
        by_id = {int(res.metrics[PARTITION_ID]): res for _, res in results}
        ids = sorted(by_id)
        active = np.zeros(n, bool)
        active[ids] = True
        self.tracker = self.tracker.observe(active)
        if not ids or (failures and not self.accept_failures):
            return None, {}
        self.q, diagnostics = self.weights(active, {k: by_id[k].metrics for k in ids})
        taking_part = [k for k in ids if self.q[k] > 0]
        updates = [parameters_to_ndarrays(by_id[k].parameters) for k in taking_part]
        theta = server_step(self.theta, updates, self.q[taking_part], self.server_lr)
        metrics: dict[str, Scalar] = {}
        if self.fit_metrics_aggregation_fn is not None:
            metrics = self.fit_metrics_aggregation_fn(
                [(by_id[k].num_examples, by_id[k].metrics) for k in ids]
            )
        metrics.update({"participants": len(taking_part), **diagnostics})
        return ndarrays_to_parameters(theta), metrics


class CAFed(AvailabilityAwareStrategy):
    """CA-Fed (Alg. 1) as a Flower Strategy.

    How it fits Flower's legacy round (configure_fit -> fit -> aggregate_fit): the
    paper's server first receives A_t and the losses F_k^(t) (line 3), chooses q^(t)
    (lines 4-7), and only then lets the clients with q_k > 0 train (lines 8-11). Here
    every active client trains in the same round and reports F_k^(t) beside its update:
    the loss of its first local mini-batch B_{t,0}, computed at the received model
    before the first SGD step (``received-loss`` fit metric of
    :class:`~fedram_flwr.clients.CAFedClient`). ``aggregate_fit`` then updates F_hat,
    F_hat*, Gamma_hat', pi_hat, lambda_hat, computes q^(t) exactly as Alg. 1 does and
    aggregates the participants (line 12, eq. 3). The cost: no extra round trip and no
    extra computation for the loss, but the active clients CA-Fed excludes train and
    upload an update that is then discarded (the same bytes and work as FedAvg's round).

    Hyper-parameters: ``kappa2`` (kappa_bar^2, Sec. IV-C), ``beta`` (eq. 17), ``tau``
    (line 19), ``loss_floor``: how F_hat* is estimated (:class:`LossEstimates`):
    ``running-min`` (the paper's text, Sec. IV-B) or ``local-optimum`` (each client
    reports its minimum local loss F_k* once, as the authors' code computes it; the
    fit config then carries ``report-local-optimum``). Diagnostics per round:
    ``eps-hat`` (eq. 20 at the chosen q), ``gamma-hat`` (eq. 19) and ``excluded``
    (clients with q_k = 0).
    """

    def __init__(
        self,
        *,
        kappa2: float = 1.0,
        beta: float = 1.0,
        tau: float = 0.0,
        loss_floor: str = "running-min",
        **kwargs,
    ):
        if kappa2 < 0:
            raise ValueError(f"algorithm.params.kappa2: {kappa2} must be >= 0")
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"algorithm.params.beta: {beta} is outside (0, 1]")
        if tau < 0:
            raise ValueError(f"algorithm.params.tau: {tau} must be >= 0")
        if loss_floor not in LOSS_FLOORS:
            raise ValueError(
                f"algorithm.params.loss_floor: {loss_floor!r} is not one of {LOSS_FLOORS}"
            )
        super().__init__(**kwargs)
        self.kappa2, self.beta, self.tau, self.loss_floor = kappa2, beta, tau, loss_floor
        self.losses: LossEstimates | None = None

    def __repr__(self) -> str:
        return (
            f"CAFed(kappa2={self.kappa2}, beta={self.beta}, tau={self.tau}, "
            f"loss_floor={self.loss_floor})"
        )

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        pairs = super().configure_fit(server_round, parameters, client_manager)
        if self.loss_floor == "local-optimum":
            for _, ins in pairs:
                ins.config[REPORT_LOCAL_OPTIMUM] = True
        return pairs

    def weights(
        self, active: np.ndarray, reports: dict[int, Metrics]
    ) -> tuple[np.ndarray, dict[str, Scalar]]:
        keys = [RECEIVED_LOSS] + ([LOCAL_OPTIMUM] if self.loss_floor == "local-optimum" else [])
        reported = {key: np.full(active.size, np.nan) for key in keys}
        for k, metrics in reports.items():
            for key in keys:
                if key not in metrics:
                    raise ValueError(
                        f"client {k} sent no '{key}' fit metric: CA-Fed needs the loss at "
                        "the received model (and with loss_floor: local-optimum, its "
                        "minimum local loss); use CAFedClient"
                    )
                reported[key][k] = float(metrics[key])
        losses, floors = reported[RECEIVED_LOSS], reported.get(LOCAL_OPTIMUM)
        self.losses = (
            LossEstimates.start(active, losses, floors)
            if self.losses is None
            else self.losses.observe(active, losses, self.beta, floors)
        )
        pi, lam = self.availability()
        gap = self.losses.gap
        q = ca_fed_weights(self.alpha, pi, lam, gap, self.kappa2, self.tau)
        return q, {
            "eps-hat": estimated_error(q, self.alpha, gap, pi, self.kappa2),
            "gamma-hat": float(gap.max()),
            "excluded": int(np.count_nonzero(q == 0)),
        }
