"""Recorded traces: written and read in both formats, replayed exactly (a run's
``availability.csv`` replays the run), and every malformed file fails at load naming
the file, round and client."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.availability import (
    AvailabilityError,
    MarkovClientManager,
    TraceClientManager,
    read_trace,
    write_trace,
)
from fedram_flwr.engines import run_in_process
from fedram_flwr.engines.experiment import build_oracle
from fedram_flwr.scenario.config import ScenarioError
from tests.helpers import MARKOV_LAM, MARKOV_PI, scenario_with


def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_trace_replays_a_recorded_matrix_exactly(tmp_path: Path, suffix: str) -> None:
    recorded = MarkovClientManager(MARKOV_PI, MARKOV_LAM, seed=9).availability_matrix(50)
    recorded[7] = False  # a round with nobody
    write_trace(tmp_path / f"trace{suffix}", recorded)
    replay = TraceClientManager(read_trace(tmp_path / f"trace{suffix}", len(MARKOV_PI)), seed=1)
    assert np.array_equal(replay.availability_matrix(50), recorded)
    assert np.allclose(replay.pi, recorded.mean(axis=0))
    with pytest.raises(AvailabilityError, match="round 51 is past the end.*past_end: wrap"):
        replay.draw(51)
    wrapped = TraceClientManager(recorded, seed=0, wrap=True)
    assert wrapped.draw(51) == wrapped.draw(1) and wrapped.draw(100) == wrapped.draw(50)


def test_run_records_availability_and_a_trace_replays_it(tmp_path: Path, scenario_dict) -> None:
    """A run writes availability.csv; a run of the ``trace`` oracle on
    that file relays the same clients every round and ends with the same model."""
    params = {"pi": [0.6, 0.3, 0.8], "lam": [0.5, 0.0, 0.9]}
    s = scenario_with(scenario_dict, "markov", params)
    first = run_in_process(s, 0, tmp_path / "markov")
    recorded = read_trace(first.path / "availability.csv", 3)
    assert np.array_equal(recorded, build_oracle(s, 0).availability_matrix(s.rounds))
    trace = scenario_with(scenario_dict, "trace", {"path": str(first.path / "availability.csv")})
    again = run_in_process(trace, 0, tmp_path / "trace")
    assert np.array_equal(read_trace(again.path / "availability.csv", 3), recorded)
    rows_a, rows_b = first.read_metrics(), again.read_metrics()
    assert [(r.get("active"), r.get("relayed")) for r in rows_a] == [
        (r.get("active"), r.get("relayed")) for r in rows_b
    ]
    with np.load(first.path / "final_model.npz") as a, np.load(again.path / "final_model.npz") as b:
        assert all(np.array_equal(a[k], b[k]) for k in a.files)


TRACE_ERRORS = [
    ("t.csv", "1,0,1\n0,1\n1,1,1\n", r"ragged rows: round 1 has 3 columns, round 2 has 2"),
    ("t.csv", "1,0\n0,1\n", r"has 2 columns \(clients\); data\.num_clients is 3"),
    ("t.csv", "1,0,1\n0,2,1\n", r"round 2, client 1: '2' is not 0 or 1"),
    ("t.json", "[[0], [3]]", r"round 2 lists client 3: unknown id; allowed values: 0\.\.2"),
    ("t.json", "[[0, 0]]", r"round 1 lists client 0 twice"),
    ("t.json", "7", r"expected a list \(one per round\)"),
    ("t.json", "[]", r"the trace holds no rounds"),
    ("t.txt", "1,0,1\n", r"unknown trace format '\.txt'; allowed: \.csv"),
    ("t.csv", "1,0,1\n" * 5, r"the trace has 5 rounds but rounds is 6; .*past_end: wrap"),
]


@pytest.mark.parametrize(("name", "text", "message"), TRACE_ERRORS)
def test_bad_traces_fail_at_load(tmp_path, scenario_dict, name: str, text: str, message) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(ScenarioError, match=r"availability\.params\.path: .*" + message):
        scenario_with(scenario_dict, "trace", {"path": path})


def test_trace_errors_name_missing_file_and_bad_past_end(tmp_path, scenario_dict) -> None:
    with pytest.raises(ScenarioError, match=r"params\.path: .*nope\.csv: trace file not found"):
        scenario_with(scenario_dict, "trace", {"path": str(tmp_path / "nope.csv")})
    path = write(tmp_path, "t.csv", "1,0,1\n" * 5)
    with pytest.raises(ScenarioError, match=r"past_end: 'loop' is not allowed; .*error, wrap"):
        scenario_with(scenario_dict, "trace", {"path": path, "past_end": "loop"})
    s = scenario_with(scenario_dict, "trace", {"path": path, "past_end": "wrap"})
    assert build_oracle(s, 0).draw(6) == [0, 2]
    with pytest.raises(ScenarioError, match=r"availability\.params\.path: required key"):
        scenario_with(scenario_dict, "trace", {})
