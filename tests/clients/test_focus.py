"""FOCUS's client (clients/focus.py): two rounds against the authors' local update written
out with torch autograd, g_prev kept in ``Context.state``, the Message-API block, and the
settings it refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.common import RecordDict
from torch.nn import functional as F

from fedram_flwr.clients import FocusClient
from fedram_flwr.clients.batches import ArrayData
from fedram_flwr.clients.focus import fit_focus
from fedram_flwr.clients.models import build_model, get_weights
from fedram_flwr.clients.train_blocks import objective_of, train_focus
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.protocol import FOCUS_GRADIENT, PARTITION_ID


def problem(n: int = 12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 2)).astype(np.float32), (np.arange(n) % 3).astype(np.int64)


def grad(theta: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    w = torch.tensor(theta[0], requires_grad=True)
    b = torch.tensor(theta[1], requires_grad=True)
    loss = F.cross_entropy(torch.from_numpy(x) @ w.T + b, torch.from_numpy(y))
    return [g.numpy() for g in torch.autograd.grad(loss, (w, b))]


def authors_round(theta, g_prev, k: int, lr: float, x, y, wd: float = 0.0):
    """FedASLClient.local_update (full batch): K gradients, K - 1 steps on g - g_prev;
    with weight decay the gradient is the decayed loss's, grad f + wd theta."""
    push = [np.zeros_like(a) for a in theta]
    for step in range(k):
        if step > 0:
            theta = [t - lr * p for t, p in zip(theta, push)]
        g = [gi + wd * t for gi, t in zip(grad(theta, x, y), theta)]
        push = [gi - gp for gi, gp in zip(g, g_prev)]
    return push, [p + gp for p, gp in zip(push, g_prev)]


def client(state=None, **kw) -> FocusClient:
    x, y = problem()
    args = dict(lr=0.3, local_epochs=1, batch_size=len(y), seed=0, local_steps=3)
    return FocusClient(
        partition_id=2,
        model=build_model("logreg", (2,), 3, seed=0),
        x=x,
        y=y,
        state=state,
        **{**args, **kw},
    )


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_two_rounds_match_the_authors_local_update(wd: float) -> None:
    """Round 1 from g_prev = 0, round 2 from the g_prev round 1 kept: the push is
    g_{K-1} - g_prev, and g_{K-1} is kept (with weight decay, the decayed loss's)."""
    x, y = problem()
    theta = get_weights(build_model("logreg", (2,), 3, seed=1))
    state, g_prev = None, [np.zeros_like(a) for a in theta]
    for server_round in (1, 2):
        c = client(state, weight_decay=wd)
        state = c.state
        arrays, n, metrics = c.fit(theta, {"server-round": server_round})
        push, g_prev = authors_round(theta, g_prev, 3, 0.3, x, y, wd)
        assert n == 12 and metrics[PARTITION_ID] == 2 and len(arrays) == 2
        for got, want in zip(arrays, push):
            np.testing.assert_allclose(got, want, atol=1e-6)
        for kept, want in zip(state[FOCUS_GRADIENT].to_numpy_ndarrays(), g_prev):
            np.testing.assert_allclose(kept, want, atol=1e-6)
        theta = [t - 0.3 * p for t, p in zip(theta, push)]  # any next model


def test_one_step_pushes_the_gradient_change() -> None:
    x, y = problem()
    theta = get_weights(build_model("logreg", (2,), 3, seed=1))
    c = client(local_steps=1)
    first, _, _ = c.fit(theta, {"server-round": 1})
    again, _, _ = c.fit(theta, {"server-round": 2})  # same x: the gradient did not change
    for a, b, g in zip(first, again, grad(theta, x, y)):
        np.testing.assert_allclose(a, g, atol=1e-6)
        np.testing.assert_allclose(b, 0.0, atol=1e-6)


def test_the_project_app_finds_the_block() -> None:
    assert objective_of("focus") is train_focus and train_focus.client is FocusClient


def test_an_app_optimizer_is_refused() -> None:
    x, y = problem()
    model = build_model("logreg", (2,), 3, seed=0)
    data = ArrayData(x, y, batch_size=len(y), seed=0, partition_id=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = LocalTrainer(model, data, 2, 0.1, local_steps=1, optimizer=optimizer)
    with pytest.raises(ValueError, match="optimizer=SGD is refused"):
        fit_focus(trainer, get_weights(model), {"server-round": 1}, RecordDict())
