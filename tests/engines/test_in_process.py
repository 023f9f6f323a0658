"""The in-process engine: Flower's legacy server loop over clients called in this process,
recording into a run directory, and marking the run ``failed`` when anything raises."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.common.logger import FLOWER_LOGGER
from flwr.server import Server

from fedram_flwr.engines import node_context, run_in_process
from fedram_flwr.scenario.config import Scenario
from fedram_flwr.strategies import FedCVaRAvg


def status_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def test_node_context_names_the_partition() -> None:
    context = node_context(2, 5, {"seed": 1})
    assert context.node_id == 2
    assert dict(context.node_config) == {"partition-id": 2, "num-partitions": 5}
    assert dict(context.run_config) == {"seed": 1} and len(context.state) == 0


def test_a_run_records_every_round_and_completes(tiny_scenario: Scenario, tmp_path) -> None:
    run = run_in_process(tiny_scenario, 0, tmp_path / "run", label="[tiny]")
    assert status_of(run.path)["status"] == "complete"
    rows = run.read_metrics()
    assert [r["round"] for r in rows] == list(range(tiny_scenario.rounds + 1))
    # One client relayed per round by the RAM (rho sums to 1) and evaluated every 3 rounds.
    assert all(len(r["relayed"]) == 1 for r in rows[1:])
    assert [r["round"] for r in rows if "accuracy" in r] == [0, 3, 6]
    assert (run.path / "final_model.npz").is_file()


def test_a_run_that_raises_is_failed_with_the_error(
    tiny_scenario: Scenario, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(self, server_round, results, failures):
        raise ValueError(f"no aggregate in round {server_round}")

    monkeypatch.setattr(FedCVaRAvg, "aggregate_fit", boom)
    threads, level = torch.get_num_threads(), FLOWER_LOGGER.level
    with pytest.raises(ValueError, match="no aggregate in round 1"):
        run_in_process(tiny_scenario, 0, tmp_path / "run")
    status = status_of(tmp_path / "run")
    assert status["status"] == "failed"
    assert status["error"] == "ValueError: no aggregate in round 1"
    assert "in boom" in status["traceback"]
    # What the run changed for its duration is restored.
    assert (torch.get_num_threads(), FLOWER_LOGGER.level) == (threads, level)


def test_ctrl_c_in_a_library_call_records_the_run_interrupted(
    tiny_scenario: Scenario, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (KeyboardInterrupt) in ``run_in_process`` called from a user's own code,
    not ``fedram run``: the run is ``interrupted``, not ``failed``, and the interrupt
    goes on to the caller."""

    def ctrl_c(self, server_round, results, failures):
        raise KeyboardInterrupt

    monkeypatch.setattr(FedCVaRAvg, "aggregate_fit", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        run_in_process(tiny_scenario, 0, tmp_path / "run")
    status = status_of(tmp_path / "run")
    assert status["status"] == "interrupted"
    assert status["error"].startswith("KeyboardInterrupt")


def test_a_server_loop_that_stops_early_is_a_failure(
    tiny_scenario: Scenario, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Server, "fit", lambda self, num_rounds, timeout: None)
    with pytest.raises(RuntimeError, match="before the last round"):
        run_in_process(tiny_scenario, 0, tmp_path / "run")
    status = status_of(tmp_path / "run")
    assert status["status"] == "failed" and "before the last round" in status["error"]


def test_received_arrays_are_decoded_once_per_bytes_and_fresh_for_each_client(
    monkeypatch,
) -> None:
    """ReceivedArrays: each call gives new arrays equal to npy_array's, decoding only
    when the bytes objects differ from the last call's."""
    from fedram_flwr.engines import in_process
    from fedram_flwr.protocol import npy_array, npy_bytes

    decoded = []
    monkeypatch.setattr(in_process, "npy_array", lambda b: decoded.append(b) or npy_array(b))
    received = in_process.ReceivedArrays()
    model = [np.arange(6, dtype=np.float32).reshape(2, 3), np.asfortranarray(np.eye(3))]
    tensors = [npy_bytes(a) for a in model]
    first, second = received(tensors), received(list(tensors))
    assert len(decoded) == 2  # one decoding for both clients of the round
    for a, b, m in zip(first, second, model):
        assert np.array_equal(a, m) and np.array_equal(b, m) and a is not b
        assert (
            a.flags.writeable and a.flags.f_contiguous == npy_array(npy_bytes(m)).flags.f_contiguous
        )
    first[0][0, 0] = 99.0  # a client's arrays are its own
    assert received(tensors)[0][0, 0] == 0.0
    next_round = [npy_bytes(a + 1) for a in model]
    assert np.array_equal(received(next_round)[0], model[0] + 1) and len(decoded) == 4
