"""FedAvg over all clients (strategies/participation.py): its step by hand, and with
every client available it is FedAvg. (FedAvg-IS, FedAvg(S), FedAU: test_fedar.py.)"""

from __future__ import annotations

import numpy as np

from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.participation import FedAvgAllCore
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
