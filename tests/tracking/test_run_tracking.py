"""``fedram run --track``'s guard, with stand-in trackers (no tracker package needed):
every row reaches a tracker, a failing tracker is reported once and never fails the run,
and a failed run is marked so."""

from __future__ import annotations

import json
import os

import pytest

import fedram_flwr.tracking.run as tracking_run
from fedram_flwr.engines.flwr.flower_line import LINE
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.strategies import FedCVaRAvg
from fedram_flwr.tracking.run import STATE_FILE, TrackedRun
from fedram_flwr.tracking.trackers import Tracker
from fedram_flwr.tracking.values import metrics_of
from tests.cli.test_commands import fedram, stub_report, write_scenario

RUN = ("tiny-gaussian", "alpha=0.1", "seed0")


class Recorder(Tracker):
    """Keeps what it is given; ``fail_at``: the round whose log raises."""

    made: list[Recorder] = []

    def __init__(self, name: str, fail_at: int | None = None) -> None:
        self.name, self.fail_at = name, fail_at
        self.steps: dict[int, dict[str, float]] = {}
        self.logs: list[tuple[int, dict[str, float]]] = []
        self.files: list[str] = []
        self.ended: list[str] = []
        Recorder.made.append(self)

    def open(self, run, resume_id):
        self.run = run
        return f"{self.name}-id"

    def log(self, step, metrics):
        if step == self.fail_at:
            raise ConnectionError("tracker unreachable")
        self.steps[step] = metrics
        self.logs.append((step, metrics))

    def steps_merged(self) -> dict[int, dict[str, float]]:
        """step -> every metric logged at it (over several calls), each key once."""
        merged: dict[int, dict[str, float]] = {}
        for step, metrics in self.logs:
            assert not set(metrics) & set(merged.get(step, {})), f"step {step} logged twice"
            merged.setdefault(step, {}).update(metrics)
        return merged

    def finish(self, summary, files):
        self.summary, self.files = summary, [f.name for f in files]

    def close(self, status):
        self.ended.append(status)


@pytest.fixture
def trackers(monkeypatch: pytest.MonkeyPatch) -> list[Recorder]:
    """``--track tensorboard --track mlflow`` go to two :class:`Recorder`, the second
    failing at round 2."""
    Recorder.made = []
    monkeypatch.setattr(tracking_run, "_reported", set())
    monkeypatch.setattr("fedram_flwr.cli.commands.requested", lambda given: list(given or []))
    monkeypatch.setattr("fedram_flwr.cli.commands.plot_run", lambda *args: None)
    monkeypatch.setattr("fedram_flwr.cli.commands.write_report", stub_report)
    monkeypatch.setattr(
        tracking_run, "tracker", lambda name: Recorder(name, 2 if name == "mlflow" else None)
    )
    return Recorder.made


def test_every_row_is_logged_and_a_failing_tracker_never_fails_the_run(
    tmp_path, capsys, trackers
) -> None:
    out = tmp_path / "runs"
    code, _, err = fedram(
        capsys, "run", write_scenario(tmp_path), "--out", out, "--variant", "alpha=0.1",
        "--track", "tensorboard", "--track", "mlflow",
    )  # fmt: skip
    assert code == 0, err
    run = RunDirectory(out.joinpath(*RUN))
    assert run.status() == "complete"
    rows = run.read_metrics()
    good, bad = trackers
    assert good.steps == {row["round"]: metrics_of(row) for row in rows}
    assert good.ended == ["complete"] and good.files == ["summary.json"]
    assert good.summary["final.accuracy"] == run.read_summary()["final"]["accuracy"]
    assert good.run.name == "alpha=0.1/seed0" and good.run.group == "tiny-gaussian"
    assert good.run.params["algorithm.params.alpha"] == "0.1"
    assert good.run.params["seed"] == "0" and good.run.params["engine"] == "in-process"
    assert good.run.params["flwr"] == LINE.version  # the installed Flower line's
    assert good.run.root == out / "tracking"
    assert sorted(bad.steps) == [0, 1] and bad.ended == []  # dropped at round 2
    assert err.count("TRACKING FAILED") == 1
    assert "mlflow could not log a round: ConnectionError: tracker unreachable" in err


def test_a_failed_run_is_marked_failed(tmp_path, capsys, trackers, monkeypatch) -> None:
    def boom(self, server_round, *replies):
        raise RuntimeError("aggregation broke")

    monkeypatch.setattr(FedCVaRAvg, "aggregate_fit", boom)
    code, _, err = fedram(
        capsys, "run", write_scenario(tmp_path), "--out", tmp_path / "runs",
        "--variant", "alpha=0.1", "--track", "tensorboard",
    )  # fmt: skip
    assert code == 1
    (good,) = trackers
    assert sorted(good.steps) == [0] and good.ended == ["failed"]
    assert "TRACKING FAILED" not in err


def follow(run_dir, info_root) -> TrackedRun:
    """A TrackedRun of ``run_dir`` polled by hand (its thread never started)."""
    from fedram_flwr.tracking.trackers import RunInfo

    return TrackedRun(["tensorboard"], run_dir, RunInfo("v/seed0", "s", {}, info_root))


def test_rows_are_logged_as_they_are_written_whole_lines_only(tmp_path, trackers) -> None:
    """Before this attempt's status.json nothing is opened; then each poll logs the whole
    lines written since the last one (a line being written waits for its newline)."""
    old = tmp_path / "status.json"
    old.write_text(json.dumps({"status": "failed"}))
    os.utime(old, (1.0, 1.0))  # a previous attempt's record
    tracked = follow(tmp_path, tmp_path / "tracking")
    tracked._since = 1000.0
    tracked.poll()
    assert trackers == [] or trackers[0].steps == {}
    old.write_text(json.dumps({"status": "running"}))
    rows = tmp_path / "metrics.jsonl"
    rows.write_text('{"round": 0, "accuracy": 0.5}\n{"round": 1, "acc')
    tracked.poll()
    (recorder,) = trackers
    assert recorder.steps == {0: {"accuracy": 0.5}}
    with rows.open("a") as fh:
        fh.write('uracy": 0.75, "relayed": [2]}\n')
    tracked.poll()
    assert recorder.steps == {0: {"accuracy": 0.5}, 1: {"accuracy": 0.75, "relayed.count": 1.0}}
    assert json.loads((tmp_path / STATE_FILE).read_text()) == {
        "ids": {"tensorboard": "tensorboard-id"},
        "logged-round": 1,
    }


def test_a_resumed_attempt_continues_the_saved_ids_after_the_logged_round(
    tmp_path, trackers, monkeypatch
) -> None:
    saved = {"ids": {"tensorboard": "old-id"}, "logged-round": 2}
    (tmp_path / STATE_FILE).write_text(json.dumps(saved))
    (tmp_path / "status.json").write_text(json.dumps({"status": "running", "resumed-from": 1}))
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"round": r, "loss": float(r)}) + "\n" for r in range(5))
    )
    resumed = []
    monkeypatch.setattr(
        Recorder, "open", lambda self, run, resume_id: resumed.append(resume_id) or "old-id"
    )
    follow(tmp_path, tmp_path / "tracking").poll()
    assert resumed == ["old-id"]
    assert trackers[0].steps == {3: {"loss": 3.0}, 4: {"loss": 4.0}}
