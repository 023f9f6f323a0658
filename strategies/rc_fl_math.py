"""RC-FL's pure functions: its dual and smoothed objectives, per-client values, the draws.

:func:`rcfl_dual` (eq. 2/4) and :func:`rcfl_smoothed` (eq. 5) evaluate RC-FL's
objective for given thresholds eta (the paper's Lemmas 1-2: see
:mod:`~fedram_flwr.strategies.rc_fl`), :func:`per_client` expands a hyper-parameter
given once or per client, :func:`draw_with_replacement` is rFedFair's partial
participation (Sec. 4). Numpy only; the core and the Flower adapter that use them are in
:mod:`~fedram_flwr.strategies.rc_fl`, which re-exports these names.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedram_flwr.objectives import softplus_mu
from fedram_flwr.rng import stream


def rcfl_dual(eta, losses: np.ndarray, p: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Return RC-FL's dual objective F_alpha(omega, eta) (eq. 2/4).

    F_alpha(omega, eta) = eta + sum_i (p_i / alpha_i) (f_i - eta)_+.

    Parameters
    ----------
    eta : float or array_like
        The threshold(s) eta, in loss units: one value or an array of them.
    losses : np.ndarray
        Shape (N,): f_i(omega), the clients' losses.
    p : np.ndarray
        Shape (N,): p_i = m_i / m, the clients' data shares.
    alpha : np.ndarray
        Shape (N,): alpha_i, each in [p_i, 1].

    Returns
    -------
    np.ndarray
        F_alpha, shaped as ``eta``.
    """
    eta = np.asarray(eta, dtype=float)
    return eta + np.maximum(-np.subtract.outer(eta, losses), 0.0) @ (p / alpha)


def rcfl_smoothed(eta, losses: np.ndarray, p: np.ndarray, alpha: np.ndarray, mu: float):
    """Return RC-FL's smoothed objective F^mu_alpha(omega, eta) = sum_i p_i f^{mu,i} (eq. 5).

    Parameters
    ----------
    eta, losses, p, alpha
        As :func:`rcfl_dual`'s.
    mu : float
        The smoothing of phi_mu, > 0.

    Returns
    -------
    np.ndarray
        F^mu_alpha, shaped as ``eta``; F <= F^mu <= F + mu tau_alpha (Lemma 2).
    """
    eta = np.asarray(eta, dtype=float)
    return eta + softplus_mu(-np.subtract.outer(eta, losses), mu) @ (p / alpha)


def per_client(value: float | Sequence[float], num_clients: int, field: str) -> np.ndarray:
    """Expand a scalar (every client) or one value per client into a float array.

    Parameters
    ----------
    value : float or sequence of float
        One value, or N of them.
    num_clients : int
        N, >= 1.
    field : str
        The parameter's name, for the error.

    Returns
    -------
    np.ndarray
        Shape (N,).

    Raises
    ------
    ValueError
        If ``value`` holds neither 1 nor N values.
    """
    v = np.atleast_1d(np.asarray(value, dtype=float))
    if v.size == 1:
        return np.full(num_clients, v[0])
    if v.size != num_clients:
        raise ValueError(f"{field}: give one value or one per client ({num_clients}), got {v.size}")
    return v


def draw_with_replacement(p: np.ndarray, k: int, seed: int, server_round: int) -> dict[int, int]:
    """Draw rFedFair's partial participation: K draws with replacement by p (Sec. 4).

    After Li et al. 2020b; from the ``rcfl-draws`` stream seeded by (seed, round).

    Parameters
    ----------
    p : np.ndarray
        Shape (n,): the candidates' weights, >= 0 with a positive sum (normalised here).
    k : int
        K, the number of draws, >= 1.
    seed : int
        The scenario seed.
    server_round : int
        t, >= 1.

    Returns
    -------
    dict of int to int
        Position in ``p`` -> times drawn, >= 1 (the counts sum to K).
    """
    rng = stream("rcfl-draws", seed, server_round)
    drawn = rng.choice(len(p), size=k, replace=True, p=p / p.sum())
    values, counts = np.unique(drawn, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts)}
