"""Checkpoints validated, never trusted: a checkpoint with a valid
digest but a forged field (a module that is not there, a round outside the run, garbage
parameters, a strategy state of other keys or types, a client state that is not
Flower's, ``checkpoint.bin`` a folder) makes the rerun start over from round 0, saying
why, and end complete with the files of a run never interrupted: never a crash, never a
"resumed" run with the wrong rounds. A run's status is final however its process ends
short of SIGKILL."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedram_flwr.engines import run_in_process
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.rundir import CHECKPOINT_FILE, Checkpoint, CheckpointError, checkpoint
from fedram_flwr.rundir.checkpoint import MAGIC, read_checkpoint, write_checkpoint
from fedram_flwr.rundir.outputs import RunDirectory
from tests.helpers import final_arrays, tiny_ca_fed_dict, without_timings

ROUNDS, EVERY, FAILS_AT = 8, 2, 6
RAW = {
    **tiny_ca_fed_dict(pi=(0.6, 0.5, 0.5, 0.3, 0.2, 0.1), rounds=ROUNDS, eval_every=2),
    "algorithm": {"name": "scaffold", "params": {}},  # clients carry state: c_i
}


class Failure(Exception):
    """Raised in place of a checkpoint write: the run fails there."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, RunDirectory]:
    """``failed``: SCAFFOLD failed after round 6, its checkpoint after round 4 on disk;
    ``reference``: the same run never interrupted. Tests forge copies of ``failed``."""
    root = tmp_path_factory.mktemp("forged")
    scenario = scenario_from_dict(RAW)
    reference = run_in_process(scenario, 0, root / "reference", checkpoint_every=0)
    write = checkpoint.write_checkpoint

    def write_or_fail(folder: Path, saved: Checkpoint) -> Path:
        if saved.round == FAILS_AT:
            raise Failure(f"round {FAILS_AT}")
        return write(folder, saved)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint, "write_checkpoint", write_or_fail)
        with pytest.raises(Failure):
            run_in_process(scenario, 0, root / "failed", checkpoint_every=EVERY)
    saved = read_checkpoint(root / "failed" / CHECKPOINT_FILE)
    assert saved.round == FAILS_AT - EVERY and saved.clients  # the clients' c_i
    return {"failed": RunDirectory(root / "failed"), "reference": reference}


def left_running(run: RunDirectory, dest: Path) -> RunDirectory:
    """A copy of ``run`` whose status says ``running`` for a process that is gone (as a
    SIGKILL leaves it)."""
    shutil.copytree(run.path, dest)
    (dest / "status.json").write_text(json.dumps({"status": "running", "pid": 2**22 + 1}))
    return RunDirectory(dest)


def forged(**changes) -> Callable[[Path, Checkpoint], None]:
    """Write the checkpoint with ``changes`` (a valid digest: only its fields lie)."""
    return lambda path, saved: write_checkpoint(path.parent, dataclasses.replace(saved, **changes))


def strategy_with(**changes) -> Callable[[Path, Checkpoint], None]:
    """The checkpoint with its recorder's state dict changed (``None``: key removed)."""

    def forge(path: Path, saved: Checkpoint) -> None:
        state = {**saved.strategy, **changes}
        state = {k: v for k, v in state.items() if v is not None}
        write_checkpoint(path.parent, dataclasses.replace(saved, strategy=state))

    return forge


def missing_module(path: Path, saved: Checkpoint) -> None:
    """The strategy state as a dataclass of a module that is gone when the run reads it
    (the reader must not import it)."""
    module = types.ModuleType("fedram_flwr._forged_state")
    sys.modules[module.__name__] = module
    try:
        exec(
            "from dataclasses import dataclass\n@dataclass\nclass Gone:\n    x: int = 1",
            vars(module),
        )
        inner = {**saved.strategy["strategy"], "state": module.Gone()}
        strategy = {**saved.strategy, "strategy": inner}
        write_checkpoint(path.parent, dataclasses.replace(saved, strategy=strategy))
    finally:
        del sys.modules[module.__name__]


def model_of(value: float) -> Callable[[Path, Checkpoint], None]:
    """The checkpoint with every model value ``value`` (NaN, inf)."""

    def forge(path: Path, saved: Checkpoint) -> None:
        arrays = [np.load(io.BytesIO(data)) for data in saved.parameters]
        parameters = [npy(np.full_like(a, value)) for a in arrays]
        write_checkpoint(path.parent, dataclasses.replace(saved, parameters=parameters))

    return forge


def rows_recounted(keep: Callable[[list[str]], list[str]]) -> Callable[[Path, Checkpoint], None]:
    """``metrics.jsonl``'s rows counted by the checkpoint replaced by ``keep(rows)``, and
    the checkpoint's size and sha256 made to match them (only the rows lie)."""

    def forge(path: Path, saved: Checkpoint) -> None:
        metrics = path.parent / "metrics.jsonl"
        data = metrics.read_bytes()
        head = "".join(keep(data[: saved.metrics_bytes].decode().splitlines(True))).encode()
        metrics.write_bytes(head + data[saved.metrics_bytes :])
        digest = hashlib.sha256(head).hexdigest()
        changed = dataclasses.replace(saved, metrics_bytes=len(head), metrics_sha256=digest)
        write_checkpoint(path.parent, changed)

    return forge


def a_folder(path: Path, saved: Checkpoint) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("x")


def npy(array: np.ndarray) -> bytes:
    from fedram_flwr.protocol import npy_bytes

    return npy_bytes(array)


FORGERIES: dict[str, Callable[[Path, Checkpoint], None]] = {
    "missing module": missing_module,
    "round -5": forged(round=-5),
    "round 10**9": forged(round=10**9),
    "round 0": forged(round=0),
    "round = rounds": forged(round=ROUNDS),
    "garbage parameters": forged(parameters=[b"\x93NUMPY garbage", b"\x00" * 7]),
    "parameters of another shape": forged(parameters=[npy(np.zeros((2, 2), np.float32))]),
    "strategy dict without its state": strategy_with(strategy=None),
    "strategy dict with another key": strategy_with(__class__=1),
    "strategy dict with a str for an int": strategy_with(**{"num-clients": "six"}),
    "client state not a RecordDict": lambda path, saved: write_checkpoint(
        path.parent, dataclasses.replace(saved, clients={0: b"\xff\xff\xff\xff"})
    ),
    "client of no partition": lambda path, saved: write_checkpoint(
        path.parent, dataclasses.replace(saved, clients={99: next(iter(saved.clients.values()))})
    ),
    "checkpoint.bin a folder": a_folder,
    # its round inside the run, but not the round of its rows, model and state
    "round 6 with round 4's rows and state": forged(round=6),
    "round 2 with round 4's rows and state": forged(round=2),
    "rows counted without round 0": rows_recounted(lambda rows: rows[1:]),
    "rows counted without round 2": rows_recounted(lambda rows: rows[:2] + rows[3:]),
    "rows counted in another order": rows_recounted(lambda rows: [rows[1], rows[0], *rows[2:]]),
    "round 4's row without its evaluation": rows_recounted(
        lambda rows: [*rows[:4], json.dumps({"round": 4}) + "\n"]
    ),
    "metrics_bytes 2**62": forged(metrics_bytes=2**62),
    "an all-NaN model": model_of(np.nan),
    "an all-inf model": model_of(np.inf),
    "a NaN in the strategy state": strategy_with(seconds=float("nan")),
    "no metrics counted, metrics.jsonl gone": lambda path, saved: (
        (path.parent / "metrics.jsonl").unlink(),
        write_checkpoint(
            path.parent,
            dataclasses.replace(
                saved, metrics_bytes=0, metrics_sha256=hashlib.sha256(b"").hexdigest()
            ),
        ),
    ),
}


WHY = {
    "round 6 with round 4's rows and state": "its round 6 disagrees with the rows it counts: "
    "they are rounds 0-4",
    "round 2 with round 4's rows and state": "its round 2 disagrees with the rows it counts",
    "rows counted without round 0": "metrics.jsonl starts at round 1, not 0",
    "rows counted without round 2": "metrics.jsonl lacks round 2 (it has 1 and 3)",
    "rows counted in another order": "metrics.jsonl has rounds out of order or twice",
    "round 4's row without its evaluation": "metrics.jsonl's round 4 has no evaluation",
    "metrics_bytes 2**62": f"it counts {2**62} bytes, the file holds",
    "an all-NaN model": "parameters[0] holds NaN or infinite values",
    "an all-inf model": "parameters[0] holds NaN or infinite values",
    "a NaN in the strategy state": "strategy['seconds'] holds NaN or infinite values",
}
"""What the rerun says for the forgeries that lie about their rows, sizes or values."""


@pytest.mark.parametrize("case", list(FORGERIES))
def test_a_forged_checkpoint_starts_the_run_over_saying_why(
    runs: dict[str, RunDirectory], case: str, tmp_path: Path, capsys
) -> None:
    run = left_running(runs["failed"], tmp_path / "run")
    path = run.path / CHECKPOINT_FILE
    FORGERIES[case](path, read_checkpoint(path))
    capsys.readouterr()
    done = run_in_process(scenario_from_dict(RAW), 0, run.path, checkpoint_every=EVERY)
    err = capsys.readouterr().err
    assert "checkpoint not used (" in err and "starting from round 1" in err, err
    assert WHY.get(case, "") in err, err
    status = json.loads((done.path / "status.json").read_text())
    assert status["status"] == "complete" and "resumed-from" not in status
    reference = runs["reference"]
    rows = done.read_metrics()
    assert [row["round"] for row in rows] == list(range(ROUNDS + 1))
    assert without_timings(rows) == without_timings(reference.read_metrics())
    for a, b in zip(final_arrays(done), final_arrays(reference), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert not path.exists()


def test_the_unforged_checkpoint_is_used(runs: dict[str, RunDirectory], tmp_path: Path) -> None:
    """The control: the same copy, not forged, resumes after round 4."""
    run = left_running(runs["failed"], tmp_path / "run")
    done = run_in_process(scenario_from_dict(RAW), 0, run.path, checkpoint_every=EVERY)
    assert yaml.safe_load((done.path / "status.json").read_text())["resumed-from"] == 4
    for a, b in zip(final_arrays(done), final_arrays(runs["reference"]), strict=True):
        assert np.array_equal(a, b)


def test_a_run_that_dies_before_its_first_round_is_marked_failed(
    runs: dict[str, RunDirectory], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever ends the process (short of SIGKILL), even before the run is reopened, the
    status it leaves is final: never "running" with a dead pid."""
    run = left_running(runs["failed"], tmp_path / "run")

    def broken(*args, **kwargs):
        raise MemoryError("no memory left")

    monkeypatch.setattr("fedram_flwr.engines.in_process.Experiment", broken)
    with pytest.raises(MemoryError):
        run_in_process(scenario_from_dict(RAW), 0, run.path, checkpoint_every=EVERY)
    status = json.loads((run.path / "status.json").read_text())
    assert status["status"] == "failed" and "MemoryError" in status["error"]


# ------------------------------------------------------- the file format itself
def payload_file(path: Path, payload: bytes) -> Path:
    """``payload`` as a checkpoint file with a matching digest."""
    path.write_bytes(MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    return path


def header_payload(header: object, blob: bytes = b"") -> bytes:
    text = json.dumps(header).encode()
    return f"{len(text)}\n".encode() + text + blob


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"4611686018427387904\n{}", "header length"),  # 2^62
        (header_payload({"tree": 1, "buffers": [{"dtype": "<f8", "shape": [2**62]}]}), "past"),
        (
            header_payload({"tree": 1, "buffers": [{"dtype": "O", "shape": [1]}]}, b"\0" * 8),
            "dtype",
        ),
        (header_payload({"tree": 1, "buffers": [{"dtype": "<f8", "shape": [-1]}]}), "shape"),
        (header_payload({"tree": 1, "buffers": []}, b"extra"), "after the last buffer"),
        (header_payload({"tree": {"dataclass": "os:system", "fields": {}}, "buffers": []}), "os"),
        (header_payload({"tree": {"call": "os.system"}, "buffers": []}), "not a value"),
        (b"30\n" + b"[" * 30, "not JSON"),
        (b"%d\n" % 200_000 + b"[" * 100_000 + b"]" * 100_000, "JSON"),  # nested too deep
        (header_payload({"tree": {"dict": [["round", 1]]}, "buffers": []}), "fields"),
    ],
)
def test_a_forged_payload_is_refused_with_a_reason(tmp_path, payload: bytes, why: str) -> None:
    """Whatever a payload with a valid digest holds, reading it raises CheckpointError
    (never MemoryError, RecursionError, an import or a call) naming what is wrong."""
    with pytest.raises(CheckpointError, match=why):
        read_checkpoint(payload_file(tmp_path / CHECKPOINT_FILE, payload))


@pytest.mark.parametrize(
    ("value", "template", "ok"),
    [
        (np.int64(3), 0, True),  # a count, whether Python's or numpy's
        ("3", 0, False),
        (True, 0, False),
        (np.zeros(3, np.float64), np.zeros(3, np.float32), True),
        (np.zeros(4), np.zeros(3), False),
        (np.zeros(3, np.int64), np.zeros(3), False),
        ({1: np.ones(2), 7: np.ones(2)}, {0: np.zeros(2)}, True),  # keyed by client
        ({"1": np.ones(2)}, {0: np.zeros(2)}, False),
        ({"a": 1}, {"a": 1, "b": 2}, False),  # attributes by name: exactly these
        ([np.ones(2)], [np.ones(2), np.ones(3)], False),
        ({"x": np.ones(5)}, {"x": None}, True),  # not known at round 0
    ],
)
def test_a_state_value_must_have_the_live_ones_shape(value, template, ok: bool) -> None:
    from fedram_flwr.rundir.state_codec import StateCodecError, check_like

    if ok:
        check_like(value, template, "strategy")
    else:
        with pytest.raises(StateCodecError, match="strategy"):
            check_like(value, template, "strategy")
