"""FedAWE (strategies/fedawe.py, the paper's Algorithm 1): the echo of lines 10-11, a
hand-computed run of three rounds (one empty), the per-client models the server keeps
and sends (lines 16-21), and the reduction to FedAvg when every client is always there."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import parameters_to_ndarrays
from flwr.server.client_manager import SimpleClientManager

from fedram_flwr.strategies import FedAWE
from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.fedawe import FedAWECore, echoed
from tests.helpers import TINY_GAUSSIAN, partition_of, register_clients, scenario_error
from tests.helpers import vector_reply as reply

DIM = 2
ZERO = [np.zeros(DIM, np.float32)]


def core(num_clients: int = 3, server_lr: float = 1.0) -> FedAWECore:
    return FedAWECore(num_clients=num_clients, lr=0.1, server_lr=server_lr).for_model(ZERO)


def test_echo_of_lines_10_and_11() -> None:
    # x_i^t = 1, x_i^(t,s) = 0.5: G = 0.5; eta_g = 2, t - tau = 3: 1 - 2 * 3 * 0.5 = -2.
    assert echoed(np.ones(1, np.float32), np.full(1, 0.5), 3, 2.0).tolist() == [-2.0]


def test_three_rounds_by_hand() -> None:
    """N = 3, eta_g = 0.5, x^0 = 0 (tau = 0 is the paper's tau_i(0) = -1)."""
    c = core(server_lr=0.5)
    s = c.init(ZERO)
    # Round 1, A = {0, 1}, echo t - tau = 1: client 0 returns 2 -> 0 - 0.5 (0 - 2) = 1,
    # client 1 returns 4 -> 2; x^2 = 1.5 (line 15). tau = (1, 1, 0).
    out = c.aggregate(s, 1, [reply(0, np.full(DIM, 2.0)), reply(1, np.full(DIM, 4.0))], 1)
    assert out.state.w.tolist() == [1.5, 1.5] and out.state.tau.tolist() == [1, 1, 0]
    assert out.diagnostics["mean-echo"] == 1.0
    # Round 2: nobody; the model and every tau stay (lines 19-21).
    empty = c.aggregate(out.state, 2, [], 1)
    assert not empty.aggregated and empty.state is out.state
    # Round 3, A = {1, 2}: client 1 started from x^{1+1} = 1.5 and returns 2.5, echo
    # 3 - 1 = 2: 1.5 - 0.5 * 2 * (1.5 - 2.5) = 2.5. Client 2 (never seen) started from
    # x^0 = 0 and returns -1, echo 3 - 0 = 3: 0 - 0.5 * 3 * (0 + 1) = -1.5. x = 0.5.
    assert c.client_arrays(out.state, 1)[0].tolist() == [1.5, 1.5]
    assert c.client_arrays(out.state, 2)[0].tolist() == [0.0, 0.0]
    out = c.aggregate(out.state, 3, [reply(1, np.full(DIM, 2.5)), reply(2, -np.ones(DIM))], 2)
    assert out.state.w.tolist() == [0.5, 0.5] and out.state.tau.tolist() == [1, 3, 3]
    assert out.diagnostics["mean-echo"] == 2.5
    # Client 0 keeps x^2 = 1.5 (line 20); 1 and 2 get x^4 = 0.5 (line 18); x^0 is dropped.
    assert sorted(out.state.snapshots) == [1, 3]
    assert [c.client_arrays(out.state, i)[0][0] for i in range(3)] == [1.5, 0.5, 0.5]


def test_every_client_always_available_is_fedavg() -> None:
    """t - tau = 1 and x_i^t = x^t every round: line 15 is the mean of the returned
    models, FedAvg's aggregate with equal m_i (to float32 rounding), round after round."""
    c, fedavg = core(4), FedAvgCore()
    s = c.init(ZERO)
    rng = np.random.default_rng(0)
    for t in range(1, 9):
        assert all(np.array_equal(c.client_arrays(s, i)[0], s.w) for i in range(4))
        replies = [reply(i, s.w + rng.standard_normal(DIM)) for i in range(4)]
        expected = fedavg.aggregate(fedavg.init([s.w.copy()]), t, replies, 1).state.arrays[0]
        out = c.aggregate(s, t, replies, 1)
        assert out.diagnostics["mean-echo"] == 1.0 and len(out.state.snapshots) == 1
        np.testing.assert_allclose(out.state.w, expected, rtol=1e-6, atol=1e-6)
        s = out.state


def test_the_legacy_strategy_sends_each_client_its_own_model() -> None:
    manager = SimpleClientManager()
    register_clients(manager, 3)
    strategy = FedAWE(initial_arrays=ZERO, num_clients=3, lr=0.1, fraction_fit=1.0)
    strategy.state = strategy.core.aggregate(strategy.state, 1, [reply(0, np.ones(DIM))], 1).state
    pairs = strategy.configure_fit(2, None, manager)
    assert len(pairs) == 3
    for proxy, ins in pairs:
        want = [0.0] * DIM if partition_of(proxy) else [1.0] * DIM
        assert parameters_to_ndarrays(ins.parameters)[0].tolist() == want
        assert ins.config["lr"] == 0.1


def test_a_bad_server_lr_is_named() -> None:
    raw = {**TINY_GAUSSIAN, "algorithm": {"name": "fedawe", "params": {"server_lr": 0.0}}}
    assert "algorithm.params.server_lr" in scenario_error(raw)
    with pytest.raises(ValueError, match="server_lr"):
        core(server_lr=-1.0)
