"""Checkpoint files: exact round trip, atomic writes, nothing garbled or foreign ever
read, and when a run folder's checkpoint is used (same scenario, seed and code, metrics
rows intact, run not complete)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle

import numpy as np
import pytest

from fedram_flwr.rundir import (
    CHECKPOINT_FILE,
    Checkpoint,
    CheckpointError,
    RunDirectory,
    checkpoint,
    default_checkpoint_every,
    read_checkpoint,
    resume_point,
    scenario_fingerprint,
)
from fedram_flwr.rundir.checkpoint import MAGIC, metrics_mark, resume, write_checkpoint
from fedram_flwr.rundir.fingerprint import code_version
from fedram_flwr.strategies.availability_estimates import AvailabilityTracker

SCENARIO = {"name": "s", "rounds": 6, "training": {"lr": 0.1}}


def a_checkpoint(run: RunDirectory, round_: int = 2, **changes) -> Checkpoint:
    tracker = AvailabilityTracker(
        3, np.array([1, 2, 0]), np.arange(12).reshape(3, 2, 2), np.array([True, False, True])
    )
    length, digest = metrics_mark(run)
    fields = {
        "round": round_,
        "scenario": scenario_fingerprint(SCENARIO, 0),
        "code": code_version()["source"],
        "metrics_bytes": length,
        "metrics_sha256": digest,
        "parameters": [np.float32([1.5, -2]).tobytes()],
        "tensor_type": "numpy.ndarray",
        "strategy": {"state": tracker, "last_round": round_, "t": np.float64(0.25)},
        "clients": {1: b"\x0a\x01"},
    }
    return Checkpoint(**{**fields, **changes})


@pytest.fixture
def interrupted(tmp_path) -> RunDirectory:
    """A run folder left ``running`` by a process that is gone, rows 0-3 and a
    checkpoint after round 2 (taken when rows 0-2 were written)."""
    run = RunDirectory(tmp_path / "run")
    with run.lock():
        run.start(SCENARIO, 0, engine="in-process")
        for r in range(3):
            run.append_metrics({"round": r})
        write_checkpoint(run.path, a_checkpoint(run))
        run.append_metrics({"round": 3})
        run.write("summary.json", "{}")
    return run


def test_the_default_interval_is_a_twentieth_of_the_rounds() -> None:
    assert [default_checkpoint_every(r) for r in (1, 19, 20, 400, 2000)] == [1, 1, 1, 20, 100]


def test_a_checkpoint_reads_back_exactly(tmp_path) -> None:
    run = RunDirectory(tmp_path)
    saved = a_checkpoint(run)
    back = read_checkpoint(write_checkpoint(tmp_path, saved))
    assert back.round == 2 and back.clients == {1: b"\x0a\x01"}
    assert back.parameters == saved.parameters and back.scenario == saved.scenario
    tracker, original = back.strategy["state"], saved.strategy["state"]
    assert isinstance(tracker, AvailabilityTracker) and tracker.rounds == 3
    for name in ("active_counts", "transitions", "last"):
        a, b = getattr(tracker, name), getattr(original, name)
        assert a.dtype == b.dtype and np.array_equal(a, b) and a.flags.writeable
    assert back.strategy["t"] == 0.25 and isinstance(back.strategy["t"], np.float64)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_FILE]  # no temp file


def test_a_failed_write_leaves_the_last_checkpoint(tmp_path, monkeypatch) -> None:
    write_checkpoint(tmp_path, a_checkpoint(RunDirectory(tmp_path), round_=2))

    def no_disk(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", no_disk)
    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(tmp_path, a_checkpoint(RunDirectory(tmp_path), round_=4))
    assert read_checkpoint(tmp_path / CHECKPOINT_FILE).round == 2


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda data: data[:-10], "sha256 does not match"),
        (lambda data: data[:40] + b"x" + data[41:], "sha256 does not match"),
        (lambda data: b"PK" + data, "not a checkpoint"),
        (lambda data: b"", "not a checkpoint"),
    ],
)
def test_a_truncated_or_garbled_checkpoint_is_refused(tmp_path, damage, why: str) -> None:
    path = write_checkpoint(tmp_path, a_checkpoint(RunDirectory(tmp_path)))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=why):
        read_checkpoint(path)


class Boom:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_pickle_is_never_read(tmp_path) -> None:
    """The old format (a pickle, with a matching digest) is not read at all: a doctored
    one that names another callable runs nothing."""
    payload = pickle.dumps({"round": Boom()}, protocol=5)
    path = tmp_path / CHECKPOINT_FILE
    old_magic = b"fedram-checkpoint 1\n"
    path.write_bytes(old_magic + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
    with pytest.raises(CheckpointError, match="not a checkpoint of this format"):
        read_checkpoint(path)
    assert MAGIC != old_magic
    assert not (tmp_path / "pwned").exists() and not os.path.exists("pwned")


def test_an_interrupted_run_resumes_from_its_checkpoint(interrupted: RunDirectory) -> None:
    assert interrupted.status() == "interrupted"
    saved, why = resume_point(interrupted, SCENARIO, 0)
    assert saved is not None and saved.round == 2 and why == ""
    (interrupted.path / "scenario.yaml").write_text("rounds: [6\n")  # garbled meanwhile
    (interrupted.path / "fingerprint.json").unlink()
    with interrupted.lock():
        resume(interrupted, saved, "in-process", SCENARIO, 0)
    assert interrupted.scenario() == {**SCENARIO, "seed": 0}  # the run's own, written anew
    assert interrupted.fingerprint()["scenario"] == scenario_fingerprint(SCENARIO, 0)
    assert [row["round"] for row in interrupted.read_metrics()] == [0, 1, 2]
    assert not (interrupted.path / "summary.json").exists()
    assert (interrupted.path / CHECKPOINT_FILE).exists()
    status = json.loads((interrupted.path / "status.json").read_text())
    assert status["resumed-from"] == 2


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("scenario", "another scenario or seed"),
        ("seed", "another scenario or seed"),
        ("code", "made by other code"),
        ("metrics", "metrics.jsonl no longer holds rounds 0-2"),
        ("complete", "status is complete"),
        ("garbled", "checkpoint.bin is truncated or garbled"),
    ],
)
def test_a_checkpoint_is_not_used_when(
    interrupted: RunDirectory, monkeypatch, change: str, why: str
) -> None:
    scenario, seed = SCENARIO, 0
    if change == "scenario":
        scenario = {**SCENARIO, "training": {"lr": 0.2}}
    elif change == "seed":
        seed = 1
    elif change == "code":
        monkeypatch.setattr(checkpoint, "code_version", lambda: {"source": "other"})
    elif change == "metrics":
        interrupted.metrics_path.write_text('{"round": 0}\n{"round": 1}\n')
    elif change == "complete":
        with interrupted.lock():
            interrupted.set_status("complete")
    else:
        path = interrupted.path / CHECKPOINT_FILE
        path.write_bytes(path.read_bytes()[:-1])
    saved, reason = resume_point(interrupted, scenario, seed)
    assert saved is None and why in reason


def test_a_folder_without_checkpoint_has_nothing_to_say(tmp_path) -> None:
    assert resume_point(RunDirectory(tmp_path), SCENARIO, 0) == (None, "")
