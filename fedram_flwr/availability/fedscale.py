"""FedScale's client behaviour traces, read into availability by round.

FedScale's ``client_behave_trace`` ("Device Trace File Formats") holds, per client id,
wall-clock ``active`` and ``inactive`` lists (interval j is [active[j], inactive[j]]
seconds), a ``finish_time`` after which the pattern repeats, and ``duration`` /
``model`` (not used here).

Only the JSON form is read: an object mapping client ids (as strings) to those records.
FedScale ships its traces pickled; unpickling runs code, so convert a trusted pickle
yourself: ``json.dump({str(k): v for k, v in pickle.load(f).items()}, out)``.

Rounds from wall-clock (:func:`fedscale_matrix`): round r starts at
s_r = start_time + (r - 1) x round_duration; the client is available in round r when
s_r mod finish_time lies in one of its intervals, ends included (FedScale's
``ClientMetadata.is_active``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class Behaviour:
    """One client's active intervals within a pattern of ``finish_time`` seconds that repeats.

    Parameters
    ----------
    active, inactive : np.ndarray
        Interval starts and ends, seconds >= 0: interval j is [active[j], inactive[j]],
        ordered and disjoint.
    finish_time : float
        Seconds, > 0: the length of the pattern.
    """

    active: np.ndarray
    inactive: np.ndarray
    finish_time: float

    def available_at(self, times: np.ndarray) -> np.ndarray:
        """Flag whether the client is active at each wall-clock time.

        Parameters
        ----------
        times : np.ndarray
            Seconds, >= 0; taken mod ``finish_time``.

        Returns
        -------
        np.ndarray
            Bool, one per time: inside an interval, ends included.
        """
        t = np.mod(np.asarray(times, dtype=float), self.finish_time)[:, None]
        return np.any((self.active <= t) & (t <= self.inactive), axis=1)


def _times(where: str, record: dict[str, Any], field: str) -> np.ndarray:
    values = record.get(field)
    if not isinstance(values, list):
        raise ValueError(f"{where}.{field}: missing or not a list of times (seconds)")
    for j, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{where}.{field}[{j}]: {v!r} is not a time >= 0 (seconds)")
    return np.asarray(values, dtype=float)


def parse_behaviour(where: str, record: Any) -> Behaviour:
    """Parse and check one client's record.

    Intervals must be ordered and disjoint: active[j] <= inactive[j] <= active[j + 1];
    ``finish_time`` > 0.

    Parameters
    ----------
    where : str
        The file and client, for the errors.
    record : Any
        The client's parsed JSON value.

    Returns
    -------
    Behaviour

    Raises
    ------
    ValueError
        Naming ``where`` and the field, if the record is malformed.
    """
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected an object with active, inactive, finish_time")
    active, inactive = _times(where, record, "active"), _times(where, record, "inactive")
    if active.size != inactive.size:
        raise ValueError(
            f"{where}.inactive: has {inactive.size} entries, active has {active.size} "
            "(one end per interval start)"
        )
    ends = np.empty(2 * active.size)
    ends[0::2], ends[1::2] = active, inactive
    bad = np.flatnonzero(np.diff(ends) < 0)
    if bad.size:
        j = bad[0] // 2
        field, other = ("inactive", "active") if bad[0] % 2 == 0 else ("active", "inactive")
        k = j if field == "inactive" else j + 1
        raise ValueError(
            f"{where}.{field}[{k}]: {ends[bad[0] + 1]:g} is before {other}[{j}] = "
            f"{ends[bad[0]]:g}; intervals must be ordered and disjoint"
        )
    finish = record.get("finish_time")
    if isinstance(finish, bool) or not isinstance(finish, (int, float)) or not finish > 0:
        raise ValueError(f"{where}.finish_time: {finish!r} is not a time > 0 (seconds)")
    if not math.isfinite(finish):
        raise ValueError(f"{where}.finish_time: {finish!r} is not finite")
    return Behaviour(active, inactive, float(finish))


def read_fedscale(
    path: Path,
    traces: Any,
    num_clients: int,
    clients: tuple[int, ...] | None = None,
    field: str = "availability.params",
) -> list[Behaviour]:
    """Read the behaviours of partitions 0..num_clients-1 from a FedScale trace.

    Parameters
    ----------
    path : Path
        The trace file, for the errors.
    traces : Any
        The file's parsed JSON object: client id (a string) -> record.
    num_clients : int
        K, the number of partitions, >= 1.
    clients : tuple of int, optional
        Partition k follows trace client ``clients[k]``; default: the trace's ids in
        ascending numeric order.
    field : str
        The scenario section the errors name (``<field>.path``, ``<field>.clients``).

    Returns
    -------
    list of Behaviour
        One per partition.

    Raises
    ------
    ValueError
        If an id is not an integer or repeats, the trace holds too few clients, a
        chosen client is missing, or a record is malformed.
    """
    where = f"{field}.path: {path}"
    ids: dict[int, str] = {}
    for key in traces:
        try:
            number = int(key)
        except ValueError:
            raise ValueError(f"{where}: client {key!r}: ids must be integers") from None
        if number in ids:
            raise ValueError(
                f"{where}: clients {ids[number]!r} and {key!r} are both client {number}; "
                "give each client one id"
            )
        ids[number] = key
    if clients is None:
        if len(ids) < num_clients:
            raise ValueError(
                f"{where}: holds {len(ids)} clients; data.num_clients is {num_clients}"
            )
        clients = tuple(sorted(ids)[:num_clients])
    missing = [c for c in clients if c not in ids]
    if missing:
        raise ValueError(f"{field}.clients: client {missing[0]} is not in {path}")
    return [parse_behaviour(f"{where}: client {c}", traces[ids[c]]) for c in clients]


def fedscale_matrix(
    behaviours: list[Behaviour], round_duration: float, num_rounds: int, start_time: float = 0.0
) -> np.ndarray:
    """Map the behaviours to rounds 1..num_rounds.

    Round r starts at start_time + (r - 1) round_duration; a client is available in it
    when that time falls (mod finish_time) in one of its intervals.

    Parameters
    ----------
    behaviours : list of Behaviour
        One per client.
    round_duration : float
        Seconds one round lasts, > 0.
    num_rounds : int
        Rounds, >= 1.
    start_time : float
        Seconds into the trace at which round 1 starts, >= 0.

    Returns
    -------
    np.ndarray
        Rounds x clients, bool.
    """
    starts = start_time + round_duration * np.arange(num_rounds)
    return np.stack([b.available_at(starts) for b in behaviours], axis=1)
