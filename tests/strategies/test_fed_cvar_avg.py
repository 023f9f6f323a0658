"""Fed-CVaR-Avg (Alg. 1): the gradient of G_i (eq. 6), the t-minimiser (VaR) and the
CVaR it attains, the client's joint (theta, t) step, and the reduction to FedAvg."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fedram_flwr.availability import ram_relay
from fedram_flwr.clients import CVaRClient
from fedram_flwr.config import Scenario
from fedram_flwr.engines import run_in_process
from fedram_flwr.models import build_model, get_weights
from fedram_flwr.protocol import PARTITION_ID, join_theta_t, split_theta_t
from fedram_flwr.registry import with_overrides
from fedram_flwr.strategies import FedCVaRAvg, cvar_gradient_weights, cvar_local_objective

ALPHA_GAMMA = [(0.1, 0.1), (0.3, 0.3), (0.05, 0.0), (0.5, 0.9), (1.0, 0.2), (0.2, 1.0)]


# ------------------------------------------------------------ closed forms
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


# ----------------------------------------------------------------- the client
def tiny_problem(n: int = 10):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 2)).astype(np.float32)
    y = (np.arange(n) % 3).astype(np.int64)
    return x, y


def make_client(**overrides) -> CVaRClient:
    x, y = tiny_problem()
    kwargs = dict(
        partition_id=4,
        model=build_model("logreg", (2,), 3, seed=0),
        x=x,
        y=y,
        lr=0.1,
        local_epochs=1,
        batch_size=len(y),
        seed=0,
    )
    kwargs.update(overrides)
    return CVaRClient(**kwargs)


def test_cvar_client_fit_returns_theta_t_and_metrics() -> None:
    client = make_client(local_epochs=3, batch_size=4)
    theta = get_weights(build_model("logreg", (2,), 3, seed=1))
    config = {"cvar-alpha": 0.2, "cvar-gamma": 0.1, "lr-t": 0.01, "server-round": 2}
    arrays, num_examples, metrics = client.fit(join_theta_t(theta, 0.0), config)
    assert len(arrays) == len(theta) + 1
    assert [a.shape for a in arrays[:-1]] == [a.shape for a in theta]
    assert arrays[-1].shape == (1,)
    assert num_examples == 10
    assert set(metrics) == {"t", "train-loss", "train-seconds", PARTITION_ID}
    assert metrics["train-seconds"] > 0
    assert metrics[PARTITION_ID] == 4
    assert metrics["t"] == split_theta_t(arrays)[1]
    # Labels arange(n) % 3 on random inputs are not separable: every batch loss stays far
    # above t, so each of the 3 epochs x ceil(10/4) = 9 batches raises t by
    # -lr_t dG/dt = 0.01 * 0.9 * (1/0.2 - 1) = 0.036.
    assert metrics["train-loss"] > 0.5
    assert metrics["t"] == pytest.approx(9 * 0.036, rel=1e-12)
    assert not all(np.array_equal(a, b) for a, b in zip(arrays, theta))


@pytest.mark.parametrize(("t0", "above"), [(-1.0, True), (100.0, False)])
def test_cvar_client_single_step_by_hand(t0: float, above: bool) -> None:
    """One full batch, one epoch: theta <- theta - lr dG/df grad f, t <- t - lr_t dG/dt."""
    alpha, gamma, lr, lr_t = 0.5, 0.2, 0.1, 0.1
    x, y = tiny_problem()
    model = build_model("logreg", (2,), 3, seed=3)
    theta = get_weights(model)

    w = torch.tensor(theta[0], requires_grad=True)
    b = torch.tensor(theta[1], requires_grad=True)
    f = F.cross_entropy(torch.from_numpy(x) @ w.T + b, torch.from_numpy(y))
    g_w, g_b = torch.autograd.grad(f, (w, b))
    weight = (1 - gamma) / alpha + gamma if above else gamma  # dG/df: 1.8 or 0.2
    d_t = (1 - gamma) * (1 - 1 / alpha) if above else 1 - gamma  # -0.8 or 0.8

    client = make_client(model=build_model("logreg", (2,), 3, seed=0), lr=lr)
    config = {"cvar-alpha": alpha, "cvar-gamma": gamma, "lr-t": lr_t, "server-round": 1}
    arrays, _, metrics = client.fit(join_theta_t(theta, t0), config)
    new_theta, new_t = split_theta_t(arrays)

    assert new_t == pytest.approx(t0 - lr_t * d_t, abs=1e-12)
    assert metrics["train-loss"] == pytest.approx(f.item(), rel=1e-6)
    np.testing.assert_allclose(new_theta[0], theta[0] - lr * weight * g_w.numpy(), atol=1e-6)
    np.testing.assert_allclose(new_theta[1], theta[1] - lr * weight * g_b.numpy(), atol=1e-6)


def test_strategy_sends_cvar_config_and_starts_from_t_init() -> None:
    from flwr.common import parameters_to_ndarrays

    theta = [np.ones((3, 2), np.float32), np.zeros(3, np.float32)]
    strategy = FedCVaRAvg(initial_arrays=theta, alpha=0.3, gamma=0.4, lr_t=1e-3, t_init=0.25)
    init = parameters_to_ndarrays(strategy.initialize_parameters(None))
    assert len(init) == 3 and split_theta_t(init)[1] == 0.25
    config = strategy.core.fit_config(strategy.state, 1)
    assert config == {"cvar-alpha": 0.3, "cvar-gamma": 0.4, "lr-t": 1e-3}
    assert strategy.diagnostics() == {"t": 0.25}
    for bad in ({"alpha": 0.0}, {"alpha": 1.2}, {"gamma": -0.1}, {"lr_t": -1.0}):
        kwargs = {"alpha": 0.3, "gamma": 0.4, "lr_t": 1e-3, **bad}
        with pytest.raises(ValueError, match=f"algorithm.params.{next(iter(bad))}"):
            FedCVaRAvg(initial_arrays=theta, **kwargs)


# --------------------------------------------------- reduction to FedAvg (engine)
def final_arrays(run_dir) -> list[np.ndarray]:
    with np.load(Path(run_dir.path) / "final_model.npz") as z:
        return [z[k] for k in sorted(z.files, key=lambda s: int(s.split("_")[1]))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_gaussian: Scenario):
    """Run the tiny Fig. 2a scenario once per variant, cached for the module."""
    base = tiny_gaussian
    cache: dict[str, tuple[Scenario, object]] = {}

    def run(label: str, overrides: dict) -> tuple[Scenario, list[np.ndarray], list[dict]]:
        if label not in cache:
            scenario = with_overrides(base, overrides)
            out = run_in_process(scenario, 0, tmp_path_factory.mktemp(label), label=label)
            assert out.status() == "complete"
            cache[label] = (scenario, out)
        scenario, out = cache[label]
        return scenario, final_arrays(out), out.read_metrics()

    return run


FEDAVG = {"algorithm.name": "fedavg", "algorithm.params": {}}


@pytest.mark.parametrize(
    ("label", "overrides"),
    [
        ("alpha1", {"algorithm.alpha": 1.0, "algorithm.gamma": 0.1}),
        ("gamma1", {"algorithm.alpha": 0.1, "algorithm.gamma": 1.0}),
    ],
)
def test_risk_neutral_cvar_is_bitwise_fedavg(runs, label: str, overrides: dict) -> None:
    _, fedavg_theta, fedavg_rows = runs("fedavg", FEDAVG)
    _, cvar_arrays, cvar_rows = runs(label, overrides)
    theta, t = split_theta_t(cvar_arrays)
    assert len(theta) == len(fedavg_theta) == 2
    for a, b in zip(theta, fedavg_theta):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert t == 0.0
    assert [r.get("fit-t", 0.0) for r in cvar_rows] == [0.0] * len(cvar_rows)
    assert [r.get("relayed") for r in cvar_rows] == [r.get("relayed") for r in fedavg_rows]
    # The global model did move away from its initialisation.
    assert fedavg_rows[-1]["loss"] != fedavg_rows[0]["loss"]


def test_risk_averse_cvar_differs_from_fedavg(runs) -> None:
    _, fedavg_theta, _ = runs("fedavg", FEDAVG)
    _, cvar_arrays, rows = runs("alpha01", {"algorithm.alpha": 0.1, "algorithm.gamma": 0.1})
    theta, t = split_theta_t(cvar_arrays)
    assert not all(np.array_equal(a, b) for a, b in zip(theta, fedavg_theta))
    # Losses start above t = 0, so t rises: by lr_t (1-gamma)(1/alpha - 1) = 0.081 a step.
    assert t > 0.0
    assert rows[-1]["t"] == t


def test_engine_relays_follow_the_ram(runs) -> None:
    scenario, _, rows = runs("fedavg", FEDAVG)
    rho = np.array([0.5, 0.4, 0.1])
    fit_rows = [r for r in rows if r["round"] > 0]
    assert [r["round"] for r in fit_rows] == list(range(1, scenario.rounds + 1))
    for r in fit_rows:
        assert r["relayed"] == ram_relay(rho, 1, 0, r["round"])
