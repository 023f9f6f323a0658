"""The one round driver (strategies/round_driver.py), alone, on hand-made replies: the
guard's counts, partition-id order, the rounds elapsed, the kept subset and the
refusals, with a core that records what it is handed (no Flower type anywhere)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from fedram_flwr.protocol import PARTITION_ID, ClientReply
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.hyper import hyper
from fedram_flwr.strategies.participation import FedAvgSampledCore
from fedram_flwr.strategies.round_driver import (
    Received,
    RoundPolicy,
    RoundState,
    drive_round,
    screen_round,
)
from fedram_flwr.strategies.rounds import FailedRounds, FailedRoundsError


@dataclass(frozen=True)
class Recording(Core[tuple]):
    """A core whose state is the tuple of (round, partition ids, elapsed) it aggregated;
    ``keep``: the positions :meth:`kept` gives (``None``: all)."""

    num_clients: int | None = hyper(4, doc="N (None: any id >= 0)")
    keep: tuple[int, ...] | None = hyper(None, doc="the kept positions (None: all)")

    def aggregate(self, state, server_round, replies, elapsed) -> Outcome[tuple]:
        seen = (server_round, [r.partition_id for r in replies], elapsed)
        return Outcome((*state, seen), {"count": len(replies)}, aggregated=bool(replies))

    def kept(self, server_round, replies):
        return range(len(replies)) if self.keep is None else self.keep


def arrived(pid: Any, value: float = 1.0, **metrics: Any) -> Received[str]:
    """A reply of client ``pid`` (its source: the string "from <pid>")."""
    arrays = [np.full(2, value, np.float32)]
    return Received(
        f"from {pid}", f"client {pid}", pid, {PARTITION_ID: pid, **metrics}, lambda: arrays
    )


def to_reply(received: Received[str]) -> ClientReply:
    return ClientReply(received.partition_id, 1, received.metrics, received.decode)


def one_round(
    core: Recording,
    server_round: int,
    received: list[Received[str]],
    failures: list[str] = (),
    rounds: RoundState = RoundState(),
    state: tuple = (),
    accept_failures: bool = True,
    chosen_before_training: bool = True,
    warn=None,
):
    return drive_round(
        core,
        state,
        server_round,
        received,
        list(failures),
        rounds,
        RoundPolicy(accept_failures),
        reply_of=to_reply,
        strategy="Recording",
        chosen_before_training=chosen_before_training,
        **({} if warn is None else {"warn": warn}),
    )


def test_replies_reach_the_core_in_partition_order_with_their_sources() -> None:
    result = one_round(Recording(), 1, [arrived(2), arrived(0), arrived(3), arrived(1)])
    assert result.outcome.state == ((1, [0, 1, 2, 3], 1),)
    assert [source for source, _ in result.kept] == ["from 0", "from 1", "from 2", "from 3"]
    assert result.moved and result.outcome.diagnostics == {"count": 4}


def test_elapsed_counts_the_rounds_since_the_last_aggregation() -> None:
    """Rounds 2..4 reached no aggregation (nobody, or skipped by Flower): round 5's
    core is told 5 - 1 = 4 rounds elapsed."""
    first = one_round(Recording(), 1, [arrived(0)])
    assert first.rounds.last_round == 1
    later = one_round(Recording(), 5, [arrived(1)], rounds=first.rounds)
    assert later.outcome.state == ((5, [1], 4),) and later.rounds.last_round == 5


def test_a_failure_without_accept_failures_cancels_the_round_and_keeps_every_state() -> None:
    rounds = RoundState(FailedRounds(limit=3), last_round=2)
    result = one_round(
        Recording(), 3, [arrived(0)], ["client x: lost"], rounds, ("old",), accept_failures=False
    )
    assert result.outcome is None and not result.moved and result.kept == []
    assert result.rounds.last_round == 2  # the round counts as skipped
    assert result.rounds.guard.streak == 1 and result.rounds.guard.first_error == "client x: lost"
    again = one_round(Recording(), 4, [arrived(0)], rounds=result.rounds, state=("old",))
    assert again.outcome.state == ("old", (4, [0], 2))  # elapsed: rounds 3 and 4
    assert again.rounds.guard.streak == 0


def test_with_accept_failures_the_replies_there_are_aggregate() -> None:
    result = one_round(Recording(), 1, [arrived(1)], ["client x: lost"])
    assert result.outcome.state == ((1, [1], 1),) and result.rounds.guard.streak == 0


def test_refused_replies_are_named_counted_and_never_aggregated() -> None:
    lines: list[str] = []
    received = [arrived(0), arrived(1), arrived(1), arrived(2, np.nan), arrived(4)]
    result = one_round(Recording(num_clients=4), 1, received, warn=lines.append)
    assert result.outcome.state == ((1, [0], 1),)
    assert [line.split(": ", 2)[1] for line in lines] == [
        "Recording refused client 1",
        "Recording refused client 1",
        "Recording refused client 2",
        "Recording refused client 4",
    ]
    assert "partition id 4 is outside 0..3" in lines[-1]


def test_rounds_that_aggregate_nothing_stop_the_run_at_the_limit() -> None:
    """Rounds 1 and 3 fail, round 2 selects nobody (no count), round 4 fails: stop."""
    lines: list[str] = []
    core, rounds = Recording(), RoundState(FailedRounds(limit=3))
    for server_round, received, failures in (
        (1, [], ["client 7: to_xy is missing"]),
        (2, [], []),
        (3, [arrived(0, np.inf)], []),
    ):
        rounds = one_round(core, server_round, received, failures, rounds, warn=lines.append).rounds
    assert rounds.guard.streak == 2 and len(lines) == 3  # 2 failed rounds, 1 refusal
    with pytest.raises(FailedRoundsError, match=r"\(1..4\).*'client 7: to_xy is missing'"):
        one_round(core, 4, [], ["client 7: again"], rounds)


def test_the_kept_subset_applies_only_when_nobody_chose_the_trainers_before() -> None:
    core = Recording(keep=(0, 2))
    received = [arrived(3), arrived(1), arrived(0)]
    assert one_round(core, 1, received).outcome.state == ((1, [0, 1, 3], 1),)
    unchosen = one_round(core, 1, received, chosen_before_training=False)
    assert unchosen.outcome.state == ((1, [0, 3], 1),)
    assert [source for source, _ in unchosen.kept] == ["from 0", "from 3"]


def test_fedavg_s_keeps_its_seeded_subset_of_the_replies() -> None:
    core = FedAvgSampledCore(num_clients=6, lr=0.1, max_clients=2, seed=3)
    replies = [ClientReply(k, 1, {}, list) for k in range(5)]
    assert list(core.kept(7, replies)) == core.select(5, 7).tolist()
    assert len(core.kept(7, replies)) == 2


def test_screen_round_alone_returns_the_taken_replies_and_the_guard() -> None:
    """What with_availability and q-FFL use: the screen without an algorithm."""
    policy = RoundPolicy(accept_failures=False)
    screened = screen_round(
        [arrived(0), arrived(0)],
        ["client 5: lost"],
        FailedRounds(),
        1,
        num_clients=None,
        policy=policy,
        strategy="Any",
    )
    assert screened.taken == [] and len(screened.failures) == 3
    assert screened.cancelled(policy) and screened.guard.streak == 1
