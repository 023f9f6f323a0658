"""The math a client needs: the local objectives and their gradient weights.

numpy only (the clients apply these weights to torch gradients); no Flower import, so
client code never imports server strategies. Fed-CVaR-Avg (Theodoropoulos et al.,
ICASSP 2024, eq. 6), RC-FL (``papers/rc-fl_fairness-aware-robust.md``, eq. 1-5,
Def. 2) and SCAFFOLD's control update (Karimireddy et al., ICML 2020, Alg. 1 line 12).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


# ------------------------------------------------------------ Fed-CVaR-Avg (eq. 6)
def cvar_local_objective(loss: np.ndarray | float, t: float, alpha: float, gamma: float):
    """G_i(theta, t) of eq. (6) for a loss value f_i(theta) (vectorised over ``loss``)."""
    loss = np.asarray(loss, dtype=float)
    return (1 - gamma) * (t + np.maximum(loss - t, 0.0) / alpha) + gamma * loss


def cvar_gradient_weights(loss: float, t: float, alpha: float, gamma: float) -> tuple[float, float]:
    """(dG/df, dG/dt) of eq. (6) at a mini-batch loss f_b (Alg. 1, line 8).

    dG/dt = (1 - gamma)(1 - 1{f_b > t} / alpha) and dG/df = 1 - dG/dt, so
    grad_theta G = (dG/df) grad_theta f_b. Written this way dG/df is exactly 1.0 when
    alpha = 1 or gamma = 1 and f_b > t, which makes the theta step bit-identical to SGD.
    """
    d_t = (1.0 - gamma) * (1.0 - float(loss > t) / alpha)
    return 1.0 - d_t, d_t


# ----------------------------------------------------------------- RC-FL (eq. 1-5)
def softplus_mu(x: np.ndarray | float, mu: float) -> np.ndarray:
    """phi_mu(x) = mu log(1 + e^{x / mu}) (Sec. 4), exact for any x / mu:
    mu (max(z, 0) + log1p(e^{-|z|})) with z = x / mu never overflows."""
    z = np.asarray(x, dtype=float) / mu
    return mu * (np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z))))


def sigmoid(z: np.ndarray | float) -> np.ndarray:
    """phi_mu'(x) = sigmoid(x / mu), computed without overflow for any z."""
    z = np.asarray(z, dtype=float)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def rcfl_local_objective(loss, eta: float, alpha, mu: float) -> np.ndarray:
    """f^{mu,i}(omega, eta) = (1 / alpha_i) phi_mu(f_i - eta) + eta (eq. 5)."""
    return softplus_mu(np.asarray(loss, dtype=float) - eta, mu) / np.asarray(alpha) + eta


def rcfl_gradient_weights(loss: float, eta: float, alpha: float, mu: float) -> tuple[float, float]:
    """(d f^{mu,i} / d f_i, d f^{mu,i} / d eta) at a loss value f_i (eq. 5):
    s / alpha_i and 1 - s / alpha_i with s = sigmoid((f_i - eta) / mu), so
    grad_omega f^{mu,i} = (s / alpha_i) grad_omega f_i (Alg. 1's local step)."""
    s = float(sigmoid((loss - eta) / mu)) / alpha
    return s, 1.0 - s


def hcvar(losses: Sequence[float], p: Sequence[float], alpha: Sequence[float] | float) -> float:
    """HCVaR_{1-alpha} of the client losses = f_alpha, the primal of eq. (1) solved
    exactly: the weight mass q_i p_i (at most p_i / alpha_i each, 1 in total) fills the
    clients in decreasing order of loss. Any alpha_i in (0, 1] is allowed (alpha_i < p_i
    acts as alpha_i = p_i); p is normalised."""
    f = np.asarray(losses, dtype=float)
    p = np.asarray(p, dtype=float) / np.sum(p)
    cap = p / np.broadcast_to(np.asarray(alpha, dtype=float), f.shape)
    order = np.argsort(-f, kind="stable")
    before = np.concatenate([[0.0], np.cumsum(cap[order])[:-1]])
    mass = np.clip(1.0 - before, 0.0, cap[order])
    return float(mass @ f[order])


def check_alpha(alpha: Sequence[float], p: Sequence[float], field: str = "alpha") -> None:
    """alpha_i must lie in [p_i, 1] (Def. 1); the error names the clients and bounds."""
    a, q = np.asarray(alpha, dtype=float), np.asarray(p, dtype=float)
    bad = np.flatnonzero((a < q - 1e-12) | (a > 1.0) | ~np.isfinite(a))
    if bad.size:
        pairs = ", ".join(f"client {i}: {a[i]:g} not in [{q[i]:.4g}, 1]" for i in bad[:5])
        raise ValueError(f"{field}: alpha_i must lie in [p_i, 1] with p_i = m_i / m ({pairs})")


# ------------------------------------------------------------ SCAFFOLD (line 12)
def scaffold_control_update(
    c_i: np.ndarray, c: np.ndarray, x: np.ndarray, y: np.ndarray, steps: int, lr: float
) -> np.ndarray:
    """Option II (Alg. 1 line 12): c_i^+ = c_i - c + (x - y_i) / (K eta_l)."""
    return c_i - c + (x - y) / (steps * lr)


def pooled_control_delta(
    pending: np.ndarray, pending_steps: int, delta: np.ndarray, steps: int
) -> np.ndarray:
    """Amplified SCAFFOLD's D_i after one more round in the period: the K-weighted mean
    (pending_steps D_i + K Delta c_i) / (pending_steps + K) of option II's per-round
    Delta c_i = mean gradient - c_i, so that c_i + D_i is the mean of all the gradients
    the client computed in the period (Crawshaw and Liu's ``Correction.reset``)."""
    return (pending_steps * pending + steps * delta) / (pending_steps + steps)
