"""FedAvg over all clients (strategies/participation.py): its step by hand, and with
every client available it is FedAvg; FedAvg-IS and FedAU with a server learning rate by
hand. (FedAvg-IS, FedAvg(S), FedAU otherwise: test_fedar.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.participation import FedAUCore, FedAvgAllCore, FedAvgISCore
from tests.helpers import vector_reply

DIM = 3


def fedavg_all(num_clients: int) -> FedAvgAllCore:
    return FedAvgAllCore(num_clients=num_clients, lr=0.1).for_model([np.zeros(DIM, np.float32)])


def test_unavailable_clients_count_as_zero_updates() -> None:
    """N = 4, w_1 = 1; clients 1 and 3 return 3 and -1: updates w - w_i = -2 and 2, and
    clients 0, 2 count 0: w_2 = 1 - (-2 + 2 + 0 + 0) / 4 = 1. Then client 2 alone
    returns 5: w_3 = 1 - (1 - 5) / 4 = 2 (FedAvg over the active ones would give 5)."""
    c = fedavg_all(4)
    state = c.init([np.ones(DIM, np.float32)])
    out = c.aggregate(
        state, 1, [vector_reply(1, np.full(DIM, 3.0)), vector_reply(3, -np.ones(DIM))], 1
    )
    assert out.state.w.tolist() == [1.0] * DIM
    out = c.aggregate(out.state, 2, [vector_reply(2, np.full(DIM, 5.0))], 1)
    assert out.state.w.tolist() == [2.0] * DIM and out.state.w.dtype == np.float32
    empty = c.aggregate(out.state, 3, [], 1)
    assert not empty.aggregated and empty.state.w is out.state.w


def test_every_client_available_gives_fedavg() -> None:
    c, fedavg = fedavg_all(3), FedAvgCore()
    state = c.init([np.zeros(DIM, np.float32)])
    rng = np.random.default_rng(0)
    for t in range(1, 6):
        replies = [vector_reply(i, state.w + rng.standard_normal(DIM)) for i in range(3)]
        expected = fedavg.aggregate(fedavg.init([state.w.copy()]), t, replies, 1)
        state = c.aggregate(state, t, replies, 1).state
        np.testing.assert_allclose(state.w, expected.state.arrays[0], rtol=1e-6, atol=1e-6)


# ------------------------------------------- the server learning rate eta_g (issue 17)
@pytest.mark.parametrize(("server_lr", "expected"), [(0.5, 0.5), (2.0, -1.0)])
def test_fedavg_is_with_a_server_learning_rate_by_hand(server_lr: float, expected: float) -> None:
    """N = 4, p = (1/2, 1, 1/4, 1), w_1 = 1; clients 0 and 2 return 3 and -1: updates
    -2 and 2 weighed 2 and 4, (1/N) sum = (-4 + 8) / 4 = 1; w_2 = 1 - eta_g * 1."""
    c = FedAvgISCore(
        num_clients=4, lr=0.1, known_p=[0.5, 1.0, 0.25, 1.0], server_lr=server_lr
    ).for_model([np.zeros(DIM, np.float32)])
    replies = [vector_reply(0, np.full(DIM, 3.0)), vector_reply(2, -np.ones(DIM))]
    out = c.aggregate(c.init([np.ones(DIM, np.float32)]), 1, replies, 1)
    assert out.state.w.tolist() == [expected] * DIM and out.state.w.dtype == np.float32


def test_fedau_with_a_server_learning_rate_by_hand() -> None:
    """N = 2, K = 5, eta_g = 0.5, w_1 = 0. Round 1: client 0 returns 2, omega = 1:
    w_2 = 0 - 0.5 * (-2) / 2 = 0.5. Round 2: client 1 (no interval yet, omega = 1)
    returns 4.5: w_3 = 0.5 - 0.5 * (-4) / 2 = 1.5; its first interval, 2 rounds, closes.
    Round 3: client 1 (omega = 2) returns 3.5: w_4 = 1.5 - 0.5 * 2 * (-2) / 2 = 2.5."""
    c = FedAUCore(num_clients=2, lr=0.1, cutoff=5, server_lr=0.5).for_model(
        [np.zeros(DIM, np.float32)]
    )
    state = c.init([np.zeros(DIM, np.float32)])
    for t, (pid, value, w, omega) in enumerate(
        [(0, 2.0, 0.5, 1.0), (1, 4.5, 1.5, 1.0), (1, 3.5, 2.5, 2.0)], start=1
    ):
        out = c.aggregate(state, t, [vector_reply(pid, np.full(DIM, value))], 1)
        assert out.state.w.tolist() == [w] * DIM and out.diagnostics["mean-weight"] == omega
        state = out.state


@pytest.mark.parametrize("bad", [0.0, -0.5, float("nan")])
def test_a_bad_server_learning_rate_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="algorithm.params.server_lr"):
        FedAvgISCore(num_clients=2, lr=0.1, server_lr=bad)
    with pytest.raises(ValueError, match="algorithm.params.server_lr"):
        FedAUCore(num_clients=2, lr=0.1, cutoff=5, server_lr=bad)
