"""Round policies: which started clients' updates a round aggregates, given finish times.

Pure functions on numpy arrays, no Flower: a round driver starts the
available clients (:func:`~fedram_flwr.clock.simclock.start_round` says when each
finishes), asks :func:`apply_policy` which updates reach the aggregation, and moves its
clock on by the realised duration. Three kinds:

- ``wait-all``: every started client's update is used; the round lasts as long as its
  slowest client (FedScale without a deadline);
- ``deadline``: the updates that arrive within ``deadline_s`` seconds of the round's
  start; the round ends at the deadline, or when the last started client finishes if
  that is earlier;
- ``over-selection``: up to ceil(``over`` x ``select``) available clients start
  (:func:`over_selected`, from the ``over-selection`` stream), the first ``select`` to
  finish are used and the round ends when the ``select``-th update arrives (FedScale's
  ``tictak_client_tasks`` keeps the fastest of an over-committed cohort).

A started client whose update is not used is *dropped* (its update is lost, though it
trained) or, with ``keep_late``, *late*: its update arrives at its finish time and a
round driver delivers it in the round in which it arrives. Clients finishing at the same
time are ordered by client id, so ties resolve the same way in every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedram_flwr.rng import stream

KINDS = ("wait-all", "deadline", "over-selection")
"""The round policies, as ``time.policy.kind`` names them."""


@dataclass(frozen=True, eq=False)
class PolicyOutcome:
    """What a round policy makes of one round's started clients.

    Parameters
    ----------
    used : np.ndarray
        Client ids (ascending) whose updates this round aggregates.
    late : np.ndarray
        Client ids (ascending) whose updates arrive after the round, kept for a later one.
    late_seconds : np.ndarray
        Seconds after the round's start at which each of ``late`` arrives.
    dropped : np.ndarray
        Client ids (ascending) whose updates are lost.
    duration : float
        The round's realised seconds.
    """

    used: np.ndarray
    late: np.ndarray
    late_seconds: np.ndarray
    dropped: np.ndarray
    duration: float


def finish_order(clients: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Return the positions of ``clients`` in the order their updates arrive.

    Parameters
    ----------
    clients : np.ndarray
        Client ids, shape (n,).
    seconds : np.ndarray
        Each one's seconds from the round's start to its update's arrival, shape (n,).

    Returns
    -------
    np.ndarray
        Indices into ``clients``: by ascending seconds, ties by ascending client id.
    """
    return np.lexsort((np.asarray(clients), np.asarray(seconds, dtype=float)))


def apply_policy(
    kind: str,
    clients: np.ndarray,
    seconds: np.ndarray,
    *,
    deadline_s: float | None = None,
    select: int | None = None,
    keep_late: bool = False,
) -> PolicyOutcome:
    """Split a round's started clients into used, late and dropped ones.

    Parameters
    ----------
    kind : str
        ``wait-all``, ``deadline`` or ``over-selection``.
    clients : np.ndarray
        The client ids started, shape (n,), distinct.
    seconds : np.ndarray
        Each one's seconds from the round's start to its update's arrival
        (:attr:`~fedram_flwr.clock.speeds.CompletionTime.total`), shape (n,).
    deadline_s : float, optional
        ``deadline``: seconds after the round's start, > 0. An update arriving exactly
        at the deadline is used.
    select : int, optional
        ``over-selection``: how many updates the round uses, >= 1.
    keep_late : bool
        Whether an update not used is late (kept) rather than dropped.

    Returns
    -------
    PolicyOutcome
        ``duration``: 0 when nobody started; ``wait-all`` the slowest client's seconds;
        ``deadline`` min(deadline, slowest); ``over-selection`` the seconds of the last
        update used.

    Raises
    ------
    ValueError
        An unknown ``kind``, or its setting missing or out of range.
    """
    ids = np.asarray(clients, dtype=int).reshape(-1)
    secs = np.asarray(seconds, dtype=float).reshape(-1)
    if ids.shape != secs.shape:
        raise ValueError(f"seconds: {secs.size} values for {ids.size} clients")
    order = finish_order(ids, secs)
    slowest = float(secs.max()) if secs.size else 0.0
    if kind == "wait-all":
        n_used, duration = ids.size, slowest
    elif kind == "deadline":
        if deadline_s is None or not deadline_s > 0:
            raise ValueError(f"deadline_s: {deadline_s!r} is not a deadline > 0 (seconds)")
        n_used = int(np.count_nonzero(secs <= deadline_s))
        duration = min(float(deadline_s), slowest)
    elif kind == "over-selection":
        if select is None or select < 1:
            raise ValueError(f"select: {select!r} is not a number of updates >= 1")
        n_used = min(select, ids.size)
        duration = float(secs[order[n_used - 1]]) if n_used else 0.0
    else:
        raise ValueError(f"kind: {kind!r} is not allowed; allowed values: {', '.join(KINDS)}")
    rest = order[n_used:]
    late = rest[np.argsort(ids[rest], kind="stable")] if keep_late else rest[:0]
    dropped = rest[:0] if keep_late else rest
    return PolicyOutcome(
        used=np.sort(ids[order[:n_used]]),
        late=ids[late],
        late_seconds=secs[late],
        dropped=np.sort(ids[dropped]),
        duration=duration,
    )


def over_selected(
    available: np.ndarray, select: int, over: float, seed: int, server_round: int
) -> np.ndarray:
    """Return the clients an over-selecting round starts.

    Parameters
    ----------
    available : np.ndarray
        The available client ids, ascending.
    select : int
        The updates the round uses, >= 1.
    over : float
        The over-commitment factor, >= 1.
    seed, server_round : int
        The ``over-selection`` stream's keys.

    Returns
    -------
    np.ndarray
        ceil(``over`` x ``select``) of ``available`` (all of them when there are no
        more), drawn without replacement, ascending.
    """
    ids = np.asarray(available, dtype=int).reshape(-1)
    n = math.ceil(over * select - 1e-9)  # 1.3 x 10 is 13.000000000000002 in floats
    if ids.size <= n:
        return ids
    picked = stream("over-selection", seed, server_round).choice(ids.size, n, replace=False)
    return np.sort(ids[picked])


@dataclass(frozen=True, eq=False)
class LateUpdate:
    """A started client's update in flight after its round ended.

    Parameters
    ----------
    client : int
        Its client id.
    arrival : float
        Seconds on the clock at which it arrives.
    started_round : int
        The round whose model it was computed on.
    """

    client: int
    arrival: float
    started_round: int


def arrived(
    pending: tuple[LateUpdate, ...], round_end: float
) -> tuple[tuple[LateUpdate, ...], tuple[LateUpdate, ...]]:
    """Split late updates into those that arrive by ``round_end`` and those still out.

    Parameters
    ----------
    pending : tuple of LateUpdate
        The updates in flight.
    round_end : float
        Seconds on the clock at which the round ends.

    Returns
    -------
    tuple
        (arrived, still pending), each in client-id order.
    """
    ordered = tuple(sorted(pending, key=lambda u: u.client))
    came = tuple(u for u in ordered if u.arrival <= round_end)
    return came, tuple(u for u in ordered if u.arrival > round_end)
