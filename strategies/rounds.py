"""The round policy's checks, Flower-free: what both Flower faces of every strategy (the
legacy adapters of :mod:`~fedram_flwr.strategies.base`, the Message-API ones of
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

Pure functions on numpy arrays and plain values; no Flower import, so the later merge of
the two faces' round drivers into one takes these as they are.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedram_flwr.config import DEFAULT_MAX_FAILED_ROUNDS as DEFAULT_MAX_FAILED_ROUNDS

MAX_FAILED_ROUNDS_HINT = (
    "fix the clients, or allow more such rounds: the scenario's max_failed_rounds (the "
    "strategies' and with_availability's max_failed_rounds argument)"
)


class FailedRoundsError(RuntimeError):
    """``max_failed_rounds`` rounds in a row trained nothing: every selected client failed.
    The message quotes the clients' first error."""


def check_max_failed_rounds(value: Any, name: str = "max_failed_rounds") -> int:
    """``value`` as the guard's limit: an integer >= 1, else a ``ValueError`` naming
    ``name`` and the allowed values."""
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
    """The first metric holding NaN or inf, said as ``metric 'key' = nan``; None if none."""
    for key, value in metrics.items():
        if not _finite(value):
            return f"non-finite metric '{key}' = {value!r}"
    return None


def nonfinite_array(arrays: Sequence[np.ndarray]) -> str | None:
    """The first floating array holding NaN or inf, with how many; None if none."""
    for i, array in enumerate(arrays):
        a = np.asarray(array)
        if a.dtype.kind in "fc":
            finite = np.isfinite(a)
            if not finite.all():
                bad = a.size - int(np.count_nonzero(finite))
                return f"non-finite update: array {i} (shape {a.shape}) holds {bad} NaN or inf"
    return None


def partition_problems(ids: Sequence[Any], num_clients: int | None) -> list[str | None]:
    """For each reply's partition id (``None``: the reply carries none, which only
    strategies that need no id accept), why it cannot be taken: not an integer, outside
    0..``num_clients``-1 (``None``: no upper bound), or carried by another reply of the
    round too; ``None`` where it is fine."""
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
    """Why each reply of a round is refused (:func:`partition_problems`, then
    :func:`nonfinite_array` on ``decode()``, called only for a reply whose id is fine,
    then :func:`nonfinite_metric`), ``None`` for a reply an algorithm may aggregate."""
    out = partition_problems(ids, num_clients)
    for i, why in enumerate(out):
        if why is None:
            out[i] = nonfinite_array(decode[i]()) or nonfinite_metric(metrics[i])
    return out


# ------------------------------------------------------------------ the guard
@dataclass(frozen=True)
class FailedRounds:
    """The guard's state: ``limit`` (max_failed_rounds), the rounds in a row that trained
    nothing because clients failed (``streak``), the first of them and its first error."""

    limit: int = DEFAULT_MAX_FAILED_ROUNDS
    streak: int = 0
    first_round: int = 0
    first_error: str = ""

    def __post_init__(self) -> None:
        check_max_failed_rounds(self.limit)


def failed_round_line(
    guard: FailedRounds, server_round: int, failures: Sequence[str], succeeded: int
) -> str:
    """The log line of a round that aggregated nothing because ``failures`` (descriptions,
    the first quoted) happened, ``guard`` being the state after it."""
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
    """The guard after ``server_round``, in which ``failures`` (one description per failed
    or refused client) happened and ``succeeded`` replies were taken, and the round's log
    line (``None``: nothing to report). Raises :class:`FailedRoundsError` quoting the
    first error when this round makes ``guard.limit`` failed rounds in a row."""
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
