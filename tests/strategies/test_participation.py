"""FedAvg over all clients (strategies/participation.py): its step by hand, and with
every client available it is FedAvg; FedAvg-IS and FedAU with a server learning rate by
hand; FedAvg-IS with known p_i^t (a per-round law) by hand. (FedAvg-IS, FedAvg(S), FedAU
otherwise: test_fedar.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.availability import NonStationaryLaw
from fedram_flwr.strategies.fedau import FedAUCore
from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.participation import FedAvgAllCore, FedAvgISCore
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


# ------------------------------------------- the server learning rate eta_g
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
    with pytest.raises(ValueError, match="^server_lr: "):
        FedAvgISCore(num_clients=2, lr=0.1, server_lr=bad)
    with pytest.raises(ValueError, match="^server_lr: "):
        FedAUCore(num_clients=2, lr=0.1, cutoff=5, server_lr=bad)


# ------------------------------- FedAvg with known p_i^t (FedAWE Table 2)
def fedavg_is(num_clients: int, known_p) -> FedAvgISCore:
    return FedAvgISCore(num_clients=num_clients, lr=0.1, known_p=known_p).for_model(
        [np.zeros(DIM, np.float32)]
    )


def test_known_p_t_weighs_by_the_current_rounds_probability() -> None:
    """Staircase, P = 2, low 1/2, p = (1/2, 1/4): p^1 = (1/2, 1/4), p^2 = (1/4, 1/8)
    (their mean (3/8, 3/16) would give w_2 = 20/3, w_3 = 23/3). N = 2, w_1 = 0.
    Round 1: clients 0, 1 return 1, 2: w_2 = 0 - (2 (0 - 1) + 4 (0 - 2)) / 2 = 5.
    Round 2: client 1 returns 6, weight 1 / p_1^2 = 8: w_3 = 5 - 8 (5 - 6) / 2 = 9."""
    law = NonStationaryLaw(np.array([0.5, 0.25]), "staircase", period=2, low=0.5)
    c = fedavg_is(2, law)
    out = c.aggregate(
        c.init([np.zeros(DIM, np.float32)]),
        1,
        [vector_reply(0, np.ones(DIM)), vector_reply(1, np.full(DIM, 2.0))],
        1,
    )
    assert out.state.w.tolist() == [5.0] * DIM and out.diagnostics["mean-weight"] == 3.0
    out = c.aggregate(out.state, 2, [vector_reply(1, np.full(DIM, 6.0))], 1)
    assert out.state.w.tolist() == [9.0] * DIM and out.diagnostics["mean-weight"] == 8.0


def test_a_constant_law_per_round_is_the_stationary_known_p_bit_for_bit() -> None:
    p = np.array([0.9, 0.35, 0.6])
    fixed, per_round = fedavg_is(3, p), fedavg_is(3, lambda server_round: p)
    a, b = fixed.init([np.ones(DIM, np.float32)]), per_round.init([np.ones(DIM, np.float32)])
    rng = np.random.default_rng(0)
    for t, active in enumerate([[0, 1, 2], [1], [], [0, 2]], start=1):
        replies = [vector_reply(i, a.w + rng.standard_normal(DIM)) for i in active]
        a = fixed.aggregate(a, t, replies, 1).state
        b = per_round.aggregate(b, t, replies, 1).state
        assert a.w.tobytes() == b.w.tobytes()
    assert isinstance(fixed.known_p, np.ndarray)  # a stationary law stays the array


def test_a_client_cut_to_zero_may_be_absent_but_not_active() -> None:
    """Interleaved sine at t = 0 (round 1): g = 0.7, p g = (0.084, 0.35): client 0 is
    cut (p_0^1 = 0 < delta_0 = 0.1); client 1 alone is weighed 1 / 0.35."""
    law = NonStationaryLaw(np.array([0.12, 0.5]), "interleaved-sine")
    c = fedavg_is(2, law)
    state = c.init([np.zeros(DIM, np.float32)])
    out = c.aggregate(state, 1, [vector_reply(1, np.ones(DIM))], 1)
    np.testing.assert_allclose(out.state.w, 1 / 0.35 / 2, rtol=1e-6)
    with pytest.raises(ValueError, match=r"client 0 is active in round 1 with p_i\^t = 0"):
        c.aggregate(state, 1, [vector_reply(0, np.ones(DIM))], 1)


def test_a_bad_per_round_law_is_refused() -> None:
    c = fedavg_is(2, lambda server_round: np.array([0.5, 1.5]))
    with pytest.raises(ValueError, match=r"oracle-informed p in round 4: need 2 probabilities"):
        c.aggregate(c.init([np.zeros(DIM, np.float32)]), 4, [vector_reply(0, np.ones(DIM))], 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_known_p_nan_or_inf_is_refused_naming_known_p(bad: float) -> None:
    """NaN compared false with both bounds, so it passed ``p <= 0 or p > 1``."""
    with pytest.raises(ValueError, match=r"known_p: oracle-informed p: need 2 probabilities"):
        fedavg_is(2, [0.5, bad])
    c = fedavg_is(2, lambda server_round: np.array([0.5, bad]))  # a law read per round
    with pytest.raises(ValueError, match=r"known_p: oracle-informed p in round 4"):
        c.aggregate(c.init([np.zeros(DIM, np.float32)]), 4, [vector_reply(0, np.ones(DIM))], 1)


@pytest.mark.parametrize(("server_lr", "expected"), [(1.0, 1.5), (0.5, 1.25), (10.0, 6.0)])
def test_fedavg_all_with_a_server_learning_rate_by_hand(server_lr: float, expected: float) -> None:
    """N = 4, w_1 = 1; client 1 returns 3 (update w - w_i = -2), the others count 0:
    (1/N) sum = -1/2, so w_2 = 1 - eta_g (-1/2) = 1 + eta_g / 2; eta_g = 1 is the default
    (the FedAWE paper tunes eta_g for this baseline too, App. J Table 7)."""
    c = FedAvgAllCore(num_clients=4, lr=0.1, server_lr=server_lr)
    c = c.for_model([np.zeros(DIM, np.float32)])
    out = c.aggregate(
        c.init([np.ones(DIM, np.float32)]), 1, [vector_reply(1, np.full(DIM, 3.0))], 1
    )
    assert out.state.w.tolist() == [expected] * DIM
