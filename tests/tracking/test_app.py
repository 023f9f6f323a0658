"""``with_tracking`` in a Flower app: a Message-API strategy under ``with_availability``
runs its own ``start()`` and each round's train metrics, relayed count and server-side
evaluation reach the trackers, equal to what ``start`` returns."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, MetricRecord
from flwr.serverapp.strategy import FedAvg

import fedram_flwr.tracking.run as tracking_run
from fedram_flwr.availability import BernoulliClientManager
from fedram_flwr.message_api.availability import with_availability
from fedram_flwr.tracking.app import with_tracking
from tests.message_api.test_availability import K, grid_of, server_identity  # noqa: F401
from tests.tracking.test_run_tracking import Recorder

ROUNDS = 4


def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """The model's first entry as the 'accuracy' (it moves by 1 per round with replies)."""
    return MetricRecord({"accuracy": float(arrays.to_numpy_ndarrays()[0][0]), "loss": 0.5})


def start(trackers: list[str], **kwargs):
    oracle = BernoulliClientManager([0.9, 0.7, 0.5, 0.3, 0.1], seed=4)
    wrapped = with_tracking(with_availability(FedAvg(), oracle), trackers, **kwargs)
    result = wrapped.start(
        grid=grid_of(K),
        initial_arrays=ArrayRecord([np.zeros(2)]),
        num_rounds=ROUNDS,
        timeout=5,
        evaluate_fn=evaluate,
    )
    return wrapped, result


def expected(wrapped, result) -> dict[int, dict[str, float]]:
    """What each round should log, from Flower's Result and the wrapper's relayed."""
    steps: dict[int, dict[str, float]] = {}
    for r, record in result.evaluate_metrics_serverapp.items():
        steps.setdefault(r, {}).update({k: float(v) for k, v in record.items()})
    for r, record in result.train_metrics_clientapp.items():
        steps.setdefault(r, {}).update({f"fit-{k}": float(v) for k, v in record.items()})
    for r, relayed in wrapped.relayed.items():
        if r in result.train_metrics_clientapp:
            steps[r]["relayed.count"] = float(len(relayed))
    for r, record in result.evaluate_metrics_clientapp.items():
        steps.setdefault(r, {}).update({f"evaluate-{k}": float(v) for k, v in record.items()})
    return steps


def test_with_tracking_logs_each_round_of_the_apps_own_loop(monkeypatch, tmp_path) -> None:
    Recorder.made = []
    monkeypatch.setattr("fedram_flwr.tracking.requested", lambda given: list(given))
    monkeypatch.setattr(tracking_run, "tracker", Recorder)
    params = {"lr": {"x": 0.1}}
    wrapped, result = start(["tensorboard"], name="app-run", params=params, root=tmp_path)
    (recorder,) = Recorder.made
    assert recorder.run.name == "app-run" and recorder.run.params == {"lr.x": "0.1"}
    steps = expected(wrapped, result)
    assert sorted(steps) == list(range(ROUNDS + 1)) and steps[0] == {"accuracy": 0.0, "loss": 0.5}
    assert any(s.get("relayed.count", 0) > 1 for s in steps.values())
    assert recorder.steps_merged() == steps
    assert recorder.ended == ["complete"]


def test_a_failing_start_is_marked_failed(monkeypatch, tmp_path) -> None:
    Recorder.made = []
    monkeypatch.setattr("fedram_flwr.tracking.requested", lambda given: list(given))
    monkeypatch.setattr(tracking_run, "tracker", Recorder)

    def broken(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        raise RuntimeError("evaluation broke")

    oracle = BernoulliClientManager([0.9, 0.7, 0.5, 0.3, 0.1], seed=4)
    wrapped = with_tracking(with_availability(FedAvg(), oracle), "mlflow", name="x", root=tmp_path)
    with pytest.raises(RuntimeError, match="evaluation broke"):
        wrapped.start(grid=grid_of(K), initial_arrays=ArrayRecord([np.zeros(2)]),
                      num_rounds=2, evaluate_fn=broken)  # fmt: skip
    assert Recorder.made[0].ended == ["failed"]


def test_with_tracking_to_tensorboard_reads_back(tmp_path) -> None:
    pytest.importorskip("tensorboard")
    from tests.tracking.test_trackers import accumulator

    wrapped, result = start(["tensorboard"], name="app-run", group="demo-app", root=tmp_path)
    events = accumulator(tmp_path / "tensorboard" / "demo-app" / "app-run")
    for r, metrics in expected(wrapped, result).items():
        for key, value in metrics.items():
            got = {e.step: e.value for e in events.Scalars(key)}
            assert got[r] == pytest.approx(np.float32(value)), (key, r)


def test_fedbuff_steps_log_buffer_staleness_and_clock(monkeypatch, tmp_path) -> None:
    """The hand schedule of tests/message_api/test_fedbuff.py: step 1 at t = 2 from
    clients 0 and 2 (staleness 0, 0), step 2 at t = 3 from 1 (staleness 1) and 0 (0); the
    app's own on_step still runs."""
    from fedram_flwr.engines.grid import InProcessGrid
    from fedram_flwr.message_api import FedBuff
    from tests.message_api.test_fedbuff import (
        half_way_app,
        hand_available,
        hand_durations,
        scalar,
    )

    Recorder.made = []
    monkeypatch.setattr("fedram_flwr.tracking.requested", lambda given: list(given))
    monkeypatch.setattr(tracking_run, "tracker", Recorder)
    strategy = FedBuff(
        buffer_size=2, concurrency=2, available_at=hand_available, durations=hand_durations
    )
    seen: list[int] = []
    strategy.on_step = lambda record, model: seen.append(record.version)
    with_tracking(strategy, "wandb", name="fedbuff", root=tmp_path)
    strategy.start(InProcessGrid(half_way_app(), 3), scalar(), num_rounds=2)
    steps = Recorder.made[0].steps_merged()
    for step, (mean, most, clock) in {1: (0.0, 0.0, 2.0), 2: (0.5, 1.0, 3.0)}.items():
        assert steps[step]["buffered"] == 2.0 and steps[step]["failures"] == 0.0
        assert steps[step]["mean-staleness"] == mean and steps[step]["max-staleness"] == most
        assert steps[step]["sim-seconds"] == clock
    assert seen == [1, 2] and Recorder.made[0].ended == ["complete"]


@pytest.mark.flwr
@pytest.mark.breadth  # a whole app under flwr run: the second tier (and the tracking tier)
def test_an_app_on_flowers_simulation_engine_logs_each_round(tmp_path, monkeypatch) -> None:
    """``examples/fedram_app`` with ``track="tensorboard"`` under ``flwr run``: the ServerApp
    process logs each round of its own ``start()`` through ``with_tracking``; the event
    file holds every server-side evaluation the run's summary holds, and each round's
    relayed count equals the oracle's draw."""
    pytest.importorskip("tensorboard")
    import json

    from tests.test_example_app import CONFIG, copy_app, flwr_run
    from tests.tracking.test_trackers import accumulator

    app, result, stores = copy_app(tmp_path), tmp_path / "run.json", tmp_path / "tracking"
    config = f'result-file="{result}" track="tensorboard" track-dir="{stores}"'
    flwr_run(app, tmp_path / "logs", config)
    run = json.loads(result.read_text())
    events = accumulator(stores / "tensorboard" / "fedram-app" / f"fedram-app-seed{CONFIG['seed']}")
    for key in ("accuracy", "loss"):
        got = {e.step: e.value for e in events.Scalars(key)}
        want = {int(r): np.float32(m[key]) for r, m in run["evaluate"].items()}
        assert got == {r: pytest.approx(v) for r, v in want.items()}, key
    relayed = {e.step: e.value for e in events.Scalars("relayed.count")}
    trained = {int(r): len(p) for r, p in run["relayed"].items()}
    assert relayed == {r: n for r, n in trained.items() if n > 0} and relayed
