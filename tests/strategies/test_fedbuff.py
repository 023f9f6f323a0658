"""FedBuff (strategies/fedbuff.py, strategies/fedbuff_loop.py) against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedram_flwr.protocol import ClientReply
from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.fedbuff import (
    FedBuffCore,
    add_update,
    buffered_step,
    staleness_weights,
)
from fedram_flwr.strategies.fedbuff_loop import fill, run_fedbuff, start


# ------------------------------------------------------------------ pure functions
def test_staleness_weights_at_hand_picked_values() -> None:
    s = [0, 1, 3, 8]
    assert staleness_weights("constant", s).tolist() == [1.0, 1.0, 1.0, 1.0]
    # 1/sqrt(1+s): 1, 1/sqrt 2, 1/2, 1/3
    assert np.allclose(staleness_weights("polynomial", s), [1, 1 / math.sqrt(2), 0.5, 1 / 3])
    assert np.allclose(staleness_weights("polynomial", s, exponent=1.0), [1, 1 / 2, 1 / 4, 1 / 9])
    assert staleness_weights("polynomial", s, exponent=0.0).tolist() == [1.0] * 4
    # FedAsync's hinge, a = 10, b = 4: 1 up to s = 4, then 1/(10 (s - 4) + 1)
    hinge = staleness_weights("hinge", [0, 4, 5, 8], hinge_a=10.0, hinge_b=4.0)
    assert np.allclose(hinge, [1, 1, 1 / 11, 1 / 41])


def test_staleness_weights_refuse_negative_staleness_and_unknown_names() -> None:
    with pytest.raises(ValueError, match="staleness: .*negative"):
        staleness_weights("constant", [-1])
    with pytest.raises(ValueError, match="'sqrt' is not one of constant, polynomial, hinge"):
        staleness_weights("sqrt", [0])


def test_buffer_and_step_by_hand() -> None:
    # updates Delta = downloaded - returned: (1 - 0) = 1 weighted 1, (3 - 1) = 2 weighted 0.5
    b = add_update(None, [np.array([1.0])], [np.array([0.0])], 1.0)
    b = add_update(b, [np.array([3.0])], [np.array([1.0])], 0.5)
    assert b[0].tolist() == [2.0]
    # w - eta_g B / K = 10 - 0.5 * 2 / 2
    out = buffered_step([np.array([10.0], np.float32)], b, 2, 0.5)
    assert out[0].tolist() == [9.5] and out[0].dtype == np.float32


def test_core_refuses_rounds_and_bad_parameters() -> None:
    core = FedBuffCore(buffer_size=2, concurrency=2)
    with pytest.raises(NotImplementedError, match="asynchronous"):
        core.aggregate(core.init([np.zeros(1)]), 1, [], 1)
    with pytest.raises(ValueError, match="buffer_size: 0 is outside"):
        FedBuffCore(buffer_size=0)
    with pytest.raises(ValueError, match="staleness: 'sqrt' is not one of"):
        FedBuffCore(staleness="sqrt")
    with pytest.raises(ValueError, match="version: 3 is later"):
        core.receive(core.init([np.zeros(1)]), 0, [np.zeros(1)], 3, [np.zeros(1)])


# --------------------------------------------------- a 3-client schedule by hand
TARGETS = {0: 4.0, 1: 8.0, 2: 16.0}
DURATIONS = {0: 1.0, 1: 2.5, 2: 1.0}


def half_way(pid: int, arrays: list[np.ndarray], version: int) -> list[np.ndarray]:
    """Client i returns (w + c_i) / 2: its update Delta = w - y = (w - c_i) / 2."""
    return [(arrays[0] + TARGETS[pid]) / 2]


def hand_available(t: float) -> np.ndarray:
    """{0, 1} before 0.5 s, {2} until 1.5 s, {0, 1} after: never more idle than needed."""
    if t < 0.5:
        return np.array([0, 1])
    return np.array([2]) if t < 1.5 else np.array([0, 1])


def hand_durations(ids: np.ndarray, t: float) -> np.ndarray:
    return np.array([DURATIONS[int(i)] for i in ids])


@pytest.mark.parametrize("eta", [1.0, 0.5])
def test_first_two_steps_of_a_three_client_schedule_by_hand(eta: float) -> None:
    """K = 2, C = 2, s = 1/sqrt(1 + staleness), w0 = 0.

    t=0    start 0 (finishes 1) and 1 (finishes 2.5) on w0, version 0
    t=1    0 arrives: staleness 0, weight 1, Delta = (0 - 4)/2 = -2; B = -2.  Start 2 (to 2)
    t=2    2 arrives: staleness 0, weight 1, Delta = (0 - 16)/2 = -8; B = -10, K reached:
           w1 = 0 - eta (-10)/2 = 5 eta, version 1.  Start 0 on w1 (to 3)
    t=2.5  1 arrives: downloaded version 0, server at 1: staleness 1, weight 1/sqrt 2,
           Delta = (0 - 8)/2 = -4; B = -4/sqrt 2.  Start 1 on w1 (to 5)
    t=3    0 arrives: staleness 0, weight 1, Delta = (w1 - 4)/2; B = -4/sqrt 2 + (w1 - 4)/2:
           w2 = w1 - eta B / 2, version 2.
    """
    core = FedBuffCore(buffer_size=2, concurrency=2, staleness="polynomial", server_lr=eta)
    seen = []
    loop, records = run_fedbuff(
        core,
        [np.array(0.0)],
        steps=2,
        available_at=hand_available,
        durations=hand_durations,
        train=half_way,
        seed=0,
        on_step=lambda r, lp: seen.append(float(lp.server.arrays[0])),
    )
    w1 = 5 * eta
    w2 = w1 - eta * (-4 / math.sqrt(2) + (w1 - 4) / 2) / 2
    assert [r.version for r in records] == [1, 2]
    assert [r.time for r in records] == [2.0, 3.0]
    assert [r.clients for r in records] == [(0, 2), (1, 0)]
    assert [r.staleness for r in records] == [(0, 0), (1, 0)]
    assert records[0].weights == (1.0, 1.0)
    assert records[1].weights == pytest.approx((1 / math.sqrt(2), 1.0))
    assert seen == pytest.approx([w1, w2])
    assert float(loop.server.arrays[0]) == pytest.approx(w2)
    # still training after step 2: client 1 on w1 (version 1, until 5), 0 restarted at 3
    assert [(j.partition_id, j.version, j.start, j.finish) for j in loop.training] == [
        (0, 2, 3.0, 4.0),
        (1, 1, 2.5, 5.0),
    ]


def test_constant_weight_makes_the_stale_update_count_fully() -> None:
    core = FedBuffCore(buffer_size=2, concurrency=2, staleness="constant")
    _, records = run_fedbuff(
        core,
        [np.array(0.0)],
        steps=2,
        available_at=hand_available,
        durations=hand_durations,
        train=half_way,
        seed=0,
    )
    assert records[1].staleness == (1, 0) and records[1].weights == (1.0, 1.0)


def test_an_update_holding_nan_is_refused_and_counted_as_failed() -> None:
    """The hand schedule with client 2's first update NaN: at t = 2 it fails (slot freed,
    counted), so step 1 comes at t = 2.5 from clients 0 and 1 (staleness 0, 0), with
    w1 = 0 - (-2 - 4) / 2 = 3 and one failure in its record."""
    core = FedBuffCore(buffer_size=2, concurrency=2, staleness="polynomial")

    def train(pid: int, arrays: list[np.ndarray], version: int) -> list[np.ndarray]:
        return [np.array(np.nan)] if (pid, version) == (2, 0) else half_way(pid, arrays, version)

    loop, records = run_fedbuff(
        core,
        [np.array(0.0)],
        steps=1,
        available_at=hand_available,
        durations=hand_durations,
        train=train,
        seed=0,
    )
    (record,) = records
    assert (record.time, record.clients, record.staleness) == (2.5, (0, 1), (0, 0))
    assert record.failures == 1 and float(loop.server.arrays[0]) == 3.0


# --------------------------------------- K = C = N, equally fast: a FedAvg round
@pytest.mark.parametrize("eta", [1.0, 0.3])
def test_k_equals_c_equals_n_with_constant_weights_is_fedavg(eta: float) -> None:
    """Every client starts on w_t, all finish together, the K = N updates have staleness 0:
    w_{t+1} = w_t - eta (1/N) sum_k (w_t - y_k) = w_t + eta (mean_k y_k - w_t), FedAvg's
    round with the unweighted mean (FedAvgCore with equal example counts) and server_lr."""
    n, rng = 4, np.random.default_rng(3)
    shift = rng.normal(size=(n, 3))

    def train(pid: int, arrays: list[np.ndarray], version: int) -> list[np.ndarray]:
        return [0.9 * arrays[0] + shift[pid]]

    core = FedBuffCore(buffer_size=n, concurrency=n, staleness="constant", server_lr=eta)
    w0 = [np.linspace(-1, 1, 3)]
    models: list[np.ndarray] = []
    _, records = run_fedbuff(
        core,
        w0,
        steps=3,
        available_at=lambda t: np.arange(n),
        durations=lambda ids, t: np.ones(len(ids)),
        train=train,
        seed=7,
        on_step=lambda r, lp: models.append(lp.server.arrays[0]),
    )
    assert len(records) == 3
    fedavg = FedAvgCore(server_lr=eta)
    state = fedavg.init(w0)
    for t, rec in enumerate(records, start=1):
        assert rec.staleness == (0,) * n and rec.clients == tuple(range(n))
        assert rec.time == float(t)
        replies = [
            ClientReply(k, 10, {}, lambda k=k, w=state.arrays: train(k, w, 0)) for k in range(n)
        ]
        state = fedavg.aggregate(state, t, replies, 1).state
        assert np.allclose(models[t - 1], state.arrays[0], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the loop itself
def test_fill_draws_among_idle_available_clients_from_a_seeded_stream() -> None:
    core = FedBuffCore(buffer_size=1, concurrency=2)
    loop = start(core, [np.zeros(1)])

    def picks(seed: int) -> list[int]:
        filled = fill(core, loop, lambda t: np.arange(6), hand_durations_any, seed)
        return [j.partition_id for j in filled.training]

    assert picks(1) == picks(1)
    assert len(set(picks(1))) == 2 and set(picks(1)) <= set(range(6))
    assert {tuple(picks(s)) for s in range(10)} != {tuple(picks(1))}  # the seed matters


def hand_durations_any(ids: np.ndarray, t: float) -> np.ndarray:
    return np.ones(len(ids))


def test_the_clock_waits_while_nobody_is_available_and_fails_after_max_waits() -> None:
    core = FedBuffCore(buffer_size=1, concurrency=1, staleness="constant")
    _, records = run_fedbuff(
        core,
        [np.array(0.0)],
        steps=1,
        available_at=lambda t: np.array([0] if t >= 3 else []),
        durations=hand_durations_any,
        train=half_way,
        seed=0,
    )
    assert records[0].time == 4.0  # waits 0 -> 3 s in 1 s steps, trains 1 s
    with pytest.raises(RuntimeError, match="nobody was available for 5 waits"):
        run_fedbuff(
            core,
            [np.array(0.0)],
            steps=1,
            available_at=lambda t: np.array([], dtype=int),
            durations=hand_durations_any,
            train=half_way,
            seed=0,
            max_idle_waits=5,
        )
