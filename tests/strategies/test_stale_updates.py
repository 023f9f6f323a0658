"""FedStale (strategies/stale_updates.py): its direction by hand, its core over two
rounds by hand, and its two ends: beta = 1 is FedVARP bit for bit, beta = 0 is FedAvg
over the participating clients; MIFA and FedVARP with a server learning rate by hand
(their other tests: test_fedar.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.stale_updates import (
    FedStaleCore,
    FedVARPCore,
    MIFACore,
    fedstale_direction,
)
from tests.helpers import TINY_GAUSSIAN, scenario_error, vector_reply

DIM = 3


def core(cls, num_clients: int = 3, lr: float = 0.5, **kwargs):
    return cls(num_clients=num_clients, lr=lr, **kwargs).for_model([np.zeros(DIM, np.float32)])


def random_rounds(seed: int, num_clients: int, rounds: int):
    """(round, active clients) with some empty rounds, and a draw per client model."""
    rng = np.random.default_rng(seed)
    for t in range(1, rounds + 1):
        yield t, np.flatnonzero(rng.random(num_clients) < 0.5).tolist(), rng


def test_fedstale_direction_by_hand() -> None:
    varp, fresh = np.array([4.0, -2.0]), np.array([6.0, 2.0])  # two participants
    # beta = 0.25: 0.25 * varp + 0.75 * fresh / 2 = (1 + 2.25, -0.5 + 0.75)
    np.testing.assert_allclose(fedstale_direction(varp, fresh, 2, 0.25), [3.25, 0.25])
    assert fedstale_direction(varp, fresh, 2, 1.0) is varp
    assert fedstale_direction(varp, fresh, 2, 0.0).tolist() == [3.0, 1.0]


def test_fedstale_core_two_rounds_by_hand() -> None:
    """N = 3, eta = 0.5, beta = 0.25, w_1 = 0; G_i = (w - w_i) / eta."""
    c = core(FedStaleCore, beta=0.25)
    state = c.init([np.zeros(DIM, np.float32)])
    # Round 1: clients 0 and 1 return -1 and -2: G = (2, 4), memory before = 0.
    # varp = 0 + (2 + 4) / 2 = 3; fresh mean 3; v = 3; w_2 = 0 - 0.5 * 3 = -1.5.
    out = c.aggregate(
        state, 1, [vector_reply(0, -np.ones(DIM)), vector_reply(1, -2 * np.ones(DIM))], 1
    )
    np.testing.assert_allclose(out.state.w, -1.5)
    # Round 2: client 1 returns -1.5 - 4 = -5.5: G_1 = 8; memory before (2, 4, 0), mean 2.
    # varp = 2 + (8 - 4) / 1 = 6; fresh mean 8; v = 0.25 * 6 + 0.75 * 8 = 7.5;
    # equivalently beta mean + (G_1 - beta y_1) = 0.5 + (8 - 1) = 7.5. w_3 = -1.5 - 3.75.
    out = c.aggregate(out.state, 2, [vector_reply(1, np.full(DIM, -5.5))], 1)
    np.testing.assert_allclose(out.state.w, -5.25)
    assert out.state.memory.updates[:, 0].tolist() == [2.0, 8.0, 0.0]
    # A round without participants: no step (as FedVARP), the counters still advance.
    empty = c.aggregate(out.state, 3, [], 1)
    assert not empty.aggregated and empty.state.memory.tau.tolist() == [2, 1, 3]


def test_beta_one_is_fedvarp_bit_for_bit() -> None:
    stale, varp = core(FedStaleCore, 5, beta=1.0), core(FedVARPCore, 5)
    a, b = stale.init([np.zeros(DIM, np.float32)]), varp.init([np.zeros(DIM, np.float32)])
    for t, active, rng in random_rounds(0, 5, 12):
        replies = [vector_reply(i, a.w + rng.standard_normal(DIM)) for i in active]
        out_a, out_b = stale.aggregate(a, t, replies, 1), varp.aggregate(b, t, replies, 1)
        a, b = out_a.state, out_b.state
        assert out_a.aggregated == out_b.aggregated
        assert a.w.tobytes() == b.w.tobytes()
        assert a.memory.updates.tobytes() == b.memory.updates.tobytes()


def test_beta_zero_is_fedavg_over_the_participating_clients() -> None:
    """Each round, from the same broadcast, FedAvg's example-weighted mean of the
    returned models (equal sizes) and FedStale(0)'s step agree to float32 rounding."""
    stale, fedavg = core(FedStaleCore, 4, lr=0.3, beta=0.0), FedAvgCore()
    state = stale.init([np.zeros(DIM, np.float32)])
    steps = 0
    for t, active, rng in random_rounds(1, 4, 12):
        replies = [vector_reply(i, state.w + rng.standard_normal(DIM)) for i in active]
        expected = fedavg.aggregate(fedavg.init([state.w.copy()]), t, replies, 1)
        out = stale.aggregate(state, t, replies, 1)
        assert out.aggregated == expected.aggregated == bool(active)
        if active:
            np.testing.assert_allclose(out.state.w, expected.state.arrays[0], rtol=1e-6, atol=1e-6)
            steps += 1
        state = out.state
    assert steps >= 4


def test_an_intermediate_beta_is_neither_end() -> None:
    ends = {}
    for beta in (0.0, 0.5, 1.0):
        c = core(FedStaleCore, 2, lr=1.0, beta=beta)
        s = c.init([np.zeros(DIM, np.float32)])
        s = c.aggregate(
            s, 1, [vector_reply(0, -np.ones(DIM)), vector_reply(1, np.ones(DIM))], 1
        ).state
        ends[beta] = c.aggregate(s, 2, [vector_reply(0, s.w - 3.0)], 1).state.w[0]
    # Round 1: G = (1, -1), w_2 = 0. Round 2: G_0 = 3; varp = 0 + (3 - 1) = 2, fresh 3.
    assert (ends[0.0], ends[1.0], ends[0.5]) == (-3.0, -2.0, -2.5)


def test_a_bad_beta_is_named() -> None:
    raw = {**TINY_GAUSSIAN, "algorithm": {"name": "fedstale", "params": {"beta": 1.5}}}
    assert "algorithm.params.beta" in scenario_error(raw)
    with pytest.raises(ValueError, match="beta"):
        core(FedStaleCore, beta=-0.1)


# ------------------------------------------- the server learning rate eta_g (issue 17)
def test_mifa_with_a_server_learning_rate_by_hand() -> None:
    """N = 3, eta = 0.5, w_1 = 0: w <- w - (eta_g eta) v, v = (1/N) sum_i G_i."""
    c = core(MIFACore, server_lr=0.5)
    state = c.init([np.zeros(DIM, np.float32)])
    # Round 1: clients 0 and 1 return -1 and -2: G = (2, 4, 0), v = 2; w = -0.25 * 2.
    replies = [vector_reply(0, -np.ones(DIM)), vector_reply(1, -2 * np.ones(DIM))]
    out = c.aggregate(state, 1, replies, 1)
    assert out.state.w.tolist() == [-0.5] * DIM
    # Round 2, nobody: MIFA steps along the memory, w = -0.5 - 0.25 * 2.
    out = c.aggregate(out.state, 2, [], 1)
    assert out.aggregated and out.state.w.tolist() == [-1.0] * DIM
    # Round 3: client 2 returns -2.5: G_2 = (-1 + 2.5) / 0.5 = 3, v = 3, w = -1 - 0.75.
    out = c.aggregate(out.state, 3, [vector_reply(2, np.full(DIM, -2.5))], 1)
    assert out.state.w.tolist() == [-1.75] * DIM and out.diagnostics["lr"] == 0.5
    # eta_g = 2: round 1 steps w = 0 - (2 * 0.5) * 2.
    c2 = core(MIFACore, server_lr=2.0)
    assert c2.aggregate(c2.init([np.zeros(DIM, np.float32)]), 1, replies, 1).state.w[0] == -2.0


def test_fedvarp_with_a_server_learning_rate_by_hand() -> None:
    """N = 3, eta = 0.5, eta_g = 2, w_1 = 0; v = mean(y) + mean over S of (G_i - y_i)."""
    c = core(FedVARPCore, server_lr=2.0)
    state = c.init([np.zeros(DIM, np.float32)])
    # Round 1: G = (2, 4), y = 0: v = 3, w = 0 - (2 * 0.5) * 3.
    replies = [vector_reply(0, -np.ones(DIM)), vector_reply(1, -2 * np.ones(DIM))]
    out = c.aggregate(state, 1, replies, 1)
    assert out.state.w.tolist() == [-3.0] * DIM
    # Round 2: client 1 returns -7: G_1 = 8; mean(y) = 2, v = 2 + (8 - 4) = 6, w = -3 - 6.
    out = c.aggregate(out.state, 2, [vector_reply(1, np.full(DIM, -7.0))], 1)
    assert out.state.w.tolist() == [-9.0] * DIM
    assert not c.aggregate(out.state, 3, [], 1).aggregated  # no step without participants
    c_half = core(FedVARPCore, server_lr=0.5)
    w = c_half.aggregate(c_half.init([np.zeros(DIM, np.float32)]), 1, replies, 1).state.w
    assert w.tolist() == [-0.75] * DIM  # 0 - (0.5 * 0.5) * 3


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_bad_server_learning_rate_is_refused(bad: float) -> None:
    for cls in (MIFACore, FedVARPCore):
        with pytest.raises(ValueError, match="algorithm.params.server_lr"):
            core(cls, server_lr=bad)
