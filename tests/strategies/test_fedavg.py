"""FedAvg's core (strategies/fedavg.py) without Flower: the example-weighted mean by
hand, Fed-CVaR-Avg's (theta, t) through it, Flower's arithmetic kept, and the server
learning rate eta_g by hand."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.server.strategy.aggregate import aggregate, aggregate_inplace

from fedram_flwr.protocol import ClientReply
from fedram_flwr.strategies.fed_cvar_avg import FedCVaRAvgCore
from fedram_flwr.strategies.fedavg import (
    FedAvgCore,
    server_step,
    weighted_average,
    weighted_mean_inplace,
)


def replies(values: list[float], sizes: list[int], t: list[float] | None = None):
    out = []
    for k, (v, m) in enumerate(zip(values, sizes)):
        arrays = [np.full((2,), v, np.float32)]
        if t is not None:
            arrays.append(np.array([t[k]]))
        out.append(ClientReply(k, m, {}, lambda a=arrays: [x.copy() for x in a]))
    return out


def test_fedavg_core_is_the_example_weighted_mean_by_hand() -> None:
    core = FedAvgCore()
    state = core.init([np.zeros(2, np.float32)])
    out = core.aggregate(state, 1, replies([1.0, 4.0], [1, 3]), 1)
    assert out.aggregated and out.diagnostics == {}
    np.testing.assert_allclose(out.state.arrays[0], [(1 * 1 + 3 * 4) / 4] * 2)
    idle = core.aggregate(out.state, 2, [], 1)
    assert not idle.aggregated and idle.state is out.state


def test_fed_cvar_avg_core_averages_theta_and_t_and_reports_t() -> None:
    core = FedCVaRAvgCore(alpha=0.5, gamma=0.1, lr_t=0.01, t_init=0.5)
    state = core.init([np.zeros(2, np.float32)])
    assert core.diagnostics(state) == {"t": 0.5}
    out = core.aggregate(state, 1, replies([2.0, 6.0], [3, 1], t=[1.0, 3.0]), 1)
    np.testing.assert_allclose(out.state.arrays[0], [3.0, 3.0])  # (3 * 2 + 6) / 4
    assert core.diagnostics(out.state) == {"t": 1.5}  # (3 * 1 + 3) / 4
    theta, extra = core.evaluated(out.state.arrays)
    assert len(theta) == 1 and extra == {"t": 1.5}


def test_weighted_means_are_flowers_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    models = [[rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=4)] for _ in range(5)]
    sizes = [7, 1, 13, 2, 5]
    results = [
        (None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(m), n, {}))
        for m, n in zip(models, sizes)
    ]
    ours = weighted_mean_inplace([[a.copy() for a in m] for m in models], sizes)
    for a, b in zip(ours, aggregate_inplace(results)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    for a, b in zip(
        weighted_average(list(zip(models, sizes))), aggregate(list(zip(models, sizes)))
    ):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


# ------------------------------------------- the server learning rate eta_g
@pytest.mark.parametrize(
    ("server_lr", "first", "second"), [(0.5, 2.125, 2.09375), (2.0, 5.5, -1.375)]
)
def test_fedavg_with_a_server_learning_rate_by_hand(
    server_lr: float, first: float, second: float
) -> None:
    """x_{t+1} = x_t + eta_g (mean - x_t), x_1 = 1. Round 1: mean (1 + 3 * 4) / 4 = 3.25,
    x_2 = 1 + eta_g 2.25. Round 2: mean (0 + 4.125) / 2 = 2.0625, x_3 = x_2 + eta_g
    (2.0625 - x_2): 2.125 - 0.5 * 0.0625 for eta_g = 1/2, 5.5 - 2 * 3.4375 for 2."""
    core = FedAvgCore(server_lr=server_lr)
    out = core.aggregate(core.init([np.ones(2, np.float32)]), 1, replies([1.0, 4.0], [1, 3]), 1)
    assert out.state.arrays[0].tolist() == [first] * 2
    assert out.state.arrays[0].dtype == np.float32
    out = core.aggregate(out.state, 2, replies([0.0, 4.125], [1, 1]), 1)
    assert out.state.arrays[0].tolist() == [second] * 2
    assert not core.aggregate(out.state, 3, [], 1).aggregated


def test_server_step_one_is_the_mean_itself() -> None:
    """eta_g = 1 adopts the mean unchanged; x + (mean - x) would round (0.7 + (0.1 - 0.7)
    is 0.09999999999999998 in float64)."""
    x, mean = [np.array([0.7])], [np.array([0.1])]
    assert server_step(x, mean, 1.0)[0] is mean[0]
    assert (x[0] + (mean[0] - x[0]))[0] != 0.1


def test_fed_cvar_avg_has_no_server_learning_rate_and_bad_ones_are_refused() -> None:
    assert not hasattr(FedCVaRAvgCore(alpha=0.5, gamma=0.1, lr_t=0.01), "server_lr")
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="^server_lr: "):
            FedAvgCore(server_lr=bad)
