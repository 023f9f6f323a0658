"""A round on the simulated clock, Flower-free: what both Flower APIs' timed runs call.

The legacy engines' :class:`~fedram_flwr.engines.timed.TimedServer` and
the Message API's :class:`~fedram_flwr.message_api.timed.TimedAvailability` only turn
their wire types (a ``FitRes``, a ``Message``) into partition ids and replies, call this
module, and hand its answer back to Flower. One round, in two calls:

1. :func:`start_clients`, before the round is configured: who is available at the
   clock's time (``TimeModel.available``), less the clients still busy with a late
   update; an over-selecting round starts ceil(over x select) of them
   (:func:`~fedram_flwr.clock.policy.over_selected`). The oracle relays exactly those
   (:class:`ClockedDraws`), and the strategy configures the round as ever;
2. :func:`finish_round`, when the instructed clients have replied: when each finishes
   (:func:`~fedram_flwr.clock.simclock.start_round`), which replies the policy uses
   (:func:`~fedram_flwr.clock.policy.apply_policy`), which are late and which dropped;
   the late updates of earlier rounds that arrive by the round's end join the used ones
   when the core can take them (``Core.late_updates``: ``"rebase"``: re-based on the
   current model by the caller's ``rebase``, with :func:`rebase_arrays`; ``"as-sent"``:
   as they are; ``None``: dropped); the clock moves on by the realised duration (a round
   nobody started in lasts ``TimeModel.idle_s``), and the round's row is returned.

The state is one explicit value, :class:`TimedState` (the clock and the updates in
flight), so a round is a function of the state before it: the same seed gives the same
rounds in every engine and API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from fedram_flwr.clock.policy import LateUpdate, apply_policy, arrived, over_selected
from fedram_flwr.clock.simclock import SimulatedClock, Task, start_round
from fedram_flwr.clock.speeds import DeviceSpeeds
from fedram_flwr.scenario.time_config import RoundPolicyConfig

T = TypeVar("T")  # the caller's reply (a (proxy, FitRes) pair, a Message)

LATE_RULES = ("rebase", "as-sent", None)
"""How a core takes a late update (``Core.late_updates``); ``None``: it does not."""


class Availability(Protocol):
    """Who is available at a simulated time (:mod:`fedram_flwr.availability.timed`)."""

    def available_at(self, t: float) -> list[int]:
        """Return the client ids available at ``t`` seconds (>= 0), ascending."""
        ...


@dataclass(frozen=True)
class TimeModel:
    """What a timed run reads each round.

    Parameters
    ----------
    speeds : DeviceSpeeds
        Each client's device.
    available : Availability
        Who is available at t.
    task : Task
        One round's work.
    policy : RoundPolicyConfig
        The scenario's ``time.policy``.
    idle_s : float
        Seconds a round nobody starts in lasts, > 0.
    """

    speeds: DeviceSpeeds
    available: Availability
    task: Task
    policy: RoundPolicyConfig
    idle_s: float


@dataclass(frozen=True, eq=False)
class InFlight(Generic[T]):
    """A late update in flight.

    Parameters
    ----------
    update : LateUpdate
        Its client, arrival time and starting round.
    reply : T
        The caller's reply, as it came.
    sent : Any
        What the client was sent (the caller's; :func:`rebase_arrays` reads it).
    """

    update: LateUpdate
    reply: T
    sent: Any


@dataclass(frozen=True)
class TimedState(Generic[T]):
    """What a timed run carries from one round to the next.

    Parameters
    ----------
    clock : SimulatedClock
        The clock at the round's start.
    pending : tuple of InFlight
        The late updates in flight, in the order they were sent.
    available : int
        How many clients were available (not busy) when the current round started.
    """

    clock: SimulatedClock
    pending: tuple[InFlight[T], ...] = ()
    available: int = 0


@dataclass(frozen=True)
class TimedRound(Generic[T]):
    """What :func:`finish_round` gives.

    Parameters
    ----------
    state : TimedState
        The state after the round (the clock at its end).
    kept : list
        The replies the round aggregates: the used ones in the order given, then the
        late ones that arrived, in client-id order (re-based where the rule says so).
    row : dict
        The round's clock for its row
        (:meth:`~fedram_flwr.rundir.outputs.RoundRecorder.record_time`).
    """

    state: TimedState[T]
    kept: list[T]
    row: dict[str, Any]


class ClockedDraws:
    """An oracle's ``draw`` replaced by the clients a timed round started.

    Round r relays what the round driver set in ``rounds[r]`` (the oracle's own draw for
    a round it did not set).

    Parameters
    ----------
    original : callable
        The oracle's ``draw``: round -> partition ids.
    """

    def __init__(self, original: Callable[[int], list[int]]) -> None:
        self.original = original
        self.rounds: dict[int, list[int]] = {}

    def __call__(self, server_round: int) -> list[int]:
        """Return the partition ids round ``server_round`` relays."""
        if server_round in self.rounds:
            return list(self.rounds[server_round])
        return self.original(server_round)


def start_clients(
    time: TimeModel, state: TimedState[T], server_round: int
) -> tuple[TimedState[T], np.ndarray]:
    """Say who round ``server_round`` starts.

    Parameters
    ----------
    time : TimeModel
        The run's time model.
    state : TimedState
        The state before the round.
    server_round : int
        t, >= 1 (the ``over-selection`` stream's key).

    Returns
    -------
    tuple of (TimedState, np.ndarray)
        The state with the round's ``available`` count, and the client ids started,
        ascending: the available ones not busy with a late update (ceil(over x select)
        of them when over-selecting).
    """
    policy = time.policy
    busy = {p.update.client for p in state.pending}
    free = [c for c in time.available.available_at(state.clock.now) if c not in busy]
    started = np.asarray(free, dtype=int)
    if policy.kind == "over-selection":
        started = over_selected(started, policy.select, policy.over, state.clock.seed, server_round)
    return replace(state, available=len(free)), started


def finish_round(
    time: TimeModel,
    state: TimedState[T],
    server_round: int,
    sent: Mapping[int, Any],
    replies: Sequence[tuple[int, T]],
    *,
    late_rule: str | None,
    rebase: Callable[[T, Any], T],
) -> TimedRound[T]:
    """Apply the round policy to round ``server_round``'s replies (module docstring, 2).

    Parameters
    ----------
    time : TimeModel
        The run's time model.
    state : TimedState
        The state after :func:`start_clients`.
    server_round : int
        t, >= 1.
    sent : mapping of int to Any
        Client id -> what it was sent, for every client instructed (failed ones too).
    replies : sequence of (int, T)
        The error-free replies as they came, each beside its client id.
    late_rule : str or None
        The core's ``late_updates``: ``"rebase"``, ``"as-sent"`` or ``None``.
    rebase : callable
        ``rebase(reply, sent)``: the reply moved onto the current model (asked for
        ``"rebase"`` only).

    Returns
    -------
    TimedRound
        The state after the round, the replies it aggregates and its row.

    Raises
    ------
    ValueError
        On a ``late_rule`` not in :data:`LATE_RULES`.
    """
    if late_rule not in LATE_RULES:
        raise ValueError(f"late_updates: {late_rule!r} is not one of {LATE_RULES}")
    policy, clock = time.policy, state.clock
    ids = np.asarray(sorted(sent), dtype=int)
    timing = start_round(clock, time.speeds, ids, time.task)
    out = apply_policy(
        policy.kind,
        ids,
        timing.cost.total,
        deadline_s=policy.deadline_s,
        select=policy.select,
        keep_late=policy.late == "keep",
    )
    duration = out.duration if ids.size else time.idle_s
    used = set(out.used.tolist())
    # in arrival order, each as often as it came (RC-FL draws with replacement)
    kept = [reply for c, reply in replies if c in used]
    came, still = arrived(tuple(p.update for p in state.pending), clock.now + duration)
    came_ids, still_ids = {u.client for u in came}, {u.client for u in still}
    delivered = deliver_late(
        [p for p in state.pending if p.update.client in came_ids],
        server_round,
        late_rule=late_rule,
        rebase=rebase,
    )
    kept += delivered.kept
    staleness, refused = delivered.staleness, delivered.refused
    by_id = dict(replies)
    new = tuple(
        InFlight(LateUpdate(c, clock.now + s, server_round), by_id[c], sent[c])
        for c, s in zip(out.late.tolist(), out.late_seconds.tolist())
        if c in by_id
    )
    pending = tuple(p for p in state.pending if p.update.client in still_ids) + new
    after = TimedState(clock.next_round(duration), pending)
    row = {
        "sim-seconds": after.clock.now,
        "sim-round-seconds": duration,
        "available": state.available,
        "started": int(ids.size),
        "used": len(used),
        "late": int(out.late.size),
        "dropped": int(out.dropped.size) + refused,
        "late-delivered": len(staleness),
        "staleness": staleness,
        "not-used": sorted(out.late.tolist() + out.dropped.tolist()),
    }
    return TimedRound(after, kept, row)


@dataclass(frozen=True)
class Delivered(Generic[T]):
    """What :func:`deliver_late` makes of the late updates that arrived in a round.

    Parameters
    ----------
    kept : list
        The replies the round aggregates, in the order given (re-based where the rule
        says so).
    staleness : list of int
        Each kept one's rounds in flight.
    refused : int
        How many the core cannot take (``late_updates`` ``None``): dropped on arrival.
    """

    kept: list[T]
    staleness: list[int]
    refused: int


def deliver_late(
    came: Sequence[InFlight[T]],
    server_round: int,
    *,
    late_rule: str | None,
    rebase: Callable[[T, Any], T],
) -> Delivered[T]:
    """Hand the late updates that arrived in round ``server_round`` to the core's rule.

    One rule for every clock (:func:`finish_round`, and the wall clock's
    :func:`~fedram_flwr.clock.wall.close_round`): ``"rebase"``: each reply moved onto
    the current model by ``rebase(reply, sent)``; ``"as-sent"``: as it came; ``None``:
    dropped (counted in ``refused``).

    Parameters
    ----------
    came : sequence of InFlight
        The late updates that arrived, in the order they are handed on.
    server_round : int
        The round they arrive in (their staleness: this less their starting round).
    late_rule : str or None
        The core's ``late_updates`` (:data:`LATE_RULES`).
    rebase : callable
        ``rebase(reply, sent)`` (asked for ``"rebase"`` only).

    Returns
    -------
    Delivered
    """
    if late_rule not in LATE_RULES:
        raise ValueError(f"late_updates: {late_rule!r} is not one of {LATE_RULES}")
    if late_rule is None:
        return Delivered([], [], len(came))
    kept = [rebase(p.reply, p.sent) if late_rule == "rebase" else p.reply for p in came]
    return Delivered(kept, [server_round - p.update.started_round for p in came], 0)


def late_rule(strategy: Any) -> str | None:
    """Say how ``strategy``'s core takes a late update.

    Parameters
    ----------
    strategy : Any
        A strategy with a ``core``, or a wrapper that holds one as ``strategy`` (a
        recorder, an availability wrapper), at any depth.

    Returns
    -------
    str or None
        The core's ``late_updates`` (``None`` also without a core).
    """
    seen: set[int] = set()
    while strategy is not None and id(strategy) not in seen:
        seen.add(id(strategy))
        core = getattr(strategy, "core", None)
        if core is not None:
            return getattr(core, "late_updates", None)
        strategy = getattr(strategy, "strategy", None)
    return None


def rebase_arrays(
    reply: Sequence[np.ndarray], sent: Sequence[np.ndarray], current: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Move a late reply onto the current model: current + (reply - sent).

    A core that reads an update as (model - reply) then reads the one the client computed.

    Parameters
    ----------
    reply, sent, current : sequence of np.ndarray
        The client's arrays, what it was sent, the model now (pairwise the same shapes;
        extra arrays in any of them are left out).

    Returns
    -------
    list of np.ndarray
        One array per pair, in the reply's dtype.
    """
    return [(c + (r - s)).astype(r.dtype) for r, s, c in zip(reply, sent, current)]
