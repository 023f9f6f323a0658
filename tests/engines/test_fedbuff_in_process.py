"""FedBuff in-process (fedram_flwr/engines/fedbuff_in_process.py) through ``fedram run``:
what each server step records, one seed one model, and what refuses it (the wall clock in
the legacy face, on any engine)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clock import lognormal_speeds
from fedram_flwr.engines import run_fedbuff_in_process, run_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.config import ScenarioError
from tests.helpers import TINY_GAUSSIAN, final_arrays, scenario_error


def fedbuff_dict(**params: Any) -> dict[str, Any]:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw["name"] = "tiny-fedbuff"
    raw["availability"] = {"oracle": "bernoulli", "params": {"p": [1.0, 1.0, 1.0]}}
    raw["algorithm"] = {"name": "fedbuff", "params": {"buffer_size": 3, "concurrency": 3, **params}}
    return raw


TIMED = {
    "speeds": {
        "law": "lognormal",
        "compute_ms_per_sample": {"median": 40.0, "sigma": 0.8},
        "bandwidth_kbps": {"median": 5000.0, "sigma": 1.0},
    },
    "availability": {"law": "rounds", "tick_seconds": 5.0},
}


@pytest.fixture(autouse=True)
def no_run_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fedram_flwr.cli.commands.plot_run", lambda *args: None)


def test_k_equals_c_equals_n_on_ticks_records_synchronous_steps(tmp_path: Path) -> None:
    """No time model: every task takes one tick, so with K = C = N every step buffers the
    three clients' fresh updates, one step per simulated second."""
    run = run_fedbuff_in_process(
        scenario_from_dict(fedbuff_dict(staleness="constant")), 0, tmp_path / "run"
    )
    rows = run.read_metrics()
    assert run.status() == "complete" and [r["round"] for r in rows] == list(range(7))
    steps = rows[1:]
    assert [r["sim-seconds"] for r in steps] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert all(r["buffer-clients"] == [0, 1, 2] and r["staleness"] == [0, 0, 0] for r in steps)
    assert all(r["staleness-weights"] == [1.0, 1.0, 1.0] for r in steps)
    assert "accuracy" in rows[0] and "accuracy" in rows[-1]  # eval_every 3: 0, 3, 6
    assert [r["round"] for r in rows if "accuracy" in r] == [0, 3, 6]


def test_time_model_gives_stale_weighted_updates_and_one_seed_one_model(tmp_path: Path) -> None:
    raw = fedbuff_dict(buffer_size=2, concurrency=3)
    raw["time"] = TIMED
    scenario = scenario_from_dict(raw)
    first = run_fedbuff_in_process(scenario, 0, tmp_path / "a")
    again = run_fedbuff_in_process(scenario, 0, tmp_path / "b")
    steps = first.read_metrics()[1:]
    assert [r["round"] for r in steps] == [1, 2, 3, 4, 5, 6]
    times = [r["sim-seconds"] for r in steps]
    assert times == sorted(times) and times[0] > 0
    assert all(len(r["staleness"]) == 2 for r in steps)
    assert any(s > 0 for r in steps for s in r["staleness"])  # C > K: some arrive stale
    for r in steps:  # the default weight, 1/sqrt(1 + staleness)
        assert r["staleness-weights"] == pytest.approx([(1 + s) ** -0.5 for s in r["staleness"]])
    for a, b in zip(final_arrays(first), final_arrays(again), strict=True):
        assert np.array_equal(a, b)
    assert [r["staleness"] for r in again.read_metrics()[1:]] == [r["staleness"] for r in steps]


def test_batched_jobs_of_one_version_train_together_as_their_own_runs_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """training.batched: the jobs in flight on one model version train as one stacked
    round when the first arrives; the same buffers, staleness and clock as the
    per-client run, the model to float32 rounding."""
    from fedram_flwr.engines import batching

    raw = fedbuff_dict(buffer_size=2, concurrency=3)
    raw["time"] = TIMED
    off = run_fedbuff_in_process(scenario_from_dict(raw), 0, tmp_path / "off")
    raw["training"] = {**raw["training"], "batched": "on"}
    stacks: list[int] = []
    stacked_fits = batching.stacked_fits
    monkeypatch.setattr(
        batching,
        "stacked_fits",
        lambda exp, parts: stacks.append(len(parts)) or stacked_fits(exp, parts),
    )
    on = run_fedbuff_in_process(scenario_from_dict(raw), 0, tmp_path / "on")
    assert stacks and max(stacks) > 1
    rows_off, rows_on = off.read_metrics()[1:], on.read_metrics()[1:]
    for key in ("buffer-clients", "buffer-versions", "staleness", "sim-seconds"):
        assert [r[key] for r in rows_on] == [r[key] for r in rows_off], key
    for a, b in zip(final_arrays(off), final_arrays(on), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("engine", ["flwr", "deployment"])
def test_flowers_legacy_api_on_flowers_engines_refuses_the_wall_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    """FedBuff's legacy face (FedBuffServer) runs on Flower's engines, on the simulated
    clock only: ``clock: wall`` is refused before any Flower process starts."""
    path = tmp_path / "fedbuff.yaml"
    path.write_text(yaml.safe_dump(fedbuff_dict(clock="wall")))
    argv = ["--engine", engine, "--api", "legacy"]
    code = main(["run", str(path), "--out", str(tmp_path / "runs"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and "algorithm.params.clock: wall" in err and "add --api message" in err
    assert not (tmp_path / "runs").exists()


def test_the_event_loop_refuses_the_wall_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The legacy loop calls its clients one after another: only the Message API takes
    updates as replies arrive."""
    path = tmp_path / "fedbuff.yaml"
    path.write_text(yaml.safe_dump(fedbuff_dict(clock="wall")))
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 2
    assert "algorithm.params.clock: wall" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    with pytest.raises(ScenarioError, match="clock: wall .* needs Flower's Message API"):
        run_fedbuff_in_process(scenario_from_dict(fedbuff_dict(clock="wall")), 0, tmp_path / "r")


def test_fedram_run_in_process_runs_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fedbuff.yaml"
    path.write_text(yaml.safe_dump(fedbuff_dict()))
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 0
    (folder,) = (tmp_path / "runs" / "tiny-fedbuff").glob("*/seed0")
    run = RunDirectory(folder)
    assert run.status() == "complete" and run.read_metrics()[-1]["round"] == 6


def test_the_legacy_loop_refuses_it_naming_the_event_loop(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fedbuff is asynchronous: run it with .*run_fedbuff"):
        run_in_process(scenario_from_dict(fedbuff_dict()), 0, tmp_path / "run")


def test_bad_params_fail_at_load_naming_the_field() -> None:
    too_many = scenario_error(fedbuff_dict(concurrency=4))
    assert too_many.startswith(
        "algorithm.params.concurrency: 4 is outside the allowed range [1, 3]"
    )
    bad = scenario_error(fedbuff_dict(staleness="sqrt"))
    assert "algorithm.params.staleness" in bad and "'sqrt'" in bad
    assert "algorithm.params.buffer_size" in scenario_error(fedbuff_dict(buffer_size=0))


def test_flower_faces_build_the_message_strategy_and_refuse_the_legacy_one() -> None:
    """What ``flwr run .`` (server_app: ``message_strategy``) and the legacy engines ask."""
    exp = Experiment(scenario_from_dict(fedbuff_dict(buffer_size=2)), 0)
    strategy = exp.message_strategy()
    assert type(strategy).__name__ == "FedBuff" and strategy.core.buffer_size == 2
    assert strategy.seed == 0 and strategy.min_nodes == 3  # one node per partition
    with pytest.raises(ScenarioError, match="legacy Flower strategy is not built; .*FedBuffServer"):
        exp.strategy()


def test_the_first_arrival_is_at_fedscales_completion_time_by_hand(tmp_path: Path) -> None:
    """K = 1, C = N = 3, everyone available: all start at 0 and the first step is at the
    fastest client's 3 x batch x steps x ms/sample / 1000 + 2 x model kbit / bandwidth."""
    raw = fedbuff_dict(buffer_size=1, concurrency=3)
    raw["time"] = TIMED
    scenario = scenario_from_dict(raw)
    exp = Experiment(scenario, 0)
    speeds = lognormal_speeds(3, 0, (40.0, 0.8), (5000.0, 1.0))
    kbit = sum(a.nbytes for a in get_weights(exp.new_model())) / 1024 * 8
    t = scenario.training
    seconds = [
        3
        * t.batch_size
        * (t.local_epochs * -(-len(y) // t.batch_size))
        * speeds.compute_ms_per_sample[k]
        / 1000
        + 2 * kbit / speeds.bandwidth_kbps[k]
        for k, y in enumerate(exp.data.client_y)
    ]
    first = run_fedbuff_in_process(scenario, 0, tmp_path / "run").read_metrics()[1]
    assert first["buffer-clients"] == [int(np.argmin(seconds))]
    assert first["sim-seconds"] == pytest.approx(min(seconds), rel=1e-12)
    assert first["staleness"] == [0]
