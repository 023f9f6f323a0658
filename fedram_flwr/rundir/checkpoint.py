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

The file: ``checkpoint.bin`` = a magic line, the sha256 of the payload, the payload (a
pickle, protocol 5). Written to a temporary file, flushed to disk and renamed over the
last one (:func:`write_checkpoint`): a reader sees the previous checkpoint or the new
one, never half of one, and a payload whose digest does not match is never read. The
payload is read with an unpickler that builds only numpy arrays and scalars, plain
containers and the dataclasses of this package (as ``torch.load(weights_only=True)``
does for tensors): a doctored file cannot run code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedram_flwr.rundir.directory import (
    CHECKPOINT_FILE,
    FINGERPRINT_FILE,
    STALE_FILES,
    RunDirectory,
)
from fedram_flwr.rundir.fingerprint import code_version, scenario_fingerprint
from fedram_flwr.rundir.nofollow import write_atomic

MAGIC = b"fedram-checkpoint 1\n"
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
_NUMPY = {
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.multiarray", "scalar"),
}
_BUILTINS = {"set", "frozenset", "complex", "bytearray"}


class _StateUnpickler(pickle.Unpickler):
    """Builds numpy arrays and scalars, built-in containers and this package's
    dataclasses; refuses every other global a pickle names."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _NUMPY or (module == "builtins" and name in _BUILTINS):
            return super().find_class(module, name)
        if module == "fedram_flwr" or module.startswith("fedram_flwr."):
            found = super().find_class(module, name)
            if isinstance(found, type) and dataclasses.is_dataclass(found):
                return found
        raise pickle.UnpicklingError(f"a checkpoint may not hold {module}.{name}")


def write_checkpoint(folder: Path, checkpoint: Checkpoint) -> Path:
    """Write ``checkpoint`` as ``folder/checkpoint.bin`` atomically (temporary file,
    fsync, rename); returns its path."""
    fields = {f.name: getattr(checkpoint, f.name) for f in dataclasses.fields(checkpoint)}
    payload = pickle.dumps(fields, protocol=5)
    path = folder / CHECKPOINT_FILE
    digest = hashlib.sha256(payload).hexdigest().encode()
    write_atomic(path, MAGIC + digest + b"\n" + payload, sync=True)  # never through a link
    return path


def read_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint in ``path``; :class:`CheckpointError` unless it is whole."""
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
        fields = _StateUnpickler(io.BytesIO(payload)).load()
        return Checkpoint(**fields)
    except (pickle.UnpicklingError, TypeError, ValueError, EOFError, AttributeError) as err:
        raise CheckpointError(f"garbled ({type(err).__name__}: {err})") from None


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
        return None, ""
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
    try:
        with run.metrics_path.open("rb") as fh:
            head = fh.read(checkpoint.metrics_bytes)
    except OSError:
        head = b""
    if (
        len(head) != checkpoint.metrics_bytes
        or hashlib.sha256(head).hexdigest() != checkpoint.metrics_sha256
    ):
        return None, f"metrics.jsonl no longer holds rounds 0-{checkpoint.round}"
    return checkpoint, ""


def resume(run: RunDirectory, checkpoint: Checkpoint, engine: str) -> None:
    """Reopen ``run`` (whose lock this process holds) after ``checkpoint``'s round: the
    metrics rows after it dropped, what only a finished run writes removed, status
    ``running`` with ``resumed-from``."""
    if not run.held_token():
        raise RuntimeError(f"resume {run.path}: this process does not hold its lock")
    with run.metrics_path.open("r+b") as fh:
        fh.truncate(checkpoint.metrics_bytes)
    kept = {run.metrics_path.name, CHECKPOINT_FILE, FINGERPRINT_FILE}
    for stale in STALE_FILES:
        if stale not in kept:
            (run.path / stale).unlink(missing_ok=True)
    record = {"engine": engine, "started": time.time(), "resumed-from": checkpoint.round}
    run.set_status("running", **record)


def note_resumed(run: RunDirectory, from_round: int) -> None:
    """Add ``resumed-from`` to the status record the run ended with (its ``complete``)."""
    record = json.loads((run.path / "status.json").read_text())
    extra = {k: v for k, v in record.items() if k not in ("status", "pid")}
    run.set_status(record["status"], **extra, **{"resumed-from": from_round})
