"""Round policies on the wall clock (:mod:`fedram_flwr.message_api.wall`), deterministic.

The grid is scripted: each train reply is computed at the push (the ClientApp adds 1 to
every array) and handed out by the pull the test names (``delays``: pulls after the
push; ``None``: never; ``"error"``: an error reply, the node gone). The clock is the
test's: ``sleep(s)`` moves it by s, so with ``pull_interval=1`` a reply of delay d
arrives at t = d seconds after the push. No real time is read or waited.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Error, Message, MessageType
from flwr.serverapp.strategy import FedAvg

from fedram_flwr.availability import ConnectedClientManager, TraceClientManager
from fedram_flwr.clock.policy import over_selected
from fedram_flwr.message_api.wall import with_wall_clock
from tests.message_api.test_availability import StubGrid, client_app, node_id


class ScriptedGrid(StubGrid):
    """Train replies come at the pull ``delays[(round, partition)]`` says (default 0)."""

    def __init__(self, k: int, delays: dict[tuple[int, int], int | str | None]) -> None:
        super().__init__(
            client_app(), {node_id(p): {"partition-id": p, "num-partitions": k} for p in range(k)}
        )
        self.pid_of = {node_id(p): p for p in range(k)}
        self.delays, self.pulls, self.count = delays, 0, 0
        self.due: dict[str, tuple[int | None, Message]] = {}  # id -> (pull it comes, reply)

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            self.count += 1
            msg.metadata.__dict__["_message_id"] = f"m{self.count}"
            config = msg.content.config_records.get("config", ConfigRecord())
            server_round, node = config.get("server-round"), msg.metadata.dst_node_id
            self.sent.append((msg.metadata.message_type, server_round, node))
            delay = self.delays.get((server_round, self.pid_of[node]), 0)
            if delay == "error":
                reply, delay = Message(Error(code=0, reason="node gone"), reply_to=msg), 0
            else:
                reply = self.app(msg, self.contexts[node])
            self.due[f"m{self.count}"] = (None if delay is None else self.pulls + 1 + delay, reply)
            ids.append(f"m{self.count}")
        return ids

    def pull_messages(self, message_ids):
        self.pulls += 1
        ready = [i for i in message_ids if i in self.due and self.due[i][0] is not None
                 and self.due[i][0] <= self.pulls]  # fmt: skip
        return [self.due.pop(i)[1] for i in ready]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.t += seconds


class Keeping(FedAvg):
    """Flower's FedAvg that records, per round, each reply's partition and first value,
    with a core whose ``late_updates`` is ``rule`` and the model it holds as broadcast."""

    def __init__(self, rule: str | None, pid_of: dict[int, int]) -> None:
        super().__init__(fraction_evaluate=0.0)
        self.core = SimpleNamespace(late_updates=rule)
        self.pid_of, self.got, self.model = pid_of, {}, None

    def configure_train(self, server_round, arrays, config, grid):
        self.model = arrays.to_numpy_ndarrays()
        return super().configure_train(server_round, arrays, config, grid)

    def broadcast_arrays(self):
        return self.model

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        self.got[server_round] = [
            (self.pid_of[m.metadata.src_node_id],
             float(next(iter(m.content.array_records.values())).to_numpy_ndarrays()[0][0]))
            for m in replies if not m.has_error()
        ]  # fmt: skip
        return super().aggregate_train(server_round, replies)


def run(grid, strategy, oracle, rounds, clock=None, **policy):
    clock = clock or Clock()
    wrapped = with_wall_clock(
        strategy, oracle, pull_interval=1.0, now=clock.now, sleep=clock.sleep, **policy
    )
    result = wrapped.start(
        grid=grid, initial_arrays=ArrayRecord([np.zeros(2)]), num_rounds=rounds, timeout=100
    )
    return wrapped, result, {r: c.row for r, c in wrapped.clocked.items()}


def everyone(k: int) -> ConnectedClientManager:
    return ConnectedClientManager(k, seed=0, min_clients=k)


def test_a_deadline_keeps_exactly_the_replies_that_arrived_by_it() -> None:
    """Deadline 2 s: the replies of delay 0 and 2 are used (the last pull falls on the
    deadline), delay 3 and a node that never answers are dropped; the round ends at 2 s."""
    grid = ScriptedGrid(4, {(1, 1): 2, (1, 2): 3, (1, 3): None})
    strategy = Keeping(None, grid.pid_of)
    wrapped, result, rows = run(grid, strategy, everyone(4), 1, deadline_s=2.0)
    assert strategy.got[1] == [(0, 1.0), (1, 1.0)]
    row = rows[1]
    assert (row["started"], row["used"], row["late"], row["dropped"]) == (4, 2, 0, 2)
    assert row["not-used"] == [2, 3] and row["wall-round-seconds"] == 2.0
    np.testing.assert_array_equal(result.arrays.to_numpy_ndarrays()[0], [1.0, 1.0])


def test_over_selection_starts_ceil_over_k_and_uses_the_first_k() -> None:
    """select 2, over 1.5: ceil(3) of the 5 start (the simulated clock's draw); the two
    fastest by the script are used and the round stops when the second arrives."""
    started = over_selected(np.arange(5), 2, 1.5, 7, 1).tolist()
    slow, mid, fast = started
    grid = ScriptedGrid(5, {(1, slow): 9, (1, mid): 4, (1, fast): 1})
    strategy = Keeping(None, grid.pid_of)
    clock = Clock()
    wrapped, _, rows = run(grid, strategy, everyone(5), 1, clock, select=2, over=1.5, seed=7)
    assert [grid.pid_of[n] for n in grid.nodes_of(MessageType.TRAIN, 1)] == started
    assert sorted(p for p, _ in strategy.got[1]) == sorted([fast, mid])
    assert (rows[1]["started"], rows[1]["used"], rows[1]["dropped"]) == (3, 2, 1)
    assert clock.t == 4.0  # stopped at the second reply, not waiting for the third


@pytest.mark.parametrize(
    ("rule", "late_value", "dropped"), [("rebase", 2.0, 0), ("as-sent", 1.0, 0), (None, None, 1)]
)
def test_a_late_reply_reaches_the_core_in_a_later_round(rule, late_value, dropped) -> None:
    """Partition 1 misses round 1's deadline (delay 3 > 2 s) and is kept: round 1 uses
    partition 0 alone (model 0 -> 1); partition 1 is busy in round 2 (not started) and its
    reply (0 + 1, computed on model 0) arrives during round 2: re-based it is
    1 + (1 - 0) = 2, as sent 1, and a core without late updates drops it."""
    grid = ScriptedGrid(2, {(1, 1): 3})
    strategy = Keeping(rule, grid.pid_of)
    _, _, rows = run(grid, strategy, everyone(2), 2, deadline_s=2.0, late="keep")
    assert strategy.got[1] == [(0, 1.0)]
    assert rows[1]["late"] == 1 and rows[1]["not-used"] == [1]
    assert [grid.pid_of[n] for n in grid.nodes_of(MessageType.TRAIN, 2)] == [0]
    expected = [(0, 2.0)] + ([] if late_value is None else [(1, late_value)])
    assert strategy.got[2] == expected
    assert rows[2]["late-delivered"] == (0 if rule is None else 1)
    assert rows[2]["dropped"] == dropped and rows[2]["staleness"] == ([] if rule is None else [1])


def test_over_selection_surplus_kept_is_delivered_in_the_next_round() -> None:
    """select 1 of 2 started, late: keep: both replies come in round 1's first pull, the
    lower partition id's is used; the other is delivered (as sent) in round 2, never in
    the round it started in, and its node is not started in round 2."""
    grid = ScriptedGrid(2, {})
    strategy = Keeping("as-sent", grid.pid_of)
    _, _, rows = run(grid, strategy, everyone(2), 2, select=1, over=2.0, late="keep")
    assert strategy.got[1] == [(0, 1.0)]
    assert strategy.got[2] == [(0, 2.0), (1, 1.0)]
    assert rows[1]["late"] == 1 and rows[2]["late-delivered"] == 1
    assert [grid.pid_of[n] for n in grid.nodes_of(MessageType.TRAIN, 2)] == [0]


def test_a_round_with_nobody_available_ends_at_once() -> None:
    """The trace has nobody in round 2: nothing is pushed, nothing waited for."""
    trace = np.array([[1, 1], [0, 0], [1, 0]], dtype=bool)
    grid = ScriptedGrid(2, {})
    clock = Clock()
    wrapped, _, rows = run(grid, FedAvg(fraction_evaluate=0.0), TraceClientManager(trace, seed=0),
                           3, clock, deadline_s=5.0)  # fmt: skip
    assert rows[2]["started"] == 0 and rows[2]["wall-round-seconds"] == 0.0
    assert wrapped.relayed == {1: [0, 1], 2: [], 3: [0]}
    assert clock.t == 0.0  # every reply came at the first pull: no round waited


def test_a_round_whose_nodes_are_all_busy_waits_for_their_late_updates() -> None:
    """Both nodes miss round 1's deadline (2 s); round 2 starts nobody and waits, under
    the same deadline, for their updates: 0's at t = 2, 1's at t = 4 (the round's
    deadline): both delivered there, as sent, staleness 1."""
    grid = ScriptedGrid(2, {(1, 0): 3, (1, 1): 5})
    strategy = Keeping("as-sent", grid.pid_of)
    clock = Clock()
    _, _, rows = run(grid, strategy, everyone(2), 2, clock, deadline_s=2.0, late="keep")
    assert rows[1]["late"] == 2 and rows[2]["started"] == 0
    assert strategy.got[2] == [(0, 1.0), (1, 1.0)] and rows[2]["staleness"] == [1, 1]
    assert clock.t == 4.0


def test_a_node_that_never_answers_or_is_gone_is_dropped_and_the_run_goes_on() -> None:
    """Partition 1 never answers (late: keep, waited for at most 3 s after its push at
    t = 0), partition 2 is gone in round 1 (an error reply): round 1 uses partition 0,
    drops 2 and waits for 1. Round 2 (t = 2 to its deadline at 4: partition 0 answers
    last) leaves 1 out, busy, and its wait runs out at t = 4 > 3: dropped there; round 3
    starts it again. No round waits past its deadline."""
    grid = ScriptedGrid(3, {(1, 1): None, (1, 2): "error", (2, 0): 2})
    strategy = Keeping("rebase", grid.pid_of)
    clock = Clock()
    _, _, rows = run(grid, strategy, everyone(3), 3, clock, deadline_s=2.0, late="keep",
                     late_timeout=3.0)  # fmt: skip
    assert (rows[1]["used"], rows[1]["late"], rows[1]["dropped"]) == (1, 1, 1)
    assert rows[1]["not-used"] == [1, 2]
    assert (rows[2]["started"], rows[2]["used"], rows[2]["dropped"]) == (2, 2, 1)
    assert [grid.pid_of[n] for n in grid.nodes_of(MessageType.TRAIN, 3)] == [0, 1, 2]
    assert rows[3]["used"] == 3 and clock.t == 4.0


def test_it_composes_with_an_apps_own_start() -> None:
    """An app's own ``start`` runs, on the wall-clock grid: its rounds wait under the policy."""

    class OwnStart(Keeping):
        def start(self, grid, initial_arrays, num_rounds=3, timeout=3600, **kwargs):
            self.grid_seen = grid
            return super().start(grid, initial_arrays, num_rounds, timeout, **kwargs)

    grid = ScriptedGrid(2, {(1, 1): 5})
    strategy = OwnStart(None, grid.pid_of)
    wrapped, _, rows = run(grid, strategy, everyone(2), 1, deadline_s=1.0)
    assert type(strategy.grid_seen).__name__ == "WallClockGrid"
    assert strategy.got[1] == [(0, 1.0)] and rows[1]["dropped"] == 1


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="deadline_s and select"):
        with_wall_clock(FedAvg(), everyone(2), deadline_s=1.0, select=1)
    with pytest.raises(ValueError, match="late: 'later'"):
        with_wall_clock(FedAvg(), everyone(2), deadline_s=1.0, late="later")
    with pytest.raises(ValueError, match="pull_interval"):
        with_wall_clock(FedAvg(), everyone(2), deadline_s=1.0, pull_interval=0)
    assert math.isfinite(with_wall_clock(FedAvg(), everyone(2)).pull_interval)
