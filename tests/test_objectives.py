"""The math clients need (fedram_flwr/objectives.py), against closed forms: Fed-CVaR-Avg's
G_i and its gradient weights (eq. 6), whose t-minimiser is the VaR; RC-FL's HCVaR, smoothed
local objective and alpha check; SCAFFOLD's option-II control update (Alg. 1 line 12)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fedram_flwr.objectives import (
    check_alpha,
    cvar_gradient_weights,
    cvar_local_objective,
    hcvar,
    rcfl_gradient_weights,
    rcfl_local_objective,
    scaffold_control_update,
)
from tests.helpers import random_rcfl_instance, scaffold_local_steps

ALPHA_GAMMA = [(0.1, 0.1), (0.3, 0.3), (0.05, 0.0), (0.5, 0.9), (1.0, 0.2), (0.2, 1.0)]


# ------------------------------------------------------ Fed-CVaR-Avg, closed forms
@pytest.mark.parametrize(("alpha", "gamma"), ALPHA_GAMMA)
def test_gradient_weights_closed_form(alpha: float, gamma: float) -> None:
    # Above the kink (f > t): G = (1-g)(t + (f-t)/a) + g f.
    d_f, d_t = cvar_gradient_weights(2.0, 1.0, alpha, gamma)
    assert d_f == pytest.approx((1 - gamma) / alpha + gamma, rel=1e-12)
    assert d_t == pytest.approx((1 - gamma) * (1 - 1 / alpha), rel=1e-12, abs=1e-15)
    # Below the kink (f < t): G = (1-g) t + g f.
    d_f, d_t = cvar_gradient_weights(0.5, 1.0, alpha, gamma)
    assert d_f == pytest.approx(gamma, abs=1e-15)
    assert d_t == pytest.approx(1 - gamma, abs=1e-15)


def test_local_objective_by_hand() -> None:
    # alpha=0.5, gamma=0.2, t=1: f=2 -> 0.8 * (1 + 1/0.5) + 0.2 * 2 = 2.8;
    # f=0.5 -> 0.8 * 1 + 0.2 * 0.5 = 0.9.
    got = cvar_local_objective(np.array([2.0, 0.5]), 1.0, 0.5, 0.2)
    np.testing.assert_allclose(got, [2.8, 0.9], rtol=1e-12)
    # alpha = 1 and t <= f: G = f, whatever gamma.
    np.testing.assert_allclose(cvar_local_objective([0.3, 4.0], 0.0, 1.0, 0.7), [0.3, 4.0])


@pytest.mark.parametrize(("alpha", "gamma"), ALPHA_GAMMA)
@pytest.mark.parametrize("side", [-0.4, 0.4])
def test_gradient_matches_autograd(alpha: float, gamma: float, side: float) -> None:
    """d G / d(theta, t) by autograd equals (dG/df * grad f, dG/dt), on both sides
    of the kink f = t."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(12, 4, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (12,), generator=gen)
    w = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, generator=gen, dtype=torch.float64, requires_grad=True)

    def f() -> torch.Tensor:
        return F.cross_entropy(x @ w.T + b, y)

    f_value = f().item()
    t = torch.tensor(f_value - side, dtype=torch.float64, requires_grad=True)  # f - t = side
    fb = f()
    G = (1 - gamma) * (t + torch.relu(fb - t) / alpha) + gamma * fb
    g_w, g_b, g_t = torch.autograd.grad(G, (w, b, t))
    f_w, f_b = torch.autograd.grad(f(), (w, b))

    d_f, d_t = cvar_gradient_weights(f_value, t.item(), alpha, gamma)
    assert G.item() == pytest.approx(
        float(cvar_local_objective(f_value, t.item(), alpha, gamma)), rel=1e-12
    )
    torch.testing.assert_close(g_w, d_f * f_w, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(g_b, d_f * f_b, rtol=1e-12, atol=1e-14)
    assert g_t.item() == pytest.approx(d_t, rel=1e-12, abs=1e-14)
    # Which side of the kink we are on matters unless the objective is risk-neutral.
    above = side > 0
    assert d_t == pytest.approx((1 - gamma) * (1 - above / alpha), abs=1e-14)


def test_alpha_one_or_gamma_one_is_plain_sgd() -> None:
    # The theta weight is exactly 1.0 (bitwise), so the step equals SGD's.
    for loss, t in [(0.7, 0.0), (12.0, -3.0), (1e-9, 0.0)]:
        for alpha, gamma in [(1.0, 0.0), (1.0, 0.1), (1.0, 0.99), (0.1, 1.0), (0.3, 1.0)]:
            d_f, d_t = cvar_gradient_weights(loss, t, alpha, gamma)
            assert d_f == 1.0 and d_t == 0.0


# ------------------------------------------------ t converges to VaR, CVaR value
@pytest.mark.parametrize(("alpha", "gamma"), [(0.1, 0.0), (0.3, 0.5), (0.05, 0.1)])
def test_sgd_on_t_reaches_value_at_risk_of_exponential(alpha: float, gamma: float) -> None:
    """argmin_t t + E[(Z - t)_+]/alpha is the (1 - alpha)-quantile of Z: for Z ~ Exp(1)
    it is -ln(alpha), and the minimum is CVaR = 1 - ln(alpha)."""
    rng = np.random.default_rng(2024)
    z = rng.exponential(size=150_000)
    t, n0 = 0.0, 50
    tail = []
    for n, zn in enumerate(z):
        _, d_t = cvar_gradient_weights(float(zn), t, alpha, gamma)
        # Robbins-Monro steps a / n; the mean gradient's slope at the root is (1 - gamma).
        t -= 2.0 / (1.0 - gamma) / (n + n0) * d_t
        if n >= z.size // 2:
            tail.append(t)
    t_hat = float(np.mean(tail))  # Polyak averaging
    var = -math.log(alpha)
    # Asymptotic std ~ sqrt((1-a)/a / n) <= 0.015 here; tolerance 0.05.
    assert t_hat == pytest.approx(var, abs=0.05)

    # Monte-Carlo value of the objective (fresh samples) at t_hat vs closed forms:
    # (1 - gamma) CVaR + gamma E[Z] with CVaR = 1 - ln(alpha), E[Z] = 1.
    fresh = np.random.default_rng(7).exponential(size=1_000_000)
    value = float(np.mean(cvar_local_objective(fresh, t_hat, alpha, gamma)))
    expected = (1 - gamma) * (1 - math.log(alpha)) + gamma * 1.0
    # MC std <= sqrt((2-a)/a / 1e6) ~ 0.006; the objective is flat at its minimum.
    assert value == pytest.approx(expected, abs=0.03)
    # And t_hat is a minimiser: moving t away by 0.5 costs more than the MC noise.
    for shifted in (t_hat - 0.5, t_hat + 0.5):
        assert float(np.mean(cvar_local_objective(fresh, shifted, alpha, gamma))) > value + 0.02


# ------------------------------------------------------------------------- RC-FL
def test_alpha_one_is_fedavg_and_alpha_p_is_the_max_loss() -> None:
    rng = np.random.default_rng(3)
    losses, p, _ = random_rcfl_instance(rng, 8)
    assert hcvar(losses, p, np.ones(8)) == pytest.approx(float(p @ losses))
    assert hcvar(losses, p, p) == pytest.approx(losses.max())
    # Equal alpha = chi: CVaR_{1-chi} (Remark 1), e.g. the mean of the worst half.
    assert hcvar([1.0, 2.0, 3.0, 4.0], [0.25] * 4, 0.5) == pytest.approx(3.5)


def test_local_objective_and_its_gradients() -> None:
    loss, eta, alpha, mu, h = 0.7, 0.4, 0.3, 0.05, 1e-6
    d_f, d_eta = rcfl_gradient_weights(loss, eta, alpha, mu)

    def f(x, e):
        return float(rcfl_local_objective(x, e, alpha, mu))

    assert d_f == pytest.approx((f(loss + h, eta) - f(loss - h, eta)) / (2 * h), rel=1e-6)
    assert d_eta == pytest.approx((f(loss, eta + h) - f(loss, eta - h)) / (2 * h), rel=1e-6)


def test_alpha_outside_p_1_is_refused_with_the_client_named() -> None:
    check_alpha([0.5, 1.0], [0.5, 0.5])
    with pytest.raises(ValueError, match=r"client 1: 0.3 not in \[0.5, 1\]"):
        check_alpha([0.5, 0.3], [0.5, 0.5])


# ---------------------------------------------------------------------- SCAFFOLD
def test_option_two_by_hand_for_two_steps() -> None:
    x, c_i, c, lr = np.array([1.0, 1.0]), np.array([0.5, -0.5]), np.array([0.25, 0.0]), 0.1
    # Client 1 (a = 4, b = (-1, 3)): g(x) = (8, -8); y1 = x - 0.1 (g - c_i + c) =
    # (1 - 0.1 * 7.75, 1 - 0.1 * -7.5) = (0.225, 1.75); g(y1) = (4.9, -5.0);
    # y2 = y1 - 0.1 * (4.65, -4.5) = (-0.24, 2.2).
    y, grads = scaffold_local_steps(1, x, c_i, c, 2, lr)
    np.testing.assert_allclose(grads, [[8.0, -8.0], [4.9, -5.0]])
    np.testing.assert_allclose(y, [-0.24, 2.2])
    # Option II: c_i^+ = c_i - c + (x - y) / (K lr) = (0.5 - 0.25 + 1.24 / 0.2,
    # -0.5 - 0 - 1.2 / 0.2) = (6.45, -6.5).
    c_new = scaffold_control_update(c_i, c, x, y, 2, lr)
    np.testing.assert_allclose(c_new, [6.45, -6.5])
    # ... which is the mean of the local gradients met on the way.
    np.testing.assert_allclose(c_new, np.mean(grads, axis=0))
