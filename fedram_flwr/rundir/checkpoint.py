"""A run's checkpoint: everything an in-process run carries from one round to the next,
saved every K rounds in its folder, so that an interrupted run continues where it was.

What it holds (:class:`Checkpoint`): the round r it was taken after; the global model the
server holds (Flower's ``Parameters`` bytes, as they are); what the strategy and its
recorder carry across rounds (``RecordingStrategy.checkpoint()``: the algorithm's state
value, the last round aggregated, the recorder's aggregation weights); every client's
``Context.state`` (Flower's ``RecordDict`` in its protobuf bytes: SCAFFOLD's c_i, CA-Fed's
local optimum, ...); and how many bytes of ``metrics.jsonl`` held rounds 0..r, with their
sha256. Nothing else is needed: oracles and every random stream are functions of (seed,
round) (:mod:`fedram_flwr.rng`), so rounds r + 1, ... draw what they would have drawn.

When it is used (:func:`resume_point`): only for the same resolved scenario and seed
(:func:`~fedram_flwr.rundir.fingerprint.scenario_fingerprint`) run by the same code
(``code_version()["source"]``), in a run that did not complete, whose ``metrics.jsonl``
still starts with the rows the checkpoint counted; anything else starts the run over
(the CLI says why). A resumed run drops the rows after round r (:func:`resume`), so its
files are those of a run never interrupted.

The file: ``checkpoint.bin`` = a magic line, the sha256 of the payload, the payload
(:mod:`~fedram_flwr.rundir.state_codec`: JSON of the plain values, the arrays and bytes
as raw buffers beside it; no pickle). Written to a temporary file, flushed to disk and
renamed over the last one (:func:`write_checkpoint`): a reader sees the previous
checkpoint or the new one, never half of one, and a payload whose digest does not match
is never read. A payload is never trusted either, whatever its digest: it cannot run
code or import a module, every field's type is checked (:func:`checked_fields`), its
round must lie between 1 and the run's rounds - 1 (:func:`resume_point`), and its model,
strategy state and client states are checked against the live run's before anything is
restored (:func:`fedram_flwr.engines.resume.check_against`). Any failure to read or
use one means the run starts over from round 0, saying why; never a crash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedram_flwr.rundir import integrity, state_codec
from fedram_flwr.rundir.directory import (
    CHECKPOINT_FILE,
    FINGERPRINT_FILE,
    STALE_FILES,
    RunDirectory,
    remove_stale,
)
from fedram_flwr.rundir.fingerprint import code_version, scenario_fingerprint
from fedram_flwr.rundir.nofollow import UnsafePathError, open_regular, write_atomic

MAGIC = b"fedram-checkpoint 2\n"
"""First line of a checkpoint file; the number is the format's version."""
CHECKPOINTS_PER_RUN = 20
"""The default interval is rounds // 20: at most 5% of a run is redone after an
interruption, and at most 20 checkpoints are written whatever the run's length."""


def default_checkpoint_every(rounds: int) -> int:
    """K when none is given: every ``rounds // 20`` rounds (at least every round)."""
    return max(1, rounds // CHECKPOINTS_PER_RUN)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used (garbled, truncated, another format)."""


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """A run's state after round ``round`` (see the module docstring)."""

    round: int
    scenario: str  # scenario_fingerprint(resolved scenario, seed)
    code: str  # code_version()["source"]
    metrics_bytes: int  # length of metrics.jsonl after round ``round``'s row
    metrics_sha256: str  # of those bytes
    parameters: list[bytes]  # the server's global Parameters.tensors
    tensor_type: str  # and their Parameters.tensor_type
    strategy: dict[str, Any]  # RecordingStrategy.checkpoint()
    clients: dict[int, bytes]  # partition id -> Context.state (RecordDict protobuf)


# ------------------------------------------------------------------------- file
def write_checkpoint(folder: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint`` as ``folder/checkpoint.bin`` atomically (temporary file,
    fsync, rename); returns its path."""
    fields = {f.name: getattr(checkpoint, f.name) for f in dataclasses.fields(checkpoint)}
    payload = state_codec.encode(fields)
    path = folder / CHECKPOINT_FILE
    digest = hashlib.sha256(payload).hexdigest().encode()
    write_atomic(path, MAGIC + digest + b"\n" + payload, sync=True)  # never through a link
    return path


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint in ``path``; :class:`CheckpointError` unless it is whole and every
    field has its type (:func:`checked_fields`). Whatever a forged file holds, this
    raises nothing else."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"unreadable ({type(err).__name__})") from None
    if not data.startswith(MAGIC):
        raise CheckpointError("not a checkpoint of this format")
    digest, _, payload = data[len(MAGIC) :].partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise CheckpointError("truncated or garbled (its sha256 does not match)")
    try:
        return checked_fields(state_codec.decode(payload))
    except CheckpointError:
        raise
    except state_codec.StateCodecError as err:
        raise CheckpointError(f"garbled ({err})") from None
    except Exception as err:  # a forged payload, whatever it breaks
        raise CheckpointError(f"garbled ({type(err).__name__}: {err})") from None


HEX64 = frozenset("0123456789abcdef")


def checked_fields(fields: Any) -> Checkpoint:
    """The :class:`Checkpoint` of a decoded payload, each field of its type:
    :class:`CheckpointError` naming the first that is not."""
    names = [f.name for f in dataclasses.fields(Checkpoint)]
    if not isinstance(fields, dict) or sorted(fields) != sorted(names):
        got = sorted(fields) if isinstance(fields, dict) else type(fields).__name__
        raise CheckpointError(f"garbled (its fields are {got}, not {sorted(names)})")
    for name in ("round", "metrics_bytes"):
        if not _count(fields[name]):
            raise CheckpointError(f"garbled ({name}: {fields[name]!r} is not an integer >= 0)")
    for name in ("scenario", "code", "metrics_sha256"):
        value = fields[name]
        if not (isinstance(value, str) and len(value) == 64 and set(value) <= HEX64):
            raise CheckpointError(f"garbled ({name}: {value!r} is not a sha256)")
    if not isinstance(fields["tensor_type"], str):
        raise CheckpointError("garbled (tensor_type: not a str)")
    parameters = fields["parameters"]
    if not isinstance(parameters, list) or not all(isinstance(t, bytes) for t in parameters):
        raise CheckpointError("garbled (parameters: not a list of bytes)")
    strategy = fields["strategy"]
    if not isinstance(strategy, dict) or not all(isinstance(k, str) for k in strategy):
        raise CheckpointError("garbled (strategy: not a dict of str keys)")
    clients = fields["clients"]
    if not isinstance(clients, dict) or not all(
        _count(k) and isinstance(v, bytes) for k, v in clients.items()
    ):
        raise CheckpointError("garbled (clients: not a dict of partition id -> bytes)")
    return Checkpoint(**fields)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# ------------------------------------------------------------------ the run folder
def metrics_mark(run: RunDirectory) -> tuple[int, str]:
    """(length, sha256) of ``metrics.jsonl`` now, flushed to disk first: the rows a
    checkpoint taken now counts."""
    if not run.metrics_path.is_file():
        return 0, hashlib.sha256(b"").hexdigest()
    with run.metrics_path.open("rb") as fh:
        os.fsync(fh.fileno())
        data = fh.read()
    return len(data), hashlib.sha256(data).hexdigest()


def resume_point(
    run: RunDirectory, scenario: dict[str, Any], seed: int
) -> tuple[Checkpoint | None, str]:
    """The checkpoint a rerun of ``(scenario, seed)`` in ``run`` continues from, or
    ``(None, why not)``; ``why`` is '' when the folder has no checkpoint."""
    path = run.path / CHECKPOINT_FILE
    if not path.is_file():
        return None, (f"{CHECKPOINT_FILE} is not a file" if os.path.lexists(path) else "")
    status = run.status()
    if status in ("complete", "missing"):
        return None, f"the run's status is {status}"
    try:
        checkpoint = read_checkpoint(path)
    except CheckpointError as err:
        return None, f"{CHECKPOINT_FILE} is {err}"
    if checkpoint.scenario != scenario_fingerprint(scenario, seed):
        return None, "it was made for another scenario or seed"
    if checkpoint.code != code_version()["source"]:
        return None, "it was made by other code"
    rounds = scenario.get("rounds")
    if not (isinstance(rounds, int) and 0 < checkpoint.round < rounds):
        return None, f"its round {checkpoint.round} is not between 1 and {rounds} - 1"
    why = rows_damage(run, checkpoint, scenario.get("eval_every"))
    return (None, why) if why else (checkpoint, "")


def rows_damage(run: RunDirectory, checkpoint: Checkpoint, every: Any) -> str:
    """What makes ``metrics.jsonl`` disagree with ``checkpoint`` ('' when nothing): its
    first ``metrics_bytes`` (never more than the file holds: nothing is allocated for
    a size the file does not have) must have the sha256 the checkpoint recorded and be
    the rows of rounds 0, 1, .., ``checkpoint.round``, each once, in order, evaluated
    every ``every`` rounds (:func:`~fedram_flwr.rundir.integrity.metrics_damage`)."""
    try:
        with os.fdopen(open_regular(run.metrics_path, os.O_RDONLY), "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if checkpoint.metrics_bytes > size:
                return (
                    f"metrics.jsonl no longer holds rounds 0-{checkpoint.round} (it counts "
                    f"{checkpoint.metrics_bytes} bytes, the file holds {size})"
                )
            head = fh.read(checkpoint.metrics_bytes)
    except (OSError, UnsafePathError) as err:
        return f"metrics.jsonl is unreadable ({type(err).__name__})"
    if (
        not head
        or len(head) != checkpoint.metrics_bytes
        or hashlib.sha256(head).hexdigest() != checkpoint.metrics_sha256
    ):
        return f"metrics.jsonl no longer holds rounds 0-{checkpoint.round}"
    try:
        rows = [json.loads(line) for line in head.decode().splitlines() if line]
    except ValueError:
        return f"the rows it counts (rounds 0-{checkpoint.round}) are garbled"
    why = integrity.metrics_damage(rows, None, every=every)
    if why is None and rows[-1]["round"] != checkpoint.round:
        why = f"they are rounds 0-{rows[-1]['round']}"
    return f"its round {checkpoint.round} disagrees with the rows it counts: {why}" if why else ""


def resume(
    run: RunDirectory, checkpoint: Checkpoint, engine: str, scenario: dict[str, Any], seed: int
) -> None:
    """Reopen ``run`` (whose lock this process holds) after ``checkpoint``'s round (made
    for ``(scenario, seed)``): the metrics rows after it dropped, what only a finished run
    writes removed, ``scenario.yaml`` and ``fingerprint.json`` written anew, status
    ``running`` with ``resumed-from``."""
    if not run.held_token():
        raise RuntimeError(f"resume {run.path}: this process does not hold its lock")
    fd = open_regular(run.metrics_path, os.O_WRONLY)  # never through a link
    try:
        os.ftruncate(fd, checkpoint.metrics_bytes)
    finally:
        os.close(fd)
    kept = {run.metrics_path.name, CHECKPOINT_FILE, FINGERPRINT_FILE}
    for stale in STALE_FILES:
        if stale not in kept:
            remove_stale(run.path / stale)
    run.record_scenario(scenario, seed, api="legacy")  # the legacy loop checkpoints
    record = {"engine": engine, "started": time.time(), "resumed-from": checkpoint.round}
    run.set_status("running", **record)


def note_resumed(run: RunDirectory, from_round: int) -> None:
    """Add ``resumed-from`` to the status record the run ended with (its ``complete``)."""
    record = json.loads((run.path / "status.json").read_text())
    extra = {k: v for k, v in record.items() if k not in ("status", "pid")}
    run.set_status(record["status"], **extra, **{"resumed-from": from_round})
