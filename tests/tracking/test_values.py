"""What a tracker receives of a run: parameters as dotted keys, a row's numbers, the
summary's numbers (no tracker needed)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fedram_flwr.scenario.schema import ScenarioError
from fedram_flwr.tracking import TRACK_ENV, requested
from fedram_flwr.tracking.trackers import png_size
from fedram_flwr.tracking.values import metrics_of, params_of, summary_metrics


def test_params_are_the_scenarios_fields_as_dotted_strings_without_its_seed_list() -> None:
    scenario = {
        "name": "tiny",
        "seeds": [0, 1],
        "algorithm": {"name": "fed-cvar-avg", "params": {"alpha": 0.1}},
        "availability": {"oracle": "ram", "params": {"rho": [0.5, 0.5]}},
    }
    assert params_of(scenario, seed=1, engine="in-process") == {
        "name": "tiny",
        "algorithm.name": "fed-cvar-avg",
        "algorithm.params.alpha": "0.1",
        "availability.oracle": "ram",
        "availability.params.rho": "[0.5, 0.5]",
        "seed": "1",
        "engine": "in-process",
    }


def test_a_rows_numbers_are_logged_and_its_lists_counted() -> None:
    row = {
        "round": 3,
        "accuracy": 0.5,
        "loss": float("nan"),
        "t": 2,
        "relayed": [0, 2],
        "active": [0, 1, 2],
        "failed": [],
        "staleness": {"mean": 1.5},
        "note": "text",
    }
    got = metrics_of(row)
    assert math.isnan(got.pop("loss"))
    assert got == {
        "accuracy": 0.5,
        "t": 2.0,
        "relayed.count": 2.0,
        "active.count": 3.0,
        "failed.count": 0.0,
        "staleness.mean": 1.5,
    }


def test_the_summarys_numbers_leave_out_relay_counts_and_nan() -> None:
    summary = {
        "rounds": 6,
        "final": {"accuracy": 0.9, "round": 6},
        "relay-counts": {"0": 3},
        "mean-round-seconds": float("nan"),
        "warnings": ["x"],
    }
    assert summary_metrics(summary) == {"rounds": 6.0, "final.accuracy": 0.9, "final.round": 6.0}


def test_trackers_come_from_the_option_else_the_environment(monkeypatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())
    monkeypatch.setenv(TRACK_ENV, "mlflow, tensorboard,mlflow")
    assert requested(None) == ["mlflow", "tensorboard"]
    assert requested(["wandb"]) == ["wandb"]
    monkeypatch.setenv(TRACK_ENV, "")
    assert requested(None) == []
    monkeypatch.setenv(TRACK_ENV, "neptune")
    with pytest.raises(ScenarioError, match=r"\$FEDRAM_TRACK: unknown tracker 'neptune'; allowed"):
        requested(None)


def test_a_missing_package_is_one_line_naming_the_extra(monkeypatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ScenarioError) as err:
        requested(["mlflow"])
    assert str(err.value) == (
        "--track mlflow: the mlflow package is not installed; it comes with the 'tracking' "
        "extra: pip install 'fedram-flwr[tracking]'"
    )


def test_png_size_reads_the_header() -> None:
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (640).to_bytes(4, "big")
    assert png_size(header + (480).to_bytes(4, "big")) == (640, 480)
    with pytest.raises(ValueError, match="not a PNG"):
        png_size(b"GIF89a" + bytes(20))


def test_a_runs_end_is_complete_failed_or_interrupted() -> None:
    from fedram_flwr.cli.interrupt import RunInterrupted
    from fedram_flwr.tracking.run import end_of

    assert end_of(None) == "complete"
    assert end_of(RuntimeError("x")) == "failed"
    assert end_of(SystemExit(143)) == "failed"  # SIGTERM's cleanup
    assert end_of(KeyboardInterrupt()) == "interrupted"
    assert end_of(RunInterrupted(Path("r"), 3, 6, resumes=True)) == "interrupted"
