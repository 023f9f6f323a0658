"""The Fed-CVaR-Avg client (clients/cvar.py): its joint (theta, t) step, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fedram_flwr.clients import CVaRClient
from fedram_flwr.clients.models import build_model, get_weights
from fedram_flwr.protocol import PARTITION_ID, join_theta_t, split_theta_t


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
