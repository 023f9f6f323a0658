"""SCAFFOLD (Karimireddy et al. 2020, Alg. 1, option II): the control-variate updates
on tiny quadratics against the paper's formulas, the client's step and its state in
``Context.state``, and the server's step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from torch.nn import functional as F

from fedram_flwr.clients import ScaffoldClient
from fedram_flwr.config import Scenario
from fedram_flwr.engines import InProcessClientProxy, node_context
from fedram_flwr.experiment import Experiment
from fedram_flwr.models import build_model, get_weights
from fedram_flwr.protocol import PARTITION_ID, SCAFFOLD_CONTROL
from fedram_flwr.registry import with_overrides
from fedram_flwr.strategies import Scaffold
from fedram_flwr.strategies.scaffold import scaffold_control_update, scaffold_server_update

# f_i(y) = a_i / 2 (y - b_i)^2 per coordinate: grad a_i (y - b_i); optimum of the mean
# sum a_i b_i / sum a_i.
A = np.array([1.0, 4.0, 0.5])
B = np.array([[2.0, -1.0], [-1.0, 3.0], [5.0, 0.0]])


def grad(i: int, y: np.ndarray) -> np.ndarray:
    return A[i] * (y - B[i])


def local_steps(i: int, x: np.ndarray, c_i, c, k: int, lr: float) -> tuple[np.ndarray, list]:
    """Alg. 1 line 10, K times; returns y_i and the gradients met on the way."""
    y, grads = x.copy(), []
    for _ in range(k):
        grads.append(grad(i, y))
        y = y - lr * (grads[-1] - c_i + c)
    return y, grads


def test_option_two_by_hand_for_two_steps() -> None:
    x, c_i, c, lr = np.array([1.0, 1.0]), np.array([0.5, -0.5]), np.array([0.25, 0.0]), 0.1
    # Client 1 (a = 4, b = (-1, 3)): g(x) = (8, -8); y1 = x - 0.1 (g - c_i + c) =
    # (1 - 0.1 * 7.75, 1 - 0.1 * -7.5) = (0.225, 1.75); g(y1) = (4.9, -5.0);
    # y2 = y1 - 0.1 * (4.65, -4.5) = (-0.24, 2.2).
    y, grads = local_steps(1, x, c_i, c, 2, lr)
    np.testing.assert_allclose(grads, [[8.0, -8.0], [4.9, -5.0]])
    np.testing.assert_allclose(y, [-0.24, 2.2])
    # Option II: c_i^+ = c_i - c + (x - y) / (K lr) = (0.5 - 0.25 + 1.24 / 0.2,
    # -0.5 - 0 - 1.2 / 0.2) = (6.45, -6.5).
    c_new = scaffold_control_update(c_i, c, x, y, 2, lr)
    np.testing.assert_allclose(c_new, [6.45, -6.5])
    # ... which is the mean of the local gradients met on the way.
    np.testing.assert_allclose(c_new, np.mean(grads, axis=0))


def test_server_update_by_hand() -> None:
    x, c = np.array([0.0]), np.array([1.0])
    ys, dcs = [np.array([1.0]), np.array([3.0])], [np.array([2.0]), np.array([4.0])]
    new_x, new_c = scaffold_server_update(x, c, ys, dcs, num_clients=4, server_lr=0.5)
    assert new_x.tolist() == [0.5 * 2.0] and new_c.tolist() == [1.0 + 6.0 / 4]
    assert scaffold_server_update(x, c, [], [], num_clients=4) == (x, c)


@pytest.mark.parametrize("participation", ["full", "partial"])
def test_scaffold_reaches_the_optimum_where_fedavg_drifts(participation: str) -> None:
    """With K = 10 local steps FedAvg's fixed point is biased by client drift; at
    SCAFFOLD's, c_i = grad f_i(x*) cancels it (Sec. 5)."""
    x_star = (A[:, None] * B).sum(0) / A.sum()
    k, lr, n = 10, 0.05, len(A)
    rng = np.random.default_rng(0)
    x, c = np.zeros(2), np.zeros(2)
    c_i = np.zeros((n, 2))
    x_avg = np.zeros(2)
    for _ in range(400):
        active = range(n) if participation == "full" else np.flatnonzero(rng.random(n) < 0.5)
        ys, dcs = [], []
        for i in active:
            y, _ = local_steps(i, x, c_i[i], c, k, lr)
            new = scaffold_control_update(c_i[i], c, x, y, k, lr)
            ys.append(y)
            dcs.append(new - c_i[i])
            c_i[i] = new
        x, c = scaffold_server_update(x, c, ys, dcs, n)
        x_avg = np.mean([local_steps(i, x_avg, 0, 0, k, lr)[0] for i in range(n)], axis=0)
    np.testing.assert_allclose(x, x_star, atol=1e-6)
    np.testing.assert_allclose(c, np.mean([grad(i, x_star) for i in range(n)], 0), atol=1e-6)
    assert np.abs(x_avg - x_star).max() > 1e-2


# -------------------------------------------------------------------- the client
def problem(n: int = 12):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 2)).astype(np.float32), (np.arange(n) % 3).astype(np.int64)


def full_batch_grad(theta: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    w = torch.tensor(theta[0], requires_grad=True)
    b = torch.tensor(theta[1], requires_grad=True)
    loss = F.cross_entropy(torch.from_numpy(x) @ w.T + b, torch.from_numpy(y))
    return [g.numpy() for g in torch.autograd.grad(loss, (w, b))]


def test_client_one_step_and_control_kept_in_state() -> None:
    """K = 1 full-batch step: y = x - lr (g(x) - c_i + c) and, by option II,
    c_i^+ = g(x). The control variate survives in the state between client objects."""
    x_data, y_data = problem()
    lr = 0.3
    theta = get_weights(build_model("logreg", (2,), 3, seed=1))
    c = [np.full_like(a, 0.05) for a in theta]
    state = None
    c_i = [np.zeros_like(a) for a in theta]
    for server_round in (1, 2):
        client = ScaffoldClient(
            partition_id=2,
            model=build_model("logreg", (2,), 3, seed=0),
            x=x_data,
            y=y_data,
            lr=lr,
            local_epochs=1,
            batch_size=len(y_data),
            seed=0,
            local_steps=1,
            state=state,
        )
        state = client.state
        arrays, n, metrics = client.fit([*theta, *c], {"server-round": server_round})
        g = full_batch_grad(theta, x_data, y_data)
        assert n == 12 and metrics[PARTITION_ID] == 2 and len(arrays) == 4
        for got, t, gi, ci, cc in zip(arrays[:2], theta, g, c_i, c):
            np.testing.assert_allclose(got, t - lr * (gi - ci + cc), atol=1e-6)
        for dc, gi, ci in zip(arrays[2:], g, c_i):
            np.testing.assert_allclose(dc, gi - ci, atol=1e-6)
        for kept, gi in zip(state[SCAFFOLD_CONTROL].to_numpy_ndarrays(), g):
            np.testing.assert_allclose(kept, gi, atol=1e-6)
        c_i = g  # the next round starts from c_i = g(x)


def test_in_process_engine_keeps_the_control_in_context_state(tiny_gaussian: Scenario) -> None:
    scenario = with_overrides(
        tiny_gaussian,
        {
            "algorithm": {"name": "scaffold", "params": {}},
            "availability": {"oracle": "bernoulli", "params": {"p": [1.0, 1.0, 1.0]}},
        },
    )
    exp = Experiment(scenario, 0)
    context = node_context(1, 3, {})
    proxy = InProcessClientProxy("1", lambda ctx: exp.client(1, ctx.state).to_client(), context)
    strategy = exp.strategy()
    params = strategy.initialize_parameters(None)
    ins = FitIns(params, {"server-round": 1, "lr": 0.05})
    first = parameters_to_ndarrays(proxy.fit(ins, None, None).parameters)
    kept = context.state[SCAFFOLD_CONTROL].to_numpy_ndarrays()
    for dc, c_i in zip(first[2:], kept):  # from c_i = 0: Delta c_i = c_i^+
        np.testing.assert_array_equal(dc, c_i)
    second = parameters_to_ndarrays(proxy.fit(ins, None, None).parameters)
    # Same (x, c, batches), but c_i is now the kept one: a different local path.
    assert not np.allclose(second[0], first[0])


# ------------------------------------------------------------------ the strategy
def test_strategy_broadcasts_x_and_c_and_steps() -> None:
    theta = [np.zeros((2, 2), np.float32), np.zeros(2, np.float32)]
    s = Scaffold(initial_arrays=theta, num_clients=4, lr=0.1, server_lr=1.0)
    init = parameters_to_ndarrays(s.initialize_parameters(None))
    assert len(init) == 4 and all(not a.any() for a in init)

    def res(pid: int, y: float, dc: float) -> tuple[None, FitRes]:
        arrays = [np.full((2, 2), y), np.full(2, y), np.full((2, 2), dc), np.full(2, dc)]
        params = ndarrays_to_parameters([a.astype(np.float32) for a in arrays])
        return None, FitRes(Status(Code.OK, ""), params, 5, {PARTITION_ID: pid})

    params, metrics = s.aggregate_fit(1, [res(3, 1.0, 2.0), res(0, 3.0, 6.0)], [])
    out = parameters_to_ndarrays(params)
    np.testing.assert_allclose(out[0], 2.0)  # x + mean(y - x)
    np.testing.assert_allclose(out[3], 2.0)  # c + (2 + 6) / 4
    assert metrics["control-norm"] == pytest.approx(np.sqrt(6 * 4.0))
    seen = []
    s.evaluate_fn = lambda r, arrays, cfg: seen.append(len(arrays)) or (0.0, {})
    s.evaluate(1, params)
    assert seen == [2]  # the evaluation sees x only
