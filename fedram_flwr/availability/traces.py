"""Recorded availability traces: a rounds x clients bool matrix on disk.

Every run writes the one it saw (``availability.csv``); the ``trace`` oracle
(:class:`~fedram_flwr.availability.oracles.TraceClientManager`) replays one. FedScale's
client behaviour traces (wall-clock intervals, :mod:`.fedscale`) are read into the same
matrix, one row per round of the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedram_flwr.availability.fedscale import fedscale_matrix, read_fedscale


def read_trace(
    path: Path,
    num_clients: int,
    *,
    round_duration: float | None = None,
    num_rounds: int | None = None,
    start_time: float = 0.0,
    clients: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Read a recorded availability trace as a rounds x clients bool matrix.

    ``.csv``: one line per round, one 0/1 column per client (the ``availability.csv``
    every run writes); ``.json``: a list per round of the active partition ids, or an
    object: a FedScale client behaviour trace, read for rounds 1..``num_rounds`` of
    ``round_duration`` seconds from ``start_time``, partition k following trace client
    ``clients[k]`` (:mod:`.fedscale`).

    Parameters
    ----------
    path : Path
        The trace file: ``.csv`` or ``.json``.
    num_clients : int
        K, the number of partitions (columns), >= 1.
    round_duration : float, optional
        Seconds one round lasts, > 0; FedScale traces only (required for them).
    num_rounds : int, optional
        Rounds to read, >= 1; FedScale traces only (required for them).
    start_time : float
        Seconds into the trace at which round 1 starts, >= 0; FedScale traces only.
    clients : tuple of int, optional
        The trace client each partition follows; FedScale traces only (default: the
        trace's ids in ascending numeric order).

    Returns
    -------
    np.ndarray
        Rounds x K, bool.

    Raises
    ------
    ValueError
        Naming the file, the round and the client: a missing file, an unknown format, a
        malformed entry, or FedScale-only settings for another format.
    """
    where = f"availability.params.path: {path}"
    if not path.is_file():
        raise ValueError(f"{where}: trace file not found")
    if path.suffix == ".json":
        traces = json.loads(path.read_text())
        if isinstance(traces, dict):
            if round_duration is None or num_rounds is None:
                raise ValueError(
                    f"availability.params.round_duration: {path} is a FedScale client "
                    "behaviour trace (client id -> wall-clock intervals); give the seconds "
                    "one round lasts"
                )
            behaviours = read_fedscale(path, traces, num_clients, clients)
            return fedscale_matrix(behaviours, round_duration, num_rounds, start_time)
    given = {"round_duration": round_duration, "clients": clients, "start_time": start_time}
    for field, value in given.items():
        if value not in (None, 0.0):
            raise ValueError(
                f"availability.params.{field}: applies to FedScale traces (a JSON object) "
                f"only; {path} is a round x client trace"
            )
    if path.suffix == ".csv":
        rows = [line.replace(" ", "").split(",") for line in path.read_text().splitlines()]
        rows = [r for r in rows if r != [""]]
        widths = sorted({len(r) for r in rows})
        if len(widths) > 1:
            first = next(i for i, r in enumerate(rows) if len(r) != len(rows[0]))
            raise ValueError(
                f"{where}: ragged rows: round 1 has {len(rows[0])} columns, round "
                f"{first + 1} has {len(rows[first])}"
            )
        if rows and widths[0] != num_clients:
            raise ValueError(
                f"{where}: has {widths[0]} columns (clients); data.num_clients is {num_clients}"
            )
        matrix = np.array(rows, dtype=str).reshape(len(rows), num_clients)
        bad = np.argwhere((matrix != "0") & (matrix != "1"))
        if bad.size:
            r, k = bad[0]
            raise ValueError(
                f"{where}: round {r + 1}, client {k}: {str(matrix[r, k])!r} is not 0 or 1"
            )
        matrix = matrix == "1"
    elif path.suffix == ".json":
        rounds = traces
        if not isinstance(rounds, list) or not all(isinstance(r, list) for r in rounds):
            raise ValueError(f"{where}: expected a list (one per round) of lists of client ids")
        matrix = np.zeros((len(rounds), num_clients), dtype=bool)
        for r, ids in enumerate(rounds, 1):
            for k in ids:
                if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < num_clients:
                    raise ValueError(
                        f"{where}: round {r} lists client {k!r}: unknown id; allowed values: "
                        f"0..{num_clients - 1} (data.num_clients = {num_clients})"
                    )
                if matrix[r - 1, k]:
                    raise ValueError(f"{where}: round {r} lists client {k} twice")
                matrix[r - 1, k] = True
    else:
        raise ValueError(
            f"{where}: unknown trace format {path.suffix!r}; allowed: .csv (round x "
            "client 0/1 matrix), .json (active client ids per round)"
        )
    if not len(matrix):
        raise ValueError(f"{where}: the trace holds no rounds")
    return matrix


def write_trace(path: Path, matrix: np.ndarray) -> None:
    """Write a rounds x clients bool matrix in the format :func:`read_trace` reads.

    Parameters
    ----------
    path : Path
        ``.json``: the active ids per round; any other suffix: a CSV 0/1 matrix.
    matrix : np.ndarray
        Rounds x clients, bool.
    """
    if path.suffix == ".json":
        path.write_text(json.dumps([np.flatnonzero(row).tolist() for row in matrix]))
    else:
        np.savetxt(path, np.asarray(matrix, dtype=np.uint8), fmt="%d", delimiter=",")
