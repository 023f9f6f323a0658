"""SCAFFOLD's server (Karimireddy et al. 2020, Alg. 1, option II): its update by hand and
on tiny quadratics, where it reaches the optimum FedAvg drifts from, and the strategy's
broadcast of (x, c). The client's control update is in tests/test_objectives.py, the
client itself in tests/clients/test_scaffold.py."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import (
    Code,
    FitRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)

from fedram_flwr.protocol import PARTITION_ID
from fedram_flwr.strategies import Scaffold
from fedram_flwr.strategies.scaffold import scaffold_control_update, scaffold_server_update
from tests.helpers import QUAD_A, QUAD_B, quad_grad, scaffold_local_steps


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
    x_star = (QUAD_A[:, None] * QUAD_B).sum(0) / QUAD_A.sum()
    k, lr, n = 10, 0.05, len(QUAD_A)
    rng = np.random.default_rng(0)
    x, c = np.zeros(2), np.zeros(2)
    c_i = np.zeros((n, 2))
    x_avg = np.zeros(2)
    for _ in range(400):
        active = range(n) if participation == "full" else np.flatnonzero(rng.random(n) < 0.5)
        ys, dcs = [], []
        for i in active:
            y, _ = scaffold_local_steps(i, x, c_i[i], c, k, lr)
            new = scaffold_control_update(c_i[i], c, x, y, k, lr)
            ys.append(y)
            dcs.append(new - c_i[i])
            c_i[i] = new
        x, c = scaffold_server_update(x, c, ys, dcs, n)
        x_avg = np.mean([scaffold_local_steps(i, x_avg, 0, 0, k, lr)[0] for i in range(n)], axis=0)
    np.testing.assert_allclose(x, x_star, atol=1e-6)
    np.testing.assert_allclose(c, np.mean([quad_grad(i, x_star) for i in range(n)], 0), atol=1e-6)
    assert np.abs(x_avg - x_star).max() > 1e-2


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
