"""The Message-API recorder: a strategy's diagnostics, an empty round, its start, its
MetricRecord."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord
from flwr.serverapp.strategy import FedAvg as MessageFedAvg

from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.grid import InProcessGrid
from fedram_flwr.engines.message_in_process import MessageComponents, run_message_in_process
from fedram_flwr.engines.message_recording import MessageRecordingStrategy, metric_record
from fedram_flwr.rundir import WEIGHTS_FILE
from fedram_flwr.scenario.config import Scenario
from tests.helpers import counting_app, final_arrays

Q = np.array([0.5, 0.25, 0.25])


class SkipsRoundTwo(MessageFedAvg):
    """Flower's FedAvg that sends nothing in round 2 and reports ``q`` like the
    project's strategies."""

    def configure_train(self, server_round, arrays, config, grid):
        return (
            [] if server_round == 2 else super().configure_train(server_round, arrays, config, grid)
        )

    def diagnostics(self) -> dict:
        return {"q": Q}


def components(exp: Experiment) -> MessageComponents:
    return MessageComponents(
        strategy=SkipsRoundTwo(fraction_evaluate=0.0, min_available_nodes=3),
        client_app=counting_app(),
        initial_arrays=[np.zeros_like(a) for a in get_weights(exp.new_model())],
    )


def test_an_empty_round_and_the_strategys_weights_are_recorded(
    tiny_scenario: Scenario, tmp_path: Path
) -> None:
    """Round 2 trains nobody: its row is empty, its weights zero, the model stays (each
    node's k-th call adds k d_p: rounds 1, 3, 4, 5, 6 add D (1 + 2 + 3 + 4 + 5))."""
    run = run_message_in_process(tiny_scenario, 0, tmp_path / "run", components)
    rows = run.read_metrics()
    assert (rows[2]["active"], rows[2]["relayed"], rows[2]["failed"]) == ([], [], [])
    assert rows[3]["relayed"] == [0, 1, 2]
    weights = np.load(run.path / WEIGHTS_FILE)
    expected = np.tile(Q.astype(np.float32), (tiny_scenario.rounds, 1))
    expected[1] = 0
    np.testing.assert_array_equal(weights, expected)
    for final in final_arrays(run):
        np.testing.assert_array_equal(final, np.full_like(final, 2.25 * 15))


def test_start_runs_flowers_loop_only(tiny_scenario: Scenario, tmp_path: Path) -> None:
    class OwnLoop(MessageFedAvg):
        def start(self, *args, **kwargs):
            raise AssertionError("not called")

    with pytest.raises(TypeError, match="OwnLoop overrides Strategy.start"):
        MessageRecordingStrategy(OwnLoop(), None, partition_of=int, num_clients=1, num_rounds=1)
    recorder = MessageRecordingStrategy(
        MessageFedAvg(), None, partition_of=int, num_clients=1, num_rounds=2
    )
    grid = InProcessGrid(counting_app(), 1)
    with pytest.raises(ValueError, match=r"num_rounds is the recorder's \(2\)"):
        recorder.start(grid, ArrayRecord([np.zeros(1)]), num_rounds=3)


def test_metric_record_keeps_numbers_and_lists_of_numbers() -> None:
    record = metric_record(
        np.float32(0.5), {"acc": 1, "per-class": [np.float64(0.25), 1], "name": "x", "no": []}
    )
    assert dict(record) == {"loss": 0.5, "acc": 1, "per-class": [0.25, 1.0]}
