"""FedBuff's Message-API strategy (fedram_flwr/message_api/fedbuff.py, fedbuff_flight.py)
on the in-process grid, against hand computations and the Flower-free event loop.

The clients are scalar: partition i returns (w + c_i) / 2 (c = 4, 8, 16), so its update
Delta = w_sent - y = (w_sent - c_i) / 2 (the schedule of tests/strategies/test_fedbuff.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedram_flwr.clients.partition_query import PARTITION_ACTION, partition_id_query
from fedram_flwr.engines.grid import InProcessGrid
from fedram_flwr.message_api import FedBuff
from fedram_flwr.message_api.fedbuff import resolve_clock
from fedram_flwr.strategies.fedbuff import FedBuffCore
from fedram_flwr.strategies.fedbuff_loop import FedBuffFailures, run_fedbuff
from tests.strategies.test_fedbuff import (
    TARGETS,
    half_way,
    hand_available,
    hand_durations,
)


def half_way_app(fail: Iterable[tuple[int, int]] = (), shape: tuple[int, ...] = ()) -> ClientApp:
    """Partition i returns (w + c_i) / 2; it raises when (i, server-round) is in ``fail``;
    ``shape`` other than the model's breaks the contract."""
    app, failing = ClientApp(), set(fail)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        version = int(msg.content["config"]["server-round"]) - 1
        if (pid, version + 1) in failing:
            raise RuntimeError(f"partition {pid} fails on version {version}")
        (w,) = msg.content["arrays"].to_numpy_ndarrays()
        y = np.asarray(half_way(pid, [w], version)[0])
        y = np.resize(y, shape) if shape else y
        metrics = MetricRecord({"num-examples": 1, "partition-id": pid})
        return Message(RecordDict({"arrays": ArrayRecord([y]), "metrics": metrics}), reply_to=msg)

    @app.query(PARTITION_ACTION)
    def partition(msg: Message, context: Context) -> Message:
        return partition_id_query(msg, context)

    return app


class LateGrid(InProcessGrid):
    """An in-process grid whose replies come late: partition p's reply shows after the
    ``delays[p]``-th pull that asks for it (wall-clock arrivals, deterministic); a
    partition with no delay never answers."""

    def __init__(self, app: ClientApp, delays: dict[int, int]) -> None:
        super().__init__(app, 3)
        self.delays, self.asked = delays, Counter[str]()

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        ready = []
        for i in message_ids:
            self.asked[i] += 1
            reply = self._replies.get(i)
            if reply is None or reply.metadata.message_type != "train":
                ready.append(i)  # the partition-id query: at once
                continue
            pid = self.partition_of(reply.metadata.src_node_id)
            if pid in self.delays and self.asked[i] >= self.delays[pid]:
                ready.append(i)
        return super().pull_messages(ready)


def scalar() -> ArrayRecord:
    return ArrayRecord([np.array(0.0)])


def model_of(strategy: FedBuff) -> float:
    assert strategy.loop is not None
    return float(strategy.loop.server.arrays[0])


@pytest.mark.parametrize("eta", [1.0, 0.5])
def test_the_three_client_schedule_by_hand_on_the_simulated_clock(eta: float) -> None:
    """K = 2, C = 2, 1/sqrt(1 + staleness), w0 = 0 (tests/strategies/test_fedbuff.py):
    step 1 at t = 2 from 0 and 2, w1 = 5 eta; step 2 at t = 3 from 1 (staleness 1, weight
    1/sqrt 2) and 0: w2 = w1 - eta (-4/sqrt 2 + (w1 - 4)/2)/2. The replies all exist at
    once (in-process); the simulated clock takes them in finish order."""
    strategy = FedBuff(
        buffer_size=2, concurrency=2, server_lr=eta, available_at=hand_available,
        durations=hand_durations,
    )  # fmt: skip
    seen: list[tuple[int, float]] = []
    strategy.on_step = lambda record, model: seen.append((record.version, float(model[0])))
    grid = InProcessGrid(half_way_app(), 3)
    result = strategy.start(grid, scalar(), num_rounds=2)
    w1 = 5 * eta
    w2 = w1 - eta * (-4 / math.sqrt(2) + (w1 - 4) / 2) / 2
    records = strategy.records
    assert strategy.clock == "simulated"
    assert [(r.version, r.time) for r in records] == [(1, 2.0), (2, 3.0)]
    assert [r.clients for r in records] == [(0, 2), (1, 0)]
    assert [r.staleness for r in records] == [(0, 0), (1, 0)]
    assert [r.versions for r in records] == [(0, 0), (0, 1)]
    assert records[1].weights == pytest.approx((1 / math.sqrt(2), 1.0))
    assert seen == [(1, pytest.approx(w1)), (2, pytest.approx(w2))]
    (final,) = result.arrays.to_numpy_ndarrays()
    assert float(final) == pytest.approx(w2)
    assert result.train_metrics_clientapp[2]["mean-staleness"] == 0.5
    # the event loop gives the same run bit for bit
    core = FedBuffCore(buffer_size=2, concurrency=2, server_lr=eta)
    loop, expected = run_fedbuff(
        core, [np.array(0.0)], steps=2, available_at=hand_available,
        durations=hand_durations, train=half_way, seed=0,
    )  # fmt: skip
    assert records == expected and model_of(strategy) == float(loop.server.arrays[0])
    # clients 0 (version 2) and 1 (version 1) were still training: pulled and dropped
    assert strategy.dropped == 2 and not grid._replies


def test_the_wall_clock_takes_replies_as_they_arrive() -> None:
    """K = 2, C = N = 3, constant weights; partition p's reply shows at its message's
    d_p-th pull, d = (1, 3, 2). Pull 1: 0 (v0); 0 restarts. Pull 2: 0 (v0), then step 1
    (clients 0, 0): w1 = 0 - (-2 - 2)/2 = 2; then 2 (v0, staleness 1); 0 and 2 restart on
    w1. Pull 3: 0 (v1), step 2 (clients 2, 0; staleness 1, 0): w2 = 2 - (-8 - 1)/2 = 6.5;
    then 1 (v0, staleness 2). Pull 4: 0 (v2: (6.5 - 4)/2 = 1.25), step 3 (clients 1, 0;
    staleness 2, 0): w3 = 6.5 - (-4 + 1.25)/2 = 7.875."""
    strategy = FedBuff(buffer_size=2, concurrency=3, staleness="constant", clock="wall",
                       poll_interval=0.001)  # fmt: skip
    result = strategy.start(LateGrid(half_way_app(), {0: 1, 1: 3, 2: 2}), scalar(), num_rounds=3)
    records = strategy.records
    assert strategy.clock == "wall"
    assert [r.clients for r in records] == [(0, 0), (2, 0), (1, 0)]
    assert [r.versions for r in records] == [(0, 0), (0, 1), (0, 2)]
    assert [r.staleness for r in records] == [(0, 0), (1, 0), (2, 0)]
    assert [float(result.arrays.to_numpy_ndarrays()[0])] == [7.875] == [model_of(strategy)]
    times = [r.time for r in records]
    assert times == sorted(times) and times[0] >= 0


def test_failures_free_their_slot_and_are_counted_in_the_next_step() -> None:
    """K = 1, C = N = 3, one tick each. t = 1: 0 steps (version 1), 1 fails (its message
    of version 0, server-round 1), 2 steps; all restart on version 2. t = 2: 0 fails
    (server-round 3), 1 and 2 step: every other update steps."""
    strategy = FedBuff(buffer_size=1, concurrency=3, staleness="constant")
    grid = InProcessGrid(half_way_app(fail=[(1, 1), (0, 3)]), 3)
    strategy.start(grid, scalar(), num_rounds=4)
    records = strategy.records
    expected = [((0,), 0), ((2,), 1), ((1,), 1), ((2,), 0)]
    assert [(r.clients, r.failures) for r in records] == expected
    assert [r.time for r in records] == [1.0, 1.0, 2.0, 2.0]
    assert not grid._replies


def test_updates_failing_in_a_row_stop_the_run() -> None:
    strategy = FedBuff(buffer_size=1, concurrency=1, max_failed_rounds=2)
    fail = [(0, v) for v in range(1, 10)]
    with pytest.raises(FedBuffFailures, match="2 updates in a row failed"):
        strategy.start(InProcessGrid(half_way_app(fail=fail), 1), scalar(), num_rounds=3)


def test_no_reply_within_the_ttl_is_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    """Nobody answers: each message expires ``timeout`` s after its push, a failure, and
    the slot is filled again, until two failures in a row stop the run."""
    strategy = FedBuff(buffer_size=1, concurrency=1, max_failed_rounds=2, poll_interval=0.001)
    with pytest.raises(FedBuffFailures, match="2 updates in a row failed"):
        strategy.start(LateGrid(half_way_app(), {}), scalar(), num_rounds=1, timeout=0.02)
    assert caplog.text.count("within its ttl of 0.02 s") == 2


class LeavingGrid(InProcessGrid):
    """Partition 2's node disconnects when the first replies are pulled."""

    pulls = 0

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        self.pulls += 1
        return super().pull_messages(message_ids)

    def get_node_ids(self) -> list[int]:
        ids = super().get_node_ids()
        return ids if self.pulls == 0 else [i for i in ids if self.partition_of(i) != 2]


def test_a_node_that_disconnects_leaves_the_idle_set() -> None:
    """K = 1, C = 2 of N = 3: after partition 2's node leaves, only 0 and 1 start."""
    strategy = FedBuff(buffer_size=1, concurrency=2, poll_interval=1e-9)
    grid = LeavingGrid(half_way_app(), 3)
    strategy.start(grid, scalar(), num_rounds=8)
    assert sorted(strategy.node_of) == [0, 1]
    later = [r for r in strategy.records if min(r.versions) >= 1]  # sent after it left
    assert len(later) >= 5 and all(2 not in r.clients for r in later)


def test_a_reply_that_breaks_the_contract_raises() -> None:
    strategy = FedBuff(buffer_size=1, concurrency=1)
    grid = InProcessGrid(half_way_app(shape=(2,)), 1)
    with pytest.raises(ValueError, match=r"arrays shaped \[\(2,\)\], the model sent 1 shaped"):
        strategy.start(grid, scalar(), num_rounds=1)


def test_auto_is_simulated_in_process_and_wall_on_any_other_grid() -> None:
    assert resolve_clock("auto", InProcessGrid(half_way_app(), 1)) == "simulated"
    other = type("OtherGrid", (InProcessGrid,), {"delivers_in_process": False})(half_way_app(), 1)
    assert resolve_clock("auto", other) == "wall"
    assert resolve_clock("simulated", other) == "simulated"


def test_it_has_no_rounds_and_names_its_arguments() -> None:
    strategy = FedBuff(buffer_size=2, concurrency=2)
    with pytest.raises(NotImplementedError, match="no rounds"):
        strategy.configure_train(1, scalar(), None, None)  # type: ignore[arg-type]
    assert list(strategy.configure_evaluate(1, scalar(), None, None)) == []  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown argument.*fraction_train"):
        FedBuff(fraction_train=1.0)
    with pytest.raises(ValueError, match="clock: 'sometimes' is not one of"):
        FedBuff(clock="sometimes")
    assert TARGETS == {0: 4.0, 1: 8.0, 2: 16.0}


def test_an_oracle_is_given_to_fedbuff_itself_one_round_a_second() -> None:
    from fedram_flwr.availability import BernoulliClientManager
    from fedram_flwr.message_api import with_availability

    oracle = BernoulliClientManager([0.9, 0.5, 0.2], seed=4)
    strategy = FedBuff(buffer_size=1, concurrency=1, oracle=oracle)
    # t in [r - 1, r) seconds is the oracle's round r
    assert [strategy.available_at(t) for t in (0.0, 0.99, 1.0, 2.5)] == [
        oracle.draw(1),
        oracle.draw(1),
        oracle.draw(2),
        oracle.draw(3),
    ]
    with pytest.raises(ValueError, match="oracle and available_at both given"):
        FedBuff(buffer_size=1, concurrency=1, oracle=oracle, available_at=lambda t: [0])
    with pytest.raises(ValueError, match=r"asynchronous.*FedBuff\(\.\.\., oracle=oracle\)"):
        with_availability(FedBuff(buffer_size=1, concurrency=1), oracle)
