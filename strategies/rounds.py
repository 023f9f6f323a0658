"""The round policy's checks, Flower-free: reply refusals and the failed-rounds guard.

What both Flower faces of every strategy (the legacy adapters of
:mod:`~fedram_flwr.strategies.base`, the Message-API ones of
:mod:`fedram_flwr.message_api`, ``with_availability`` around any strategy) apply to a
round's replies before an algorithm core sees them, and to the round once it is over.

- :func:`refusals`: why a reply is no update an algorithm may aggregate. A partition id
  that is not an integer, lies outside 0..N-1 (id -1 would index the last client of a
  per-client memory) or is carried by more than one reply of the round (a duplicated
  reply would count twice; which of them is right cannot be told, so none is kept);
  a non-finite number (NaN, inf) in the reply's metrics (m_i, F_k(w_t), t, ...) or
  arrays. A refused reply is a failure of its client: named in the log, never
  aggregated, counted by the guard below.
- :class:`FailedRounds` and :func:`after_round`: a round in which clients failed and
  no update was aggregated (every selected client failed, or ``accept_failures`` is off
  and one did) is reported each time (:func:`failed_round_line`: the round, the number
  of failures, the first error quoted); ``limit`` such rounds in a row stop the run with
  :class:`FailedRoundsError`. A round in which nobody was selected (no one available)
  neither counts nor breaks the streak; a round that aggregated an update ends it.

Pure functions on numpy arrays and plain values; no Flower import: the one round driver
of both faces (:mod:`~fedram_flwr.strategies.round_driver`) applies them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedram_flwr.scenario.config import DEFAULT_MAX_FAILED_ROUNDS as DEFAULT_MAX_FAILED_ROUNDS

MAX_FAILED_ROUNDS_HINT = (
    "fix the clients, or allow more such rounds: the scenario's max_failed_rounds (the "
    "strategies' and with_availability's max_failed_rounds argument)"
)


class FailedRoundsError(RuntimeError):
    """Raised when ``max_failed_rounds`` rounds in a row trained nothing.

    In each, clients failed (every selected one, or one with ``accept_failures`` off) and
    no update was aggregated. The message quotes the clients' first error.
    """


def check_max_failed_rounds(value: Any, name: str = "max_failed_rounds") -> int:
    """Check ``value`` as the guard's limit: an integer >= 1.

    Parameters
    ----------
    value : Any
        The limit given (``bool`` is refused).
    name : str
        The argument's name, for the error message.

    Returns
    -------
    int
        ``value`` as an ``int``, >= 1.

    Raises
    ------
    ValueError
        Naming ``name`` and the allowed values, if ``value`` is no integer >= 1.
    """
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(
            f"{name}: {value!r} is not allowed; give an integer >= 1 (rounds in a row in "
            "which every selected client failed before the run stops)"
        )
    return int(value)


# ------------------------------------------------------------------ refusals
def _finite(value: Any) -> bool:
    """Whether a metric value holds no NaN or inf (non-numbers are not checked)."""
    if type(value) is float:  # most metrics: the checks below, in one step
        return math.isfinite(value)
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float | np.number):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return True


def nonfinite_metric(metrics: Mapping[str, Any]) -> str | None:
    """Find the first metric holding NaN or inf.

    Parameters
    ----------
    metrics : mapping of str to Any
        A reply's metrics; numbers, and lists or tuples of them, are checked.

    Returns
    -------
    str or None
        ``"non-finite metric 'key' = nan"``; ``None`` if every value is finite.
    """
    for key, value in metrics.items():
        if not _finite(value):
            return f"non-finite metric '{key}' = {value!r}"
    return None


def nonfinite_array(arrays: Sequence[np.ndarray]) -> str | None:
    """Find the first floating (or complex) array holding NaN or inf, and how many.

    Parameters
    ----------
    arrays : sequence of np.ndarray
        A reply's arrays; integer arrays are not checked.

    Returns
    -------
    str or None
        The array's index, shape and count of NaN or inf; ``None`` if all are finite.
    """
    for i, array in enumerate(arrays):
        a = np.asarray(array)
        if a.dtype.kind in "fc":
            finite = np.isfinite(a)
            if not finite.all():
                bad = a.size - int(np.count_nonzero(finite))
                return f"non-finite update: array {i} (shape {a.shape}) holds {bad} NaN or inf"
    return None


def partition_problems(ids: Sequence[Any], num_clients: int | None) -> list[str | None]:
    """Say, for each reply's partition id, why it cannot be taken.

    An id is refused if it is not an integer, lies outside 0..``num_clients``-1, or is
    carried by another reply of the round too (then none of them is taken).

    Parameters
    ----------
    ids : sequence of Any
        The round's claimed partition ids, one per reply (``None``: the reply carries
        none, which only strategies that need no id accept).
    num_clients : int or None
        N, >= 1 (``None``: no upper bound).

    Returns
    -------
    list of str or None
        One per reply, in order: the reason, or ``None`` where the id is fine.
    """
    valid: list[int | None] = []
    out: list[str | None] = []
    for pid in ids:
        why, value = None, None
        if pid is None:
            pass
        elif isinstance(pid, bool) or not isinstance(pid, int | float | np.number):
            why = f"partition id {pid!r} is not an integer"
        elif not math.isfinite(pid) or int(pid) != pid:
            why = f"partition id {pid!r} is not an integer"
        elif pid < 0 or (num_clients is not None and pid >= num_clients):
            last = "N-1" if num_clients is None else num_clients - 1
            why = f"partition id {int(pid)} is outside 0..{last}"
        else:
            value = int(pid)
        valid.append(value)
        out.append(why)
    counts = Counter(v for v in valid if v is not None)
    for i, value in enumerate(valid):
        count = counts[value] if value is not None else 0
        if count > 1:
            out[i] = (
                f"partition id {value} is reported by {count} replies of the round (a "
                "reply delivered twice, or clients sharing an id): none of them is taken"
            )
    return out


def refusals(
    ids: Sequence[Any],
    metrics: Sequence[Mapping[str, Any]],
    decode: Sequence[Callable[[], Sequence[np.ndarray]]],
    num_clients: int | None,
) -> list[str | None]:
    """Say why each reply of a round is refused.

    :func:`partition_problems` first, then :func:`nonfinite_array` on ``decode()``
    (called only for a reply whose id is fine), then :func:`nonfinite_metric`.

    Parameters
    ----------
    ids : sequence of Any
        The replies' claimed partition ids (``None``: none carried).
    metrics : sequence of mapping of str to Any
        The replies' metrics, in the same order.
    decode : sequence of callable
        One per reply: returns its arrays (decoded only when needed).
    num_clients : int or None
        N, >= 1 (``None``: no upper bound on ids).

    Returns
    -------
    list of str or None
        One per reply: the reason it is refused, ``None`` for a reply an algorithm may
        aggregate.
    """
    out = partition_problems(ids, num_clients)
    for i, why in enumerate(out):
        if why is None:
            out[i] = nonfinite_array(decode[i]()) or nonfinite_metric(metrics[i])
    return out


# ------------------------------------------------------------------ the guard
@dataclass(frozen=True)
class FailedRounds:
    """The failed-rounds guard's state (immutable; :func:`after_round` returns the next).

    Parameters
    ----------
    limit : int, default 3
        ``max_failed_rounds``: failed rounds in a row that stop the run, >= 1.
    streak : int
        Rounds in a row, up to now, that trained nothing because clients failed, >= 0.
    first_round : int
        The first round of the streak (0: no streak).
    first_error : str
        The first error of that round ("" with no streak).

    Raises
    ------
    ValueError
        If ``limit`` is no integer >= 1.
    """

    limit: int = DEFAULT_MAX_FAILED_ROUNDS
    streak: int = 0
    first_round: int = 0
    first_error: str = ""

    def __post_init__(self) -> None:
        check_max_failed_rounds(self.limit)


def failed_round_line(
    guard: FailedRounds, server_round: int, failures: Sequence[str], succeeded: int
) -> str:
    """Write the log line of a round that aggregated nothing because clients failed.

    Parameters
    ----------
    guard : FailedRounds
        The guard's state after the round.
    server_round : int
        t, >= 1.
    failures : sequence of str
        One description per failed or refused client, >= 1 of them (the first quoted).
    succeeded : int
        Replies taken, >= 0 (> 0: discarded because ``accept_failures`` is off).

    Returns
    -------
    str
        The round, the failures out of the selected clients, the first error and the
        streak against ``max_failed_rounds``.
    """
    total = len(failures) + succeeded
    what = f"{len(failures)} of {total} selected clients failed"
    if succeeded:
        what += " and accept_failures is False"
    return (
        f"round {server_round}: no update aggregated: {what}; first error: {failures[0]!r} "
        f"(failed round {guard.streak} in a row; the run stops at {guard.limit}: "
        "max_failed_rounds)"
    )


def after_round(
    guard: FailedRounds,
    server_round: int,
    failures: Sequence[str],
    succeeded: int,
    accept_failures: bool = True,
) -> tuple[FailedRounds, str | None]:
    """Advance the guard past ``server_round``; give the round's log line.

    A round with failures and no update aggregated (every selected client failed, or
    ``accept_failures`` is off and one did) extends the streak; a round that aggregated
    an update ends it; a round with neither failures nor replies leaves it as it is.

    Parameters
    ----------
    guard : FailedRounds
        The guard's state before the round.
    server_round : int
        t, >= 1.
    failures : sequence of str
        One description per failed or refused client of the round.
    succeeded : int
        Replies taken, >= 0.
    accept_failures : bool
        Whether a round with failures still aggregates its other replies.

    Returns
    -------
    tuple of (FailedRounds, str or None)
        The guard after the round, and its log line (``None``: nothing to report).

    Raises
    ------
    FailedRoundsError
        Quoting the first error, when this round makes ``guard.limit`` failed rounds in
        a row.
    """
    if not failures:
        return (guard if not succeeded else replace(guard, streak=0)), None
    if succeeded and accept_failures:
        return replace(guard, streak=0), None
    if guard.streak == 0:
        guard = replace(guard, first_round=server_round, first_error=failures[0])
    guard = replace(guard, streak=guard.streak + 1)
    line = failed_round_line(guard, server_round, failures, succeeded)
    if guard.streak >= guard.limit:
        raise FailedRoundsError(
            f"{guard.streak} rounds in a row ({guard.first_round}..{server_round}) trained "
            f"nothing because clients failed (max_failed_rounds = {guard.limit}); the "
            f"clients' first error (round {guard.first_round}): {guard.first_error!r}; "
            f"{MAX_FAILED_ROUNDS_HINT}"
        )
    return guard, line
