"""FOCUS's server (Ying, Li, Yang 2025; the authors' FedASLServer): its first two rounds
by hand on a scalar quadratic, the reduction to gradient descent, its exact convergence
under a participation pattern that biases FedAvg, and the strategy's wire. The client is
in tests/clients/test_focus.py."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from fedram_flwr.protocol import PARTITION_ID, ClientReply
from fedram_flwr.strategies import Focus
from fedram_flwr.strategies.focus import FocusCore, focus_server_update

# f_i(x) = a_i (x - b_i)^2 / 2 on a scalar: F = (f_1 + f_2) / 2 is least at x* = 2.
A, B = np.array([1.0, 2.0]), np.array([0.0, 3.0])


def local_focus(i: int, x: float, g_prev: float, k: int, lr: float) -> tuple[float, float]:
    """The authors' FedASLClient.local_update written out: K gradients, K - 1 steps on
    g - g_prev; the push g_{K-1} - g_prev and the new g_prev."""
    y = 0.0
    for step in range(k):
        if step > 0:
            x = x - lr * y
        g = A[i] * (x - B[i])
        y = g - g_prev
    return y, y + g_prev


def reply(pid: int, push: float) -> ClientReply:
    return ClientReply(pid, 1, {}, lambda: [np.array([push], np.float32)])


def run(core: FocusCore, pattern: list[list[int]], k: int) -> tuple[np.ndarray, list[float]]:
    state, g_prev, xs = core.init([np.array([1.0], np.float32)]), np.zeros(2), []
    for t, active in enumerate(pattern, start=1):
        replies = []
        for i in active:
            push, g_prev[i] = local_focus(i, float(state.x[0]), g_prev[i], k, core.lr)
            replies.append(reply(i, push))
        state = core.aggregate(state, t, replies, 1).state
        xs.append(float(state.x[0]))
    return state.y, xs


def test_server_update_by_hand() -> None:
    x, y = np.array([1.0]), np.array([0.5])
    new_x, new_y = focus_server_update(x, y, [np.array([1.0]), np.array([-3.0])], lr=0.25)
    assert new_y.tolist() == [0.5 + 1.0 - 3.0] and new_x.tolist() == [1.0 - 0.25 * -1.5]
    assert focus_server_update(x, y, [], lr=0.25) == (x, y)


def test_first_two_rounds_by_hand() -> None:
    """x_0 = 1, eta = 1/4, K = 2. Round 1, both clients: client 1 g = 1, x = 3/4, g = 3/4,
    push 3/4; client 2 g = -4, x = 2, g = -2, push -2; y = -5/4, x_1 = 1 + 5/16 = 1.3125.
    Round 2, client 1 only (g_prev = 3/4): g = 1.3125, x = 1.3125 - (1.3125 - 0.75)/4 =
    1.171875, push 1.171875 - 0.75 = 0.421875; y = -0.828125, x_2 = 1.51953125."""
    core = FocusCore(num_clients=2, lr=0.25).for_model([np.zeros(1, np.float32)])
    y, xs = run(core, [[0, 1], [0]], k=2)
    assert xs == [1.3125, 1.51953125] and y.tolist() == [-0.828125]


def test_an_empty_round_moves_nothing() -> None:
    core = FocusCore(num_clients=2, lr=0.25).for_model([np.zeros(1, np.float32)])
    state = core.init([np.array([1.0], np.float32)])
    outcome = core.aggregate(state, 1, [], 1)
    assert outcome.state is state and not outcome.aggregated


def test_one_step_full_participation_is_gradient_descent_on_the_sum() -> None:
    """K = 1, every client every round: x_{t+1} = x_t - eta sum_i grad f_i(x_t)."""
    core = FocusCore(num_clients=2, lr=0.1).for_model([np.zeros(1, np.float32)])
    _, xs = run(core, [[0, 1]] * 5, k=1)
    x, expected = 1.0, []
    for _ in range(5):
        x -= 0.1 * float((A * (x - B)).sum())
        expected.append(x)
    np.testing.assert_allclose(xs, expected, rtol=1e-6)


def test_exact_convergence_where_fedavg_is_biased() -> None:
    """Client 1 trains every round, client 2 one round in three: FOCUS reaches x* = 2,
    the minimiser of (f_1 + f_2) / 2; FedAvg (one local step, same pattern) does not."""
    pattern = [[0, 1] if t % 3 == 0 else [0] for t in range(300)]
    core = FocusCore(num_clients=2, lr=0.1).for_model([np.zeros(1, np.float32)])
    y, xs = run(core, pattern, k=3)
    assert xs[-1] == pytest.approx(2.0, abs=1e-5) and y[0] == pytest.approx(0.0, abs=1e-5)
    x = 1.0
    for active in pattern:
        x = float(np.mean([x - 0.1 * A[i] * (x - B[i]) for i in active]))
    assert abs(x - 2.0) > 0.1


# ------------------------------------------------------------------ the strategy
def test_strategy_sums_the_pushes() -> None:
    theta = [np.ones((2, 2), np.float32), np.zeros(2, np.float32)]
    s = Focus(initial_arrays=theta, num_clients=4, lr=0.5)
    assert [a.tolist() for a in parameters_to_ndarrays(s.initialize_parameters(None))] == [
        a.tolist() for a in theta
    ]

    def res(pid: int, push: float) -> tuple[None, FitRes]:
        arrays = [np.full((2, 2), push, np.float32), np.full(2, push, np.float32)]
        params = ndarrays_to_parameters(arrays)
        return None, FitRes(Status(Code.OK, ""), params, 5, {PARTITION_ID: pid})

    params, metrics = s.aggregate_fit(1, [res(3, 1.0), res(0, 3.0)], [])
    out = parameters_to_ndarrays(params)
    np.testing.assert_array_equal(out[0], np.full((2, 2), 1.0 - 0.5 * 4.0))
    np.testing.assert_array_equal(out[1], np.full(2, -0.5 * 4.0))
    assert metrics["tracking-norm"] == pytest.approx(4.0 * np.sqrt(6))
    params, _ = s.aggregate_fit(2, [res(1, -1.0)], [])  # y = 4 - 1 = 3
    np.testing.assert_array_equal(parameters_to_ndarrays(params)[1], np.full(2, -2.0 - 1.5))
