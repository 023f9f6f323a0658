"""The Message API on the wall clock: deadlines, over-selection and late updates on real nodes.

:func:`with_wall_clock` wraps any Message-API strategy, unchanged, in
:class:`WallClockAvailability`: :class:`~fedram_flwr.message_api.availability.
AvailabilityStrategy` (the oracle decides who is available in round r, the ``connected``
oracle included: a deployment's real availability) whose rounds wait for real replies
under a round policy, the Flower-free :mod:`fedram_flwr.clock.wall`:

- **Who starts.** The round's available nodes less those still busy with a late update;
  an over-selecting round starts ceil(over x select) of them (the simulated clock's
  draw). The strategy configures the round on them as ever; what each node is sent is
  kept (for the re-basing).
- **How long the round waits.** The wrapper runs the strategy's own ``start`` (Flower's
  loop, or an app's override) on a view of the grid (:class:`WallClockGrid`) whose
  ``send_and_receive`` of a train round pushes the messages with
  ``grid.push_messages`` and pulls replies with ``grid.pull_messages``
  (:class:`~fedram_flwr.message_api.flight.MessageFlight`, FedBuff's too) every
  ``pull_interval`` seconds until the policy says stop
  (:func:`~fedram_flwr.clock.wall.round_over`): ``deadline``: ``deadline_s`` seconds
  after the push; ``over-selection``: ``select`` updates arrived; ``wait-all`` and every
  kind: every started node answered, or ``start``'s ``timeout``. Its other messages (the
  evaluation, the partition-id query) go to the grid unchanged.
- **What the round aggregates.** :func:`~fedram_flwr.clock.wall.close_round`: the
  replies that arrived (the first ``select`` for over-selection), then the late updates
  of earlier rounds that came meanwhile, handed to the core by the simulated clock's
  rule (``late_updates``: ``"rebase"``: re-based on the current model; ``"as-sent"``:
  as they came, FedAWE; ``None``: dropped). With ``late: drop`` a node not used is
  dropped: its message is left to its time to live, a reply it still sends never pulled
  (Flower cannot cancel a pulled message). With ``late: keep`` its reply is pulled in the
  following rounds, at most ``late_timeout`` s after the push (default: ``start``'s
  ``timeout``); until then the node is not started again.
- **Bounded waits.** A round nobody starts in ends at once, unless late updates are in
  flight: then it waits for them under the same policy (a run whose nodes all missed a
  deadline does not race through empty rounds); a node that never answers is late or
  dropped at the round's end and never waited for past ``late_timeout``; a node that
  left (an error reply: Flower's ``NODE_UNAVAILABLE``) is dropped and the run goes on.

Each round's counts (``available``, ``started``, ``used``, ``late``, ``dropped``,
``late-delivered``, ``staleness``, ``not-used``: the simulated clock's keys) and its
seconds (``wall-seconds`` since the first round's push, ``wall-round-seconds`` the
round's wait) wait in :attr:`WallClockAvailability.clocked` for the recorder
(:class:`~fedram_flwr.engines.message_recording.MessageRecordingStrategy`), as
:class:`~fedram_flwr.message_api.timed.TimedAvailability`'s do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedram_flwr.availability.manager import OracleClientManager
from fedram_flwr.clock.rounds import late_rule
from fedram_flwr.clock.wall import (
    Arrivals,
    WallState,
    close_round,
    next_wait,
    round_over,
    start_wall_round,
)
from fedram_flwr.message_api.availability import AvailabilityStrategy
from fedram_flwr.message_api.flight import MessageFlight
from fedram_flwr.message_api.timed import ClockedRound, array_record, rebaser
from fedram_flwr.scenario.time_config import RoundPolicyConfig

__all__ = ["WallClockAvailability", "WallClockGrid", "with_wall_clock"]


@dataclass
class Seen:
    """What one train round's wait saw (:meth:`WallClockAvailability.train_round`)."""

    arrivals: Arrivals[Message] = field(default_factory=Arrivals)
    errors: list[Message] = field(default_factory=list)
    refs: dict[int, str | None] = field(default_factory=dict)  # partition -> message id
    round_seconds: float = 0.0
    wall_seconds: float = 0.0


class WallClockGrid(Grid):
    """The grid a wall-clock round's strategy runs on.

    The real one, but a train round's ``send_and_receive`` is
    :meth:`WallClockAvailability.train_round`.
    """

    def __init__(self, grid: Grid, owner: WallClockAvailability) -> None:
        self.grid, self.owner = grid, owner

    def send_and_receive(self, messages: Iterable[Message], **kwargs: Any) -> Iterable[Message]:
        """Send a configured train round under the policy, anything else through the grid."""
        messages = list(messages)
        train = all(m.metadata.message_type == MessageType.TRAIN for m in messages)
        if self.owner.configured is not None and train:
            return self.owner.train_round(self.grid, messages, kwargs.get("timeout"))
        return self.grid.send_and_receive(messages, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        """Return the real grid's nodes."""
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Push through the real grid."""
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Pull through the real grid."""
        return self.grid.pull_messages(message_ids)

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        """Create a message on the real grid."""
        return self.grid.create_message(*args, **kwargs)

    def set_run(self, run: Any) -> None:
        """Set the real grid's run."""
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        """The real grid's run."""
        return self.grid.run


class WallClockAvailability(AvailabilityStrategy):
    """An availability wrapper whose rounds run on the wall clock (module docstring).

    Parameters
    ----------
    strategy : Strategy
        Any Message-API strategy (late updates reach only a core's, per its
        ``late_updates``).
    oracle : OracleClientManager
        Who is available in round r (the ``connected`` oracle: who is connected).
    policy : RoundPolicyConfig
        The round policy (``deadline_s`` in wall seconds).
    seed : int
        Keys the over-selection draws.
    pull_interval : float
        Seconds between two pulls while a round waits, > 0.
    late_timeout : float, optional
        Seconds after its push a late reply is waited for (default: ``start``'s
        ``timeout``), > 0.
    now, sleep : callable
        The clock read and the wait (``time.monotonic``, ``time.sleep``; tests give
        their own).
    **settings : float
        ``wait_timeout``, ``query_timeout``, ``poll_interval``, ``max_failed_rounds`` of
        :class:`~fedram_flwr.message_api.availability.AvailabilityStrategy`.

    Attributes
    ----------
    clocked : dict of int to ClockedRound
        Round -> what it aggregated and its row, until the recorder takes it.
    """

    def __init__(
        self,
        strategy: Strategy,
        oracle: OracleClientManager,
        policy: RoundPolicyConfig,
        *,
        seed: int = 0,
        pull_interval: float = 0.2,
        late_timeout: float | None = None,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        **settings: float,
    ) -> None:
        super().__init__(strategy, oracle, **settings)
        for name, value in (("pull_interval", pull_interval), ("late_timeout", late_timeout)):
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"{name}: {value!r} must be a number of seconds > 0")
        self.policy, self.seed = policy, int(seed)
        self.pull_interval, self.late_timeout = float(pull_interval), late_timeout
        self.now, self.sleep = now, sleep
        self.wall: WallState[Message] = WallState()
        self.sent: dict[int, ArrayRecord] = {}  # partition -> its arrays, this round
        self.flight: MessageFlight[tuple[int, int]] | None = None  # (partition, round)
        self.seen: dict[int, Seen] = {}
        self.clocked: dict[int, ClockedRound] = {}
        self.configured: int | None = None  # the train round configured, not sent yet
        self.began: float | None = None  # the first round's push

    def summary(self) -> None:
        """Log the wrapped strategy's summary, the oracle and the round policy."""
        super().summary()
        p = self.policy
        what = {"deadline": f"deadline {p.deadline_s} s", "wait-all": "wait for all",
                "over-selection": f"first {p.select} of ceil({p.over} x {p.select})"}  # fmt: skip
        log(INFO, "\t└──> Wall clock: %s, late updates %s", what[p.kind], p.late)

    def run_grid(self, grid: Grid) -> WallClockGrid:
        """Return the grid a run's loop sends on (a recorder calls it, as ``start`` does).

        A new run starts afresh: no update in flight, the clock at its first push.
        """
        if isinstance(grid, WallClockGrid):
            return grid
        self.wall, self.flight, self.began, self.seen = WallState(), None, None, {}
        return WallClockGrid(grid, self)

    def start(self, grid: Grid, initial_arrays: ArrayRecord, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped strategy's own ``start`` on :meth:`run_grid`.

        As :meth:`~fedram_flwr.message_api.availability.AvailabilityStrategy.start`.
        """
        return super().start(self.run_grid(grid), initial_arrays, *args, **kwargs)

    # ---------------------------------------------------------------- the round
    def available_nodes(self, server_round: int, grid: Grid) -> list[int]:
        """Return the round's available nodes less the busy ones (over-selection: a draw)."""
        if self._round is not None and self._round[0] == server_round:
            return list(self._round[1])
        nodes = super().available_nodes(server_round, grid)
        pids = self.relayed[server_round]
        self.wall, started = start_wall_round(self.policy, self.wall, pids, self.seed, server_round)
        chosen = set(started.tolist())
        picked = [(p, n) for p, n in zip(pids, nodes) if p in chosen]
        self.relayed[server_round] = [p for p, _ in picked]
        self.oracle.last_active = list(self.relayed[server_round])
        self._round = (server_round, [n for _, n in picked])
        return list(self._round[1])

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Configure the round on the nodes it starts; its send waits under the policy.

        Arguments as for Flower's ``Strategy.configure_train``.
        """
        messages = list(super().configure_train(server_round, arrays, config, grid))
        where = self.partition_of
        self.sent = {where[m.metadata.dst_node_id]: array_record(m) for m in messages}
        self.configured = server_round
        return messages

    def train_round(
        self, grid: Grid, messages: list[Message], timeout: float | None
    ) -> list[Message]:
        """Push the round's messages and pull until the policy stops waiting.

        Returns every reply pulled (this round's, then the late ones that came).
        """
        server_round, self.configured = self.configured, None
        where = self.partition_of
        if self.flight is None or self.flight.grid is not grid:  # a run's first round
            ttl = self.late_timeout or timeout or math.inf
            self.flight = MessageFlight(grid, ttl=ttl, now=self.now)
        start = self.now()
        self.began = start if self.began is None else self.began
        keys = [(where[m.metadata.dst_node_id], server_round) for m in messages]
        pushed = dict(self.flight.push(messages, keys))
        seen = Seen(refs={pid: pushed.get((pid, r)) for pid, r in keys})
        failed = [pid for pid, r in keys if (pid, r) not in pushed]  # the grid refused it
        mine = {pid for pid, r in keys if (pid, r) in pushed}  # not answered yet
        waited = {w.client for w in self.wall.waiting}
        busy = len(waited)
        replies: list[tuple[int, Message]] = []
        late: list[tuple[int, Message]] = []
        expired: list[int] = []
        while True:
            got, ran_out = self.flight.pull()
            for (pid, r), m in sorted(got, key=lambda pair: pair[0][0]):
                if r == server_round and pid in mine:
                    mine.discard(pid)
                    if m.has_error():
                        seen.errors.append(m)
                        failed.append(pid)
                    else:
                        replies.append((pid, m))
                elif pid in waited and m.has_error():  # a late node that left: lost
                    waited.discard(pid)
                    expired.append(pid)
                elif pid in waited:
                    waited.discard(pid)
                    late.append((pid, m))
            for pid, r in ran_out:
                if r == server_round and pid in mine:  # waited for past the ttl already
                    mine.discard(pid)
                    failed.append(pid)
                elif pid in waited:
                    waited.discard(pid)
                    expired.append(pid)
            t = self.now()
            n, out, came = len(messages), len(mine), len(replies)
            if not messages and busy:  # every available node busy: wait for their updates
                n, out, came = busy, len(waited), len(late)
            if round_over(self.policy, started=n, answered=n - out, arrived=came,
                          elapsed=t - start, timeout=timeout):  # fmt: skip
                break
            self.sleep(next_wait(self.policy, elapsed=t - start, timeout=timeout,
                                 interval=self.pull_interval))  # fmt: skip
        seen.arrivals = Arrivals(replies, failed, late, expired)
        seen.round_seconds, seen.wall_seconds = t - start, t - self.began
        self.seen[server_round] = seen
        return [m for _, m in replies] + seen.errors + [m for _, m in late]

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> Any:
        """Aggregate what the round policy keeps (module docstring).

        Arguments and result as for Flower's ``Strategy.aggregate_train``.
        """
        replies = list(replies)
        seen = self.seen.pop(server_round, None)
        if seen is None:  # sent past the wall-clock grid: every reply arrived in time
            where = self.partition_of
            ok = [(where[m.metadata.src_node_id], m) for m in replies if not m.has_error()]
            seen = Seen(Arrivals(ok), [m for m in replies if m.has_error()])
        out = close_round(
            self.policy,
            self.wall,
            server_round,
            {p: (arrays, seen.refs.get(p)) for p, arrays in self.sent.items()},
            seen.arrivals,
            late_rule=late_rule(self.strategy),
            rebase=rebaser(self.strategy),
        )
        self.wall, self.sent = out.state, {}
        if self.flight is not None:  # a reply not waited for is never pulled
            live = {w.ref for w in out.state.waiting}
            self.flight.forget([i for i in self.flight.sent if i not in live])
        row = {**out.row, "wall-seconds": seen.wall_seconds,
               "wall-round-seconds": seen.round_seconds}  # fmt: skip
        self.clocked[server_round] = ClockedRound(out.kept + seen.errors, row)
        return super().aggregate_train(server_round, out.kept + seen.errors)


def with_wall_clock(
    strategy: Strategy,
    oracle: OracleClientManager,
    *,
    deadline_s: float | None = None,
    select: int | None = None,
    over: float = 1.0,
    late: str = "drop",
    seed: int = 0,
    **settings: Any,
) -> WallClockAvailability:
    """Wrap ``strategy`` so that its rounds end at a wall-clock deadline or at the first K.

    Parameters
    ----------
    strategy : Strategy
        Any Message-API strategy, unchanged (its own ``start`` runs).
    oracle : OracleClientManager
        Who is available in each round (``ConnectedClientManager``: who is connected).
    deadline_s : float, optional
        A round aggregates what arrived within this many seconds of its push, > 0.
    select : int, optional
        Over-selection: a round uses the first ``select`` updates to arrive (not with
        ``deadline_s``), >= 1.
    over : float
        Over-selection: ceil(``over`` x ``select``) nodes start, >= 1.
    late : str
        ``drop`` (a reply not used is lost) or ``keep`` (pulled in later rounds and
        handed to the cores that take late updates).
    seed : int
        Keys the over-selection draws.
    **settings : Any
        ``pull_interval``, ``late_timeout``, ``now``, ``sleep`` of
        :class:`WallClockAvailability`, and ``wait_timeout``, ``query_timeout``,
        ``poll_interval``, ``max_failed_rounds`` of
        :class:`~fedram_flwr.message_api.availability.AvailabilityStrategy`. Neither
        ``deadline_s`` nor ``select``: every round waits for all (up to ``timeout``).

    Returns
    -------
    WallClockAvailability

    Raises
    ------
    ValueError
        On both ``deadline_s`` and ``select``, or ``late`` not ``drop`` or ``keep``.
    """
    if deadline_s is not None and select is not None:
        raise ValueError("deadline_s and select: give one (a deadline, or over-selection)")
    if late not in ("drop", "keep"):
        raise ValueError(f"late: {late!r} is not allowed; allowed values: drop, keep")
    kind = "deadline" if deadline_s is not None else "wait-all"
    kind = "over-selection" if select is not None else kind
    extra = {} if kind == "wait-all" else {"late": late}
    if kind == "wait-all" and late != "drop":
        raise ValueError("late: applies to a deadline or over-selection; give deadline_s or select")
    policy = RoundPolicyConfig(
        kind=kind,  # type: ignore[arg-type]
        deadline_s=deadline_s,
        select=select,
        over=over,
        **extra,
    )
    return WallClockAvailability(strategy, oracle, policy, seed=seed, **settings)
