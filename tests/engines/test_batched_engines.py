"""training.batched in the in-process engines of both of Flower's APIs: every algorithm
family's run with its clients' SGD stacked equals its per-client run to float32 rounding
(the stacked kernels sum in another order; a few rounds of a few steps stay within
1e-5): the same clients each round, the same rows and reports; ``off`` is the per-client
path itself."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedram_flwr.clients.models import build_model
from fedram_flwr.engines.batching import batching_mode, stacked_is_faster
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.in_process import run_in_process
from fedram_flwr.engines.message_in_process import run_message_in_process
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.schema import load_yaml
from tests.engines.cases import CASES, SEED, scenario_dict
from tests.helpers import final_arrays, relayed, scenario_error

TOL = dict(rtol=1e-5, atol=1e-6)


def batched_scenario(name: str, folder: Path, mode: str, device: str = "cpu"):
    raw = scenario_dict(name, folder)
    raw["training"] = {**raw["training"], "batched": mode, "device": device}
    return scenario_from_dict(raw)


def assert_close_runs(reference: RunDirectory, run: RunDirectory, name: str) -> None:
    """Same clients each round, same rows and final summary (keys, integers, strings;
    floats to 1e-4 relative), same final model to TOL."""
    assert reference.status() == run.status() == "complete", name
    assert relayed(reference) == relayed(run), f"{name}: relayed clients differ"
    for a, b in zip(final_arrays(reference), final_arrays(run), strict=True):
        np.testing.assert_allclose(b, a, **TOL, err_msg=f"{name}: final models differ")
    assert_close_values(reference.read_summary()["final"], run.read_summary()["final"], name)
    rows_a, rows_b = reference.read_metrics(), run.read_metrics()
    assert len(rows_a) == len(rows_b), name
    for row_a, row_b in zip(rows_a, rows_b):
        assert_close_values(row_a, row_b, name)


def assert_close_values(a: dict, b: dict, name: str) -> None:
    """The same keys; floats (alone or in lists) within 1e-4 relative, the rest equal;
    timings aside."""
    assert a.keys() == b.keys(), name
    for key in (k for k in a if not k.endswith("seconds")):
        x, y = a[key], b[key]
        if isinstance(x, float) or isinstance(y, float):
            assert y == pytest.approx(x, rel=1e-4, abs=1e-5), f"{name}: {key}"
        elif isinstance(x, list) and x and isinstance(x[0], float):
            np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")
        else:
            assert x == y, f"{name}: {key}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_legacy_batched_run_equals_the_per_client_run(name: str, tmp_path: Path) -> None:
    off = run_in_process(batched_scenario(name, tmp_path, "off"), SEED, tmp_path / "off")
    on = run_in_process(batched_scenario(name, tmp_path, "on"), SEED, tmp_path / "on")
    assert_close_runs(off, on, name)


@pytest.mark.parametrize(
    ("name", "stacked"),
    [("fedar", True), ("ca-fed", True), ("mifa-deadline", True), ("scaffold", False)],
)
def test_a_legacy_round_is_one_stacked_job_where_its_objective_has_a_stacked_form(
    name: str, stacked: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ERM and CA-Fed rounds (on the simulated clock too) run as one stacked job without
    a client call; SCAFFOLD's (a hook per step) through the relay of its clients' calls."""
    from fedram_flwr.engines import batching

    used = {"stacked": 0, "relay": 0}
    stacked_fits, relay_run = batching.stacked_fits, batching.BatchedRound.run

    def counted_fits(*args):
        used["stacked"] += 1
        return stacked_fits(*args)

    def counted_run(self, calls):
        used["relay"] += len(calls) > 1
        return relay_run(self, calls)

    monkeypatch.setattr(batching, "stacked_fits", counted_fits)
    monkeypatch.setattr(batching.BatchedRound, "run", counted_run)
    run_in_process(batched_scenario(name, tmp_path, "on"), SEED, tmp_path / "on")
    assert (used["stacked"] > 0, used["relay"] > 0) == (stacked, not stacked), used


@pytest.mark.parametrize("name", ["fed-cvar-avg", "scaffold", "ca-fed"])
def test_message_api_batched_run_equals_the_per_client_run(name: str, tmp_path: Path) -> None:
    off = run_message_in_process(batched_scenario(name, tmp_path, "off"), SEED, tmp_path / "off")
    on = run_message_in_process(batched_scenario(name, tmp_path, "on"), SEED, tmp_path / "on")
    assert_close_runs(off, on, name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible")
@pytest.mark.parametrize("name", ["fed-cvar-avg", "scaffold", "fedar"])
def test_batched_run_on_a_gpu_equals_the_per_client_run(name: str, tmp_path: Path) -> None:
    off = run_in_process(batched_scenario(name, tmp_path, "off", "cuda"), SEED, tmp_path / "off")
    on = run_in_process(batched_scenario(name, tmp_path, "on", "cuda"), SEED, tmp_path / "on")
    assert_close_runs(off, on, name)


def test_off_is_the_default_and_leaves_the_scenario_as_it_was(tmp_path: Path) -> None:
    raw = scenario_dict("fedar", tmp_path)
    plain = scenario_from_dict(raw)
    off = batched_scenario("fedar", tmp_path, "off")
    assert plain.training.batched == "off" and plain.to_dict() == off.to_dict()
    assert "batched" not in plain.to_dict()["training"]  # fingerprints of older runs hold
    assert batching_mode(Experiment(off, SEED)) is None


def test_modes_and_models_that_cannot_batch_are_named(tmp_path: Path) -> None:
    raw = scenario_dict("fedar", tmp_path)
    raw["training"] = {**raw["training"], "batched": "sometimes"}
    assert "training.batched" in scenario_error(raw)
    assert "auto" in scenario_error(raw)
    raw["training"]["batched"] = True  # YAML's unquoted on
    assert scenario_from_dict(raw).training.batched == "on"
    assert load_yaml("training: {batched: off}", "test")["training"]["batched"] is False
    raw["training"]["batched"] = False
    assert scenario_from_dict(raw).training.batched == "off"
    on = batched_scenario("fedar", tmp_path, "on")
    assert batching_mode(Experiment(on, SEED)) == "on"
    auto = batched_scenario("fedar", tmp_path, "auto")
    assert batching_mode(Experiment(auto, SEED)) == "auto"  # logreg on the CPU: stacked
    assert stacked_is_faster(build_model("logreg", (6,), 3, 0))
    assert not stacked_is_faster(build_model("cnn", (1, 28, 28), 10, 0))  # auto: the loop


def test_on_with_a_model_that_cannot_batch_fails_naming_why_and_auto_keeps_the_loop(
    tmp_path: Path,
) -> None:
    model = build_model("fedawe-cnn-cinic10", (3, 8, 8), 10, 0)  # dropout 0.2 (Table 6)

    def exp(mode: str) -> SimpleNamespace:
        scenario = SimpleNamespace(
            training=SimpleNamespace(batched=mode), model=SimpleNamespace(name="fedawe-cnn")
        )
        return SimpleNamespace(scenario=scenario, client_model=lambda: model)

    with pytest.raises(ValueError, match="training.batched: on, but model.name fedawe-cnn"):
        batching_mode(exp("on"))
    assert batching_mode(exp("auto")) is None
