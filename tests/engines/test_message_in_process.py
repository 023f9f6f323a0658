"""The Message-API in-process engine: Flower's own Message-API FedAvg and a test ClientApp
over the in-process grid, recorded in a run directory like the legacy engine's runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.common.logger import FLOWER_LOGGER

from fedram_flwr.availability import read_trace
from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.in_process import run_in_process
from fedram_flwr.engines.message_in_process import (
    MessageComponents,
    legacy_server_side,
    run_message_in_process,
)
from fedram_flwr.scenario.config import Scenario
from tests.helpers import counting_app, final_arrays, message_fedavg

D = 2.25  # sum_p n_p d_p / sum_p n_p of tests.helpers.counting_app


def fedavg_components(fail: tuple[int, int] | None = None):
    def components(exp: Experiment) -> MessageComponents:
        k = exp.scenario.data.num_clients
        return MessageComponents(
            strategy=message_fedavg(k),
            client_app=counting_app(fail),
            initial_arrays=[np.zeros_like(a) for a in get_weights(exp.new_model())],
            evaluate=lambda r, arrays: (float(arrays[1][0]), {"accuracy": 0.5, "x": [1.0]}),
            run_config={"seed": exp.seed},
        )

    return components


def status_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def test_flower_fedavg_run_is_recorded_like_a_legacy_run(
    tiny_scenario: Scenario, tmp_path: Path
) -> None:
    """Every node trains every round; its k-th call adds k d_p, so after round r the model
    is D r (r + 1) / 2 in every coordinate."""
    run = run_message_in_process(tiny_scenario, 0, tmp_path / "run", fedavg_components())
    rounds = tiny_scenario.rounds
    assert status_of(run.path)["status"] == "complete"
    for final in final_arrays(run):  # the model's weight and bias
        np.testing.assert_array_equal(final, np.full_like(final, D * rounds * (rounds + 1) / 2))
    rows = run.read_metrics()
    assert [r["round"] for r in rows] == list(range(rounds + 1))
    assert [r["loss"] for r in rows] == [D * r * (r + 1) / 2 for r in range(rounds + 1)]
    for r in rows[1:]:
        assert (r["active"], r["relayed"], r["failed"], r["failures"]) == (
            [0, 1, 2],
            [0, 1, 2],
            [],
            0,
        )
        assert r["fit-partition-id"] == 1.25  # FedAvg's weighted mean of the partition ids
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["relay-counts"] == {"0": rounds, "1": rounds, "2": rounds}
    assert summary["final"]["accuracy"] == 0.5
    trace = read_trace(run.path / "availability.csv", 3)
    assert trace.shape == (rounds, 3) and trace.all()


def test_a_failing_client_is_recorded_as_failed(tiny_scenario: Scenario, tmp_path: Path) -> None:
    run = run_message_in_process(tiny_scenario, 0, tmp_path / "run", fedavg_components((2, 2)))
    row = run.read_metrics()[2]
    assert (row["active"], row["relayed"], row["failed"], row["failures"]) == (
        [0, 1, 2],
        [0, 1],
        [2],
        1,
    )
    assert status_of(run.path)["status"] == "complete"


def test_a_run_that_raises_is_failed_and_restores_what_it_changed(
    tiny_scenario: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    components = fedavg_components()

    def broken(exp: Experiment) -> MessageComponents:
        parts = components(exp)

        def boom(server_round, replies):
            raise ValueError(f"no aggregate in round {server_round}")

        monkeypatch.setattr(parts.strategy, "aggregate_train", boom)
        return parts

    threads, level = torch.get_num_threads(), FLOWER_LOGGER.level
    with pytest.raises(ValueError, match="no aggregate in round 1"):
        run_message_in_process(tiny_scenario, 0, tmp_path / "run", broken)
    status = status_of(tmp_path / "run")
    assert (status["status"], status["error"]) == ("failed", "ValueError: no aggregate in round 1")
    assert (torch.get_num_threads(), FLOWER_LOGGER.level) == (threads, level)


def test_the_legacy_server_side_gives_the_legacy_runs_first_row(
    tiny_scenario: Scenario, tmp_path: Path
) -> None:
    """Round 0 (before any training) evaluates the same first broadcast in both APIs."""
    legacy = run_in_process(tiny_scenario, 0, tmp_path / "legacy").read_metrics()[0]
    initial, evaluate = legacy_server_side(Experiment(tiny_scenario, 0))
    loss, metrics = evaluate(0, initial)
    assert {"loss": loss, **metrics} == {k: legacy[k] for k in ("loss", *metrics)}
    assert "t" in metrics  # Fed-CVaR-Avg's t beside the model's metrics
