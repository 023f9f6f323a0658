"""What CA-Fed's server estimates of its clients' availability and losses.

Rodio et al., "Federated Learning under Heterogeneous and Correlated Client
Availability", IEEE/ACM ToN 32(2), 2024, Sec. IV-B.

Pure numpy, vectorised over clients: the Beta-posterior estimators of each client's
availability pi_k and correlation lambda_k with the :class:`AvailabilityTracker` that
accumulates their counts, and the loss estimates F_hat (eq. 17) and F_hat* in
:class:`LossEstimates`. Both are values replaced each round. Client k's availability is
a two-state Markov chain (0 inactive, 1 active) with transition matrix P_k;
P_k[s, s'] = P(s -> s'). Used by CA-Fed and its baselines (``ca_fed``,
``availability_baselines``) and by FedAvg-IS (``participation``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


# ------------------------------------------------------------------ estimators
def pi_hat(active_counts: ArrayLike, t: int, n_prior: ArrayLike, m_prior: ArrayLike) -> np.ndarray:
    """Estimate each client's availability pi_k: its Beta posterior mean (Sec. IV-B).

    pi_hat_k = (sum_{s <= t} 1{k in A_s} + n_k) / (t + n_k + m_k).

    Parameters
    ----------
    active_counts : array_like
        Shape (N,): the rounds up to t in which client k was active, in 0..t.
    t : int
        The rounds observed, >= 0.
    n_prior, m_prior : array_like
        The Beta(n_k, m_k) prior's pseudo-counts (scalar or shape (N,)), > 0
        (1, 1: uniform).

    Returns
    -------
    np.ndarray
        pi_hat, shape (N,), in (0, 1).
    """
    n_prior, m_prior = np.asarray(n_prior, dtype=float), np.asarray(m_prior, dtype=float)
    return (np.asarray(active_counts) + n_prior) / (t + n_prior + m_prior)


def transition_counts(states: np.ndarray) -> np.ndarray:
    """Count each client's transitions s -> s' between consecutive rounds.

    Parameters
    ----------
    states : np.ndarray
        Shape (rounds, N), bool: whether client k was active in each round.

    Returns
    -------
    np.ndarray
        Shape (N, 2, 2), int64: c[k, s, s'], the transitions s -> s' (0 inactive,
        1 active) of client k; zeros with fewer than 2 rows.
    """
    states = np.asarray(states, dtype=bool)
    pair = 2 * states[:-1].astype(np.int64) + states[1:]  # 0: 0->0, 1: 0->1, 2: 1->0, 3: 1->1
    counts = np.stack([(pair == j).sum(axis=0) for j in range(4)], axis=-1)
    return counts.reshape(states.shape[1], 2, 2)


def transition_matrix_hat(counts: np.ndarray, prior: ArrayLike = 1.0) -> np.ndarray:
    """Estimate each client's transition matrix P_k: its posterior mean (Sec. IV-B).

    Row s of P_k gets a Beta prior with pseudo-counts prior[s, s'], so
    P_hat_k[s, s'] = (c[k, s, s'] + prior[s, s']) / sum_u (c[k, s, u] + prior[s, u]):
    each P_hat(s -> s') is a fraction of the transitions *from* state s.

    Parameters
    ----------
    counts : np.ndarray
        Shape (N, 2, 2): c[k, s, s'] (:func:`transition_counts`).
    prior : array_like
        Pseudo-counts, > 0: scalar, (2, 2) or (N, 2, 2); 1: uniform.

    Returns
    -------
    np.ndarray
        P_hat, shape (N, 2, 2): row-stochastic matrices.
    """
    posterior = np.asarray(counts, dtype=float) + np.asarray(prior, dtype=float)
    return posterior / posterior.sum(axis=-1, keepdims=True)


def lambda_hat(p_hat: np.ndarray) -> np.ndarray:
    """Estimate each client's correlation lambda_k (Sec. IV-B, Appendix F3).

    The second eigenvalue of each 2x2 stochastic matrix:
    lambda_hat_k = P_hat_k(1 -> 1) + P_hat_k(0 -> 0) - 1 (trace minus the eigenvalue 1).

    Parameters
    ----------
    p_hat : np.ndarray
        Shape (..., 2, 2): row-stochastic matrices (:func:`transition_matrix_hat`).

    Returns
    -------
    np.ndarray
        lambda_hat, shape (...,), in [-1, 1].
    """
    return p_hat[..., 1, 1] + p_hat[..., 0, 0] - 1.0


# --------------------------------------------------------------------- tracker
@dataclass(frozen=True, eq=False)
class AvailabilityTracker:
    """What the server has seen of each client's availability after ``rounds`` rounds.

    One value, replaced every round by :meth:`observe` (easy to checkpoint).

    Parameters
    ----------
    rounds : int
        t, the rounds observed, >= 0.
    active_counts : np.ndarray
        Shape (N,): the rounds in which each client was active, in 0..t.
    transitions : np.ndarray
        Shape (N, 2, 2): counts c[k, s, s'] of s -> s' (:func:`transition_counts`).
    last : np.ndarray or None
        Shape (N,), bool: the last observed round's active flags (``None``: none yet).
    """

    rounds: int
    active_counts: np.ndarray  # (N,) rounds in which each client was active
    transitions: np.ndarray  # (N, 2, 2) counts c[k, s, s'] of s -> s'
    last: np.ndarray | None  # (N,) bool, the last observed round

    @classmethod
    def start(cls, num_clients: int) -> AvailabilityTracker:
        """Return a tracker of N = ``num_clients`` clients with nothing observed yet."""
        return cls(
            0, np.zeros(num_clients, np.int64), np.zeros((num_clients, 2, 2), np.int64), None
        )

    def observe(self, active: np.ndarray) -> AvailabilityTracker:
        """Return the tracker after one more round with active flags ``active`` ((N,) bool)."""
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
        """Return (pi_hat, lambda_hat) of every client (Sec. IV-B).

        Parameters
        ----------
        pi_prior : tuple of array_like
            (n_k, m_k) of :func:`pi_hat`, > 0; default uniform Beta(1, 1).
        transition_prior : array_like
            The pseudo-counts of :func:`transition_matrix_hat`, > 0; default 1.

        Returns
        -------
        tuple of (np.ndarray, np.ndarray)
            pi_hat in (0, 1) and lambda_hat in [-1, 1], each shape (N,).
        """
        pi = pi_hat(self.active_counts, self.rounds, *pi_prior)
        return pi, lambda_hat(transition_matrix_hat(self.transitions, transition_prior))


# --------------------------------------------------------- loss estimates (IV-B)
def filter_losses(
    f_hat: np.ndarray, active: np.ndarray, losses: np.ndarray, beta: float
) -> np.ndarray:
    """Filter the reported losses: CA-Fed eq. 17.

    F_hat^(t) = (1 - beta 1_A) * F_hat^(t-1) + beta 1_A * F^(t). The paper's
    experiments state beta = 0, which read literally would freeze F_hat; the authors'
    code weighs the *past* by that parameter, so their setting is beta = 1 here.

    Parameters
    ----------
    f_hat : np.ndarray
        F_hat^(t-1), shape (N,): the losses estimated before round t.
    active : np.ndarray
        Shape (N,), bool: 1_A, the clients that reported in round t.
    losses : np.ndarray
        F^(t), shape (N,): the reported losses, read at the active entries only.
    beta : float
        The weight of the new report, in [0, 1]; 1 keeps the last report.

    Returns
    -------
    np.ndarray
        F_hat^(t), shape (N,).
    """
    return np.where(active, (1.0 - beta) * f_hat + beta * losses, f_hat)


@dataclass(frozen=True, eq=False)
class LossEstimates:
    """The server's F_hat^(t) (eq. 17) and its estimate F_hat* of each client's minimum loss.

    One value, replaced every round by :meth:`observe`.

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

    Parameters
    ----------
    f_hat : np.ndarray
        F_hat^(t), shape (N,): each client's filtered loss (eq. 17).
    f_star : np.ndarray
        F_hat*, shape (N,): each client's estimated minimum loss F_k*.
    """

    f_hat: np.ndarray
    f_star: np.ndarray

    @classmethod
    def start(
        cls, active: np.ndarray, losses: np.ndarray, floors: np.ndarray | None = None
    ) -> LossEstimates:
        """Return the estimates from the first reports (Alg. 1 line 1).

        Parameters
        ----------
        active : np.ndarray
            Shape (N,), bool: the clients that reported, at least one.
        losses : np.ndarray
            Shape (N,): their losses, read at the active entries.
        floors : np.ndarray, optional
            Shape (N,): their own minimum local losses (``None``: F_hat* is the running
            minimum).

        Returns
        -------
        LossEstimates
            The active clients' losses (and floors), and for the others the means of
            those (they have reported nothing yet).
        """
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
        """Return the estimates after one more round.

        Parameters
        ----------
        active : np.ndarray
            Shape (N,), bool: the clients that reported.
        losses : np.ndarray
            Shape (N,): their losses (eq. 17), read at the active entries.
        beta : float
            Eq. 17's weight of the new report, in [0, 1].
        floors : np.ndarray, optional
            Shape (N,): F_hat* from the active clients' own minimum losses; ``None``:
            the running minimum of F_hat.

        Returns
        -------
        LossEstimates
            F_hat^(t) and F_hat*.
        """
        f_hat = filter_losses(self.f_hat, active, losses, beta)
        if floors is None:
            return LossEstimates(f_hat, np.minimum(self.f_star, f_hat))
        return LossEstimates(f_hat, np.where(active, floors, self.f_star))

    @property
    def gap(self) -> np.ndarray:
        """F_hat_k - F_hat*_k (>= 0 for the running minimum)."""
        return self.f_hat - self.f_star
