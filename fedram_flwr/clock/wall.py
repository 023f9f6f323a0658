"""A round on the wall clock, Flower-free: what arrived by the deadline, the first K.

On the simulated clock (:mod:`fedram_flwr.clock.rounds`) the server computes when each
client finishes; on the wall clock it waits for real replies, so the round policy reads
what *did* arrive. A caller (the Message API's
:class:`~fedram_flwr.message_api.wall.WallClockAvailability`) pushes the round's
messages and pulls replies, and asks this module three things:

1. :func:`start_wall_round`: who starts among the available clients: those not busy
   with a late update; an over-selecting round ceil(over x select) of them
   (:func:`~fedram_flwr.clock.policy.over_selected`, the simulated clock's draw);
2. :func:`round_over`, after each pull: whether the round stops waiting: every started
   client answered; ``over-selection``: ``select`` updates arrived; ``deadline``:
   ``deadline_s`` seconds passed; and always the caller's ``timeout``
   (:func:`next_wait`: how long until the next pull, the last one on the deadline);
3. :func:`close_round`, when it stops: the updates used (``deadline`` and ``wait-all``:
   every one that arrived; ``over-selection``: the first ``select``, in arrival order),
   the late and dropped clients, and the late updates of earlier rounds that arrived
   meanwhile, handed to the core by the simulated clock's own rule
   (:func:`~fedram_flwr.clock.rounds.deliver_late`: re-based, as sent, or dropped). A
   client with ``late: keep`` whose update did not come by the end stays *waiting*
   (busy, not started again) until it comes or its wait runs out (*expired*: counted
   dropped in the round it expires in); an update that came in its own round but was
   not used (over-selection's surplus) is delivered in the next round, never in the
   round it started in, as on the simulated clock. A started client whose reply is an
   error (the node left, the ClientApp raised) is dropped.

The state is one explicit value, :class:`WallState`; the caller gives the times and
replies, so a round is a function of what arrived (tests need no clock).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from fedram_flwr.clock.policy import LateUpdate, over_selected
from fedram_flwr.clock.rounds import InFlight, deliver_late
from fedram_flwr.scenario.time_config import RoundPolicyConfig

T = TypeVar("T")  # the caller's reply (a Message)


@dataclass(frozen=True)
class Waiting:
    """A late client whose update has not come yet.

    Parameters
    ----------
    client : int
        Its client id.
    started_round : int
        The round it was started in.
    sent : Any
        What it was sent (the caller's; the re-basing reads it).
    ref : Any
        The caller's handle on it (a message id).
    """

    client: int
    started_round: int
    sent: Any
    ref: Any


@dataclass(frozen=True)
class WallState(Generic[T]):
    """What a wall-clock run carries from one round to the next.

    Parameters
    ----------
    waiting : tuple of Waiting
        Late clients whose update has not come yet, in the order they were started.
    held : tuple of InFlight
        Updates that came after their round's end (or unused in it), to deliver in the
        next round.
    available : int
        How many clients were available (not busy) when the current round started.
    """

    waiting: tuple[Waiting, ...] = ()
    held: tuple[InFlight[T], ...] = ()
    available: int = 0

    @property
    def busy(self) -> set[int]:
        """Return the clients not started again yet.

        Those waited for, and those whose update came but is delivered in the next round
        (a round never holds two updates of one client).
        """
        return {w.client for w in self.waiting} | {p.update.client for p in self.held}


@dataclass(frozen=True)
class Arrivals(Generic[T]):
    """What a caller saw while one round waited.

    Parameters
    ----------
    replies : sequence of (int, T)
        This round's error-free replies, each beside its client id, in arrival order
        (one pull's replies in client-id order).
    failed : iterable of int
        Started clients whose reply was an error.
    late : sequence of (int, T)
        Replies of waited-for clients of earlier rounds that came while it waited.
    expired : iterable of int
        Waited-for clients whose wait ran out while it waited.
    """

    replies: Sequence[tuple[int, T]] = ()
    failed: Iterable[int] = ()
    late: Sequence[tuple[int, T]] = ()
    expired: Iterable[int] = ()


@dataclass(frozen=True)
class WallRound(Generic[T]):
    """What :func:`close_round` gives.

    Parameters
    ----------
    state : WallState
        The state after the round.
    kept : list
        The replies the round aggregates: the used ones in arrival order, then the late
        ones delivered (re-based where the rule says so).
    row : dict
        The round's counts for its row (the simulated clock's keys, less its seconds).
    """

    state: WallState[T]
    kept: list[T]
    row: dict[str, Any] = field(default_factory=dict)


def start_wall_round(
    policy: RoundPolicyConfig,
    state: WallState[T],
    available: Iterable[int],
    seed: int,
    server_round: int,
) -> tuple[WallState[T], np.ndarray]:
    """Say who round ``server_round`` starts among the ``available`` client ids.

    Returns
    -------
    tuple of (WallState, np.ndarray)
        The state with the round's ``available`` count (the clients not busy), and the
        client ids started, ascending (ceil(over x select) of them when over-selecting,
        drawn from the ``over-selection`` stream keyed by (seed, round)).
    """
    busy = state.busy
    free = np.asarray(sorted(c for c in available if c not in busy), dtype=int)
    started = free
    if policy.kind == "over-selection":
        started = over_selected(free, policy.select, policy.over, seed, server_round)
    return WallState(state.waiting, state.held, int(free.size)), started


def round_over(
    policy: RoundPolicyConfig,
    *,
    started: int,
    answered: int,
    arrived: int,
    elapsed: float,
    timeout: float | None,
) -> bool:
    """Whether a round on the wall clock stops waiting (module docstring, 2).

    Parameters
    ----------
    policy : RoundPolicyConfig
        The round policy.
    started : int
        Clients started.
    answered : int
        Of them, those whose reply came (error or not).
    arrived : int
        Of them, those whose update came without error.
    elapsed : float
        Seconds since the round's messages were pushed.
    timeout : float or None
        The caller's bound on any round's wait (``None``: none).
    """
    if answered >= started or (timeout is not None and elapsed >= timeout):
        return True
    if policy.kind == "over-selection":
        return arrived >= int(policy.select or 0)
    if policy.kind == "deadline":
        return elapsed >= float(policy.deadline_s or 0.0)
    return False


def next_wait(
    policy: RoundPolicyConfig, *, elapsed: float, timeout: float | None, interval: float
) -> float:
    """Return the seconds to wait before the next pull, >= 0.

    ``interval``, cut so that the last pull falls on the deadline (or the ``timeout``)
    itself.
    """
    ends = [timeout] if timeout is not None else []
    if policy.kind == "deadline":
        ends.append(float(policy.deadline_s or 0.0))
    return max(0.0, min([interval, *(end - elapsed for end in ends)]))


def close_round(
    policy: RoundPolicyConfig,
    state: WallState[T],
    server_round: int,
    sent: Mapping[int, tuple[Any, Any]],
    seen: Arrivals[T],
    *,
    late_rule: str | None,
    rebase: Callable[[T, Any], T],
) -> WallRound[T]:
    """Apply the round policy to what round ``server_round`` saw (module docstring, 3).

    Parameters
    ----------
    policy : RoundPolicyConfig
        The round policy.
    state : WallState
        The state after :func:`start_wall_round`.
    server_round : int
        t, >= 1.
    sent : mapping of int to (Any, Any)
        Client id -> (what it was sent, the caller's handle on its message), for every
        client started.
    seen : Arrivals
        What arrived while the round waited.
    late_rule : str or None
        The core's ``late_updates`` (:data:`~fedram_flwr.clock.rounds.LATE_RULES`).
    rebase : callable
        ``rebase(reply, sent)``: the reply moved onto the current model.

    Returns
    -------
    WallRound
    """
    keep_late = policy.late == "keep"
    replies = [(c, r) for c, r in seen.replies if c in sent]
    n_used = len(replies)
    if policy.kind == "over-selection":
        n_used = min(n_used, int(policy.select or 0))
    used, surplus = replies[:n_used], replies[n_used:]
    failed = set(seen.failed) & set(sent)
    answered = {c for c, _ in replies} | failed
    silent = [c for c in sorted(sent) if c not in answered]
    # the late updates that arrive in this round: those held from the last, those waited for
    came_late = {c for c, _ in seen.late}
    arriving = list(state.held) + [
        InFlight(LateUpdate(w.client, 0.0, w.started_round), reply, w.sent)
        for w in state.waiting
        for c, reply in seen.late
        if c == w.client
    ]
    delivered = deliver_late(arriving, server_round, late_rule=late_rule, rebase=rebase)
    expired, waited = set(seen.expired), {w.client for w in state.waiting}
    waiting = tuple(w for w in state.waiting if w.client not in came_late | expired)
    held: tuple[InFlight[T], ...] = ()
    late = []
    if keep_late:
        held = tuple(InFlight(LateUpdate(c, 0.0, server_round), r, sent[c][0]) for c, r in surplus)
        waiting += tuple(Waiting(c, server_round, *sent[c]) for c in silent)
        late = sorted([c for c, _ in surplus] + silent)
    dropped = sorted(failed | (set() if keep_late else {c for c, _ in surplus} | set(silent)))
    row = {
        "available": state.available,
        "started": len(sent),
        "used": len(used),
        "late": len(late),
        "dropped": len(dropped) + delivered.refused + len(expired & waited),
        "late-delivered": len(delivered.staleness),
        "staleness": delivered.staleness,
        "not-used": sorted(late + dropped),
    }
    kept = [r for _, r in used] + delivered.kept
    return WallRound(WallState(waiting, held, 0), kept, row)
