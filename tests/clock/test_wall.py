"""The wall clock's round, Flower-free (fedram_flwr/clock/wall.py): when a round stops
waiting, how long to wait before the next pull, and what a round keeps, with replies as
strings and hand-made arrivals."""

from __future__ import annotations

import math

import pytest

from fedram_flwr.clock.wall import (
    Arrivals,
    Waiting,
    WallState,
    close_round,
    next_wait,
    round_over,
    start_wall_round,
)
from fedram_flwr.scenario.time_config import RoundPolicyConfig

DEADLINE = RoundPolicyConfig(kind="deadline", deadline_s=5.0, late="keep")
OVER = RoundPolicyConfig(kind="over-selection", select=2, over=2.0)
ALL = RoundPolicyConfig()


def rebase(reply: str, sent: str) -> str:
    return f"{reply}@{sent}"


@pytest.mark.parametrize(
    ("policy", "answered", "arrived", "elapsed", "timeout", "over"),
    [
        (DEADLINE, 1, 1, 4.9, None, False),
        (DEADLINE, 1, 1, 5.0, None, True),  # the deadline itself
        (DEADLINE, 3, 2, 0.0, None, True),  # everyone answered (one with an error)
        (OVER, 2, 1, 99.0, None, False),  # one update and an error: not 2 updates yet
        (OVER, 2, 2, 0.0, None, True),
        (ALL, 2, 2, 1e6, None, False),  # waits for all ...
        (ALL, 2, 2, 10.0, 10.0, True),  # ... within the round timeout
    ],
)
def test_round_over(policy, answered, arrived, elapsed, timeout, over) -> None:
    got = round_over(
        policy, started=3, answered=answered, arrived=arrived, elapsed=elapsed, timeout=timeout
    )
    assert got is over


def test_next_wait_lands_the_last_pull_on_the_deadline() -> None:
    assert next_wait(DEADLINE, elapsed=4.5, timeout=None, interval=1.0) == 0.5
    assert next_wait(DEADLINE, elapsed=1.0, timeout=None, interval=1.0) == 1.0
    assert next_wait(ALL, elapsed=9.75, timeout=10.0, interval=1.0) == 0.25
    assert next_wait(ALL, elapsed=0.0, timeout=None, interval=0.2) == 0.2


def test_busy_clients_do_not_start_and_over_selection_draws_among_the_rest() -> None:
    state = WallState(waiting=(Waiting(1, 1, "s1", "m1"),))
    state, started = start_wall_round(ALL, state, [0, 1, 2, 3], seed=0, server_round=2)
    assert started.tolist() == [0, 2, 3] and state.available == 3
    _, started = start_wall_round(OVER, state, [0, 1, 2, 3, 4, 5], seed=0, server_round=2)
    assert len(started) == math.ceil(2.0 * 2) and 1 not in started.tolist()


def test_close_round_counts_used_late_dropped_and_delivers_late_updates() -> None:
    """Round 3 started 0, 2, 4: 0 and 4 arrived (in that order), 2 failed; client 1 (late
    since round 1) arrives, client 5 (late since round 2) expires: used [0, 4], 2 dropped,
    1 delivered re-based with staleness 2, 5 dropped."""
    state = WallState(waiting=(Waiting(1, 1, "s1", "m1"), Waiting(5, 2, "s5", "m5")),
                      available=4)  # fmt: skip
    sent = {0: ("s0", "a"), 2: ("s2", "b"), 4: ("s4", "c")}
    seen = Arrivals([(0, "r0"), (4, "r4")], failed=[2], late=[(1, "r1")], expired=[5])
    out = close_round(DEADLINE, state, 3, sent, seen, late_rule="rebase", rebase=rebase)
    assert out.kept == ["r0", "r4", "r1@s1"]
    assert out.row == {"available": 4, "started": 3, "used": 2, "late": 0, "dropped": 2,
                       "late-delivered": 1, "staleness": [2], "not-used": [2]}  # fmt: skip
    assert out.state.waiting == () and out.state.held == ()


def test_a_silent_client_is_waited_for_with_keep_and_dropped_without() -> None:
    sent = {0: ("s0", "a"), 1: ("s1", "b")}
    seen = Arrivals([(0, "r0")])
    kept = close_round(DEADLINE, WallState(), 1, sent, seen, late_rule=None, rebase=rebase)
    assert kept.state.waiting == (Waiting(1, 1, "s1", "b"),) and kept.row["late"] == 1
    dropping = RoundPolicyConfig(kind="deadline", deadline_s=5.0)
    out = close_round(dropping, WallState(), 1, sent, seen, late_rule=None, rebase=rebase)
    assert out.state.waiting == () and (out.row["late"], out.row["dropped"]) == (0, 1)
