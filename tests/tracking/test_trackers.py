"""``fedram run --track`` with the real trackers, read back with their own readers:
TensorBoard's EventAccumulator, MLflow's client on the local store, W&B's offline run
file. The logged values are ``metrics.jsonl``'s; a resumed run continues its tracked run.
Needs the ``tracking`` extra (skipped without it: scripts/test_tracking.sh installs it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.cli.commands import main
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.strategies import FedCVaRAvg
from fedram_flwr.tracking.values import metrics_of, params_of
from tests.cli.test_commands import write_scenario
from tests.tracking.wandb_files import offline_run

INSTALLED = [m for m in ("tensorboard", "mlflow", "wandb") if importlib.util.find_spec(m)]
pytestmark = pytest.mark.skipif(not INSTALLED, reason="the 'tracking' extra is not installed")
RUN = ("tiny-gaussian", "alpha=0.1", "seed0")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunDirectory]:
    """(--out, the run) of one run of the tiny scenario tracked by every installed tracker."""
    root = tmp_path_factory.mktemp("tracked")
    out = root / "runs"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        argv = ["run", str(write_scenario(root)), "--out", str(out), "--variant", "alpha=0.1"]
        assert main([*argv, *(f"--track={name}" for name in INSTALLED)]) == 0
    return out, RunDirectory(out.joinpath(*RUN))


def expected(run: RunDirectory) -> dict[str, dict[int, float]]:
    """metric -> {round: value} of the run's ``metrics.jsonl``."""
    out: dict[str, dict[int, float]] = {}
    for row in run.read_metrics():
        for key, value in metrics_of(row).items():
            out.setdefault(key, {})[row["round"]] = value
    return out


def accumulator(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    return events


def test_tensorboard_event_files_hold_every_row(tracked) -> None:
    pytest.importorskip("tensorboard")
    out, run = tracked
    events = accumulator(out / "tracking" / "tensorboard" / Path(*RUN))
    want = expected(run)
    assert set(events.Tags()["scalars"]) >= set(want)
    for key, by_round in want.items():
        got = {e.step: e.value for e in events.Scalars(key)}
        assert got == {r: pytest.approx(np.float32(v), nan_ok=True) for r, v in by_round.items()}
    plots = sorted(f"plots/{p.stem}" for p in run.path.glob("*.png"))
    assert plots and sorted(events.Tags()["images"]) == plots
    final = events.Scalars("summary/final.accuracy")[-1].value
    assert final == pytest.approx(run.read_summary()["final"]["accuracy"])
    (status,) = events.Tensors("status")
    assert status.tensor_proto.string_val == [b"complete"]


def mlflow_run(out: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'tracking' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny-gaussian")
    (found,) = client.search_runs([experiment.experiment_id])
    return client, found


def test_mlflow_holds_params_metrics_per_round_artifacts_and_status(tracked) -> None:
    pytest.importorskip("mlflow")
    out, run = tracked
    client, found = mlflow_run(out)
    assert found.info.run_name == "alpha=0.1/seed0" and found.info.status == "FINISHED"
    scenario = {k: v for k, v in run.scenario().items() if k != "seed"}
    params = found.data.params
    assert {k: params[k] for k in params_of(scenario)} == params_of(scenario)
    assert params["seed"] == "0" and params["engine"] == "in-process" and params["api"] == "legacy"
    for key, by_round in expected(run).items():
        history = client.get_metric_history(found.info.run_id, key)
        got = {m.step: m.value for m in history}
        assert got == pytest.approx(by_round, nan_ok=True) and len(history) == len(by_round)
    artifacts = {a.path for a in client.list_artifacts(found.info.run_id)}
    assert artifacts == {"summary.json", *(p.name for p in run.path.glob("*.png"))}
    ids = json.loads((run.path / "tracking.json").read_text())["ids"]
    assert ids["mlflow"] == found.info.run_id


def test_wandb_offline_run_holds_every_row_in_its_group(tracked) -> None:
    pytest.importorskip("wandb")
    out, run = tracked
    (folder,) = (out / "tracking" / "wandb").glob("offline-run-*")
    logged = offline_run(folder)
    assert logged["group"] == "tiny-gaussian" and logged["name"] == "alpha=0.1/seed0"
    assert logged["exit_code"] == 0
    assert logged["config"]["algorithm.params.alpha"] == "0.1"
    for key, by_round in expected(run).items():
        got = {step: row[key] for step, row in logged["history"].items() if key in row}
        assert got == pytest.approx(by_round, nan_ok=True)
    want = run.read_summary()["final"]["accuracy"]
    assert logged["summary"]["summary/final.accuracy"] == pytest.approx(want)
    saved = {p.name for p in (folder / "files").iterdir()}
    assert saved >= {"summary.json", *(p.name for p in run.path.glob("*.png"))}


def test_a_resumed_run_continues_its_tracked_run(tmp_path, monkeypatch) -> None:
    """Round 4 fails once (marked FAILED); the rerun resumes from round 3's checkpoint
    and logs rounds 4..6 to the same MLflow run, TensorBoard folder and W&B run id
    (FINISHED, exit code 0): each round once, the values of ``metrics.jsonl``."""
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    real, calls = FedCVaRAvg.aggregate_fit, []

    def fail_once(self, server_round, *replies):
        calls.append(server_round)
        if server_round == 4 and calls.count(4) == 1:
            raise RuntimeError("round 4 broke")
        return real(self, server_round, *replies)

    monkeypatch.setattr(FedCVaRAvg, "aggregate_fit", fail_once)
    monkeypatch.setattr("fedram_flwr.cli.commands.plot_run", lambda *args: None)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "runs"
    argv = ["run", str(write_scenario(tmp_path)), "--out", str(out), "--variant", "alpha=0.1",
            "--checkpoint-every", "1", "--track", "mlflow", "--track", "tensorboard",
            "--track", "wandb"]  # fmt: skip
    assert main(argv) == 1
    client, found = mlflow_run(out)
    assert found.info.status == "FAILED"
    assert main(argv) == 0
    run = RunDirectory(out.joinpath(*RUN))
    assert json.loads((run.path / "status.json").read_text())["resumed-from"] == 3
    client, resumed = mlflow_run(out)  # one run: the same
    assert resumed.info.run_id == found.info.run_id and resumed.info.status == "FINISHED"
    events = accumulator(out / "tracking" / "tensorboard" / Path(*RUN))
    for key, by_round in expected(run).items():
        history = client.get_metric_history(found.info.run_id, key)
        assert sorted(m.step for m in history) == sorted(by_round)
        assert {m.step: m.value for m in history} == pytest.approx(by_round, nan_ok=True)
        assert sorted(e.step for e in events.Scalars(key)) == sorted(by_round)
    attempts = [offline_run(f) for f in sorted((out / "tracking" / "wandb").glob("offline-run-*"))]
    assert len({a["id"] for a in attempts}) == 1  # `wandb sync` puts both in one run
    assert [(sorted(a["history"]), a["exit_code"]) for a in attempts] == [
        ([0, 1, 2, 3], 1),
        ([4, 5, 6], 0),
    ]


@pytest.mark.flwr
@pytest.mark.breadth  # a whole app under flwr run: the second tier (and the tracking tier)
def test_a_run_on_flowers_simulation_engine_is_tracked(tmp_path, monkeypatch) -> None:
    """The ServerApp writes the run folder in Flower's processes; the ``fedram`` process
    follows it: every row reaches TensorBoard, the run ends FINISHED in MLflow with the
    engine and API as parameters."""
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    monkeypatch.setattr("fedram_flwr.cli.commands.plot_run", lambda *args: None)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "runs"
    argv = ["run", str(write_scenario(tmp_path)), "--out", str(out), "--variant", "alpha=0.1",
            "--engine", "flwr", "--track", "tensorboard", "--track", "mlflow"]  # fmt: skip
    assert main(argv) == 0
    run = RunDirectory(out.joinpath(*RUN))
    events = accumulator(out / "tracking" / "tensorboard" / Path(*RUN))
    for key, by_round in expected(run).items():
        got = {e.step: e.value for e in events.Scalars(key)}
        assert got == {r: pytest.approx(np.float32(v), nan_ok=True) for r, v in by_round.items()}
    client, found = mlflow_run(out)
    assert found.info.status == "FINISHED"
    assert (found.data.params["engine"], found.data.params["api"]) == ("flwr", "message")


def test_tensorboard_logs_a_clocked_run_against_its_simulated_seconds(tmp_path) -> None:
    pytest.importorskip("tensorboard")
    from fedram_flwr.tracking.trackers import RunInfo, TensorBoardTracker

    board = TensorBoardTracker()
    board.open(RunInfo("v/seed0", "timed", {"seed": "0"}, tmp_path), None)
    board.log(1, {"accuracy": 0.5, "sim-seconds": 61.6})
    board.log(2, {"accuracy": 0.75, "sim-seconds": 130.2})
    board.close("complete")
    events = accumulator(tmp_path / "tensorboard" / "timed" / "v" / "seed0")
    assert [(e.step, e.value) for e in events.Scalars("accuracy")] == [(1, 0.5), (2, 0.75)]
    clocked = events.Scalars("vs-sim-seconds/accuracy")
    assert [(e.step, e.value) for e in clocked] == [(62, 0.5), (130, 0.75)]
