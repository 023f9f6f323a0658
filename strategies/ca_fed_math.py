"""CA-Fed's pure functions: the weights q of Alg. 1 and the server step.

Pure numpy, vectorised over clients (Rodio et al., IEEE/ACM ToN 2024, Sec. IV,
Algorithm 1; ``papers/ca-fed_correlated-availability.md``): the unbiased weights and
the biased importance (eq. 16), the total-variation distance, the estimated total error
(eq. 18-20), the greedy exclusion ``get`` (Alg. 1, lines 13-22), the weights q
(lines 5-7) and the server step (eq. 3). The core and the Flower adapters that use
them are in :mod:`~fedram_flwr.strategies.ca_fed`, which re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedram_flwr.protocol import Arrays


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
    by_lambda, by_pi = exclusion_orders(pi, lam)
    included = get(np.ones(alpha.size, bool), by_lambda, alpha, gap, kappa2, tau)
    included = get(included, by_pi, alpha, gap, kappa2, tau)
    return np.where(included, unbiased_weights(alpha, pi), 0.0)


def exclusion_orders(pi: np.ndarray, lam: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the orders of Alg. 1's two exclusion passes (lines 6 and 7).

    Line 6: descending |lambda_k|, ties by ascending pi_k, then by id; line 7: ascending
    pi_k, ties by descending |lambda_k| (the more correlated first), then by id
    (:func:`ca_fed_weights` says why).

    Parameters
    ----------
    pi : np.ndarray
        Shape (N,): each client's availability.
    lam : np.ndarray
        Shape (N,): each client's correlation lambda_k.

    Returns
    -------
    tuple of np.ndarray
        The two permutations of 0..N-1.
    """
    corr = np.abs(lam)
    # lexsort's last key is the primary one; it is stable, so full ties go by id
    return np.lexsort((pi, -corr)), np.lexsort((-corr, pi))


def server_step(theta: Arrays, updates: Sequence[Arrays], q: Sequence[float], eta: float) -> Arrays:
    """Take CA-Fed's server step, eq. 3 with W = R^d (the projection is the identity).

    theta + eta_bar sum_k q_k (theta_k - theta), the sum in the given order and in
    float64, each array cast back to its dtype.

    Parameters
    ----------
    theta : list of numpy.ndarray
        The global model the round's clients received.
    updates : sequence of lists of numpy.ndarray
        theta_k, the models returned by the participants (q_k > 0).
    q : sequence of float
        q_k, one per returned model, > 0.
    eta : float
        eta_bar, the server learning rate, > 0.

    Returns
    -------
    list of numpy.ndarray
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
