"""FedScale client behaviour traces (fedram_flwr/availability/fedscale.py): a small file
in FedScale's format, its round availability checked by hand (round starts modulo
finish_time in a closed active interval), the trace oracle replaying it, and bad files
failing at load naming the client and the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.availability import fedscale_matrix, read_fedscale, read_trace
from fedram_flwr.engines.experiment import availability_law, build_oracle
from fedram_flwr.scenario.config import ScenarioError
from tests.helpers import scenario_with

# Trace ids 1, 2, 5 are partitions 0, 1, 2 by default (ascending); 7 is left over.
TRACE = {
    "1": {"active": [0, 50], "inactive": [20, 70], "finish_time": 100, "duration": 100},
    "2": {"active": [10], "inactive": [10], "finish_time": 30, "model": "x"},
    "5": {"active": [], "inactive": [], "finish_time": 40},
    "7": {"active": [0], "inactive": [1000], "finish_time": 1000},
}
# Round starts 0, 10, ..., 110 s (round_duration 10), worked out by hand:
# client 1 mod 100: 0 10 20 | 30 40 out | 50 60 70 | 80 90 out | 0 10 again;
# client 2 mod 30 is 10 in rounds 2, 5, 8, 11 only; client 5 is never active.
BY_HAND = np.array(
    [
        [1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1],
        [0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0],
        [0] * 12,
    ],
    dtype=bool,
).T


def write(tmp_path: Path, traces: dict, name: str = "behave.json") -> str:
    (tmp_path / name).write_text(json.dumps(traces))
    return str(tmp_path / name)


def test_round_availability_by_hand(tmp_path: Path) -> None:
    path = Path(write(tmp_path, TRACE))
    behaviours = read_fedscale(path, TRACE, 3)
    assert np.array_equal(fedscale_matrix(behaviours, 10.0, 12), BY_HAND)
    assert np.array_equal(read_trace(path, 3, round_duration=10.0, num_rounds=12), BY_HAND)
    # Starting 5 s later: client 1 at 5, 15, 25 (out), ...; client 2 never hits 10 mod 30.
    late = fedscale_matrix(behaviours, 10.0, 4, start_time=5.0)
    assert late[:, 0].tolist() == [True, True, False, False] and not late[:, 1:].any()
    # Partition k follows clients[k].
    chosen = read_fedscale(path, TRACE, 2, clients=(7, 2))
    assert np.array_equal(fedscale_matrix(chosen, 10.0, 12)[:, 1], BY_HAND[:, 1])
    assert fedscale_matrix(chosen, 10.0, 12)[:, 0].all()


def test_trace_oracle_replays_a_fedscale_file(tmp_path: Path, scenario_dict) -> None:
    params = {"path": write(tmp_path, TRACE), "round_duration": 10}
    s = scenario_with(scenario_dict, "trace", params)  # 6 rounds
    m = build_oracle(s, 0)
    assert [m.draw(r) for r in range(1, 7)] == [np.flatnonzero(row).tolist() for row in BY_HAND[:6]]
    assert np.allclose(availability_law(s, 0), BY_HAND[:6].mean(axis=0))
    s = scenario_with(scenario_dict, "trace", {**params, "clients": [5, 7, 1]})
    assert build_oracle(s, 0).draw(4) == [1]


def bad(record: dict) -> dict:
    return {"1": record, "2": TRACE["2"], "5": TRACE["5"]}


OK = {"active": [0], "inactive": [5], "finish_time": 10}
BAD_FILES = [
    (bad({**OK, "finish_time": 0}), r"client 1\.finish_time: 0 is not a time > 0"),
    (bad({"active": [0], "finish_time": 10}), r"client 1\.inactive: missing or not a list"),
    (bad({**OK, "active": [0, 7]}), r"client 1\.inactive: has 1 entries, active has 2"),
    (
        bad({**OK, "active": [0, 3], "inactive": [5, 8]}),
        r"client 1\.active\[1\]: 3 is before inactive\[0\] = 5; .*ordered and disjoint",
    ),
    (bad({**OK, "active": [6]}), r"client 1\.inactive\[0\]: 5 is before active\[0\] = 6"),
    (bad({**OK, "active": [-1]}), r"client 1\.active\[0\]: -1 is not a time >= 0"),
    (bad({**OK, "active": ["0"]}), r"client 1\.active\[0\]: '0' is not a time"),
    (bad([0, 5]), r"client 1: expected an object with active, inactive, finish_time"),
    ({"a": OK, "2": OK, "5": OK}, r"client 'a': ids must be integers"),
    ({"1": OK, "2": OK}, r"holds 2 clients; data\.num_clients is 3"),
    # "3" and "03" were one client, the second record silently replacing the first
    ({"1": OK, "3": OK, "03": OK, "5": OK}, r"clients '3' and '03' are both client 3"),
]


@pytest.mark.parametrize(("traces", "message"), BAD_FILES)
def test_bad_files_name_the_client_and_field(tmp_path, scenario_dict, traces, message) -> None:
    params = {"path": write(tmp_path, traces), "round_duration": 10}
    with pytest.raises(ScenarioError, match=r"availability\.params\.path: .*" + message):
        scenario_with(scenario_dict, "trace", params)


def test_bad_parameters_name_the_field(tmp_path, scenario_dict) -> None:
    path = write(tmp_path, TRACE)
    cases = [
        ({"path": path}, r"params\.round_duration: .*behave\.json is a FedScale client"),
        ({"path": path, "round_duration": 0}, r"params\.round_duration: 0(\.0)? is outside"),
        (
            {"path": path, "round_duration": 1, "start_time": -1},
            r"params\.start_time: -1(\.0)? is outside",
        ),
        ({"path": path, "round_duration": 1, "clients": [1]}, r"params\.clients: has 1 entries"),
        ({"path": path, "round_duration": 1, "clients": [1, 2, 9]}, r"clients: client 9 is not"),
    ]
    (tmp_path / "t.csv").write_text("1,0,1\n" * 6)
    csv = str(tmp_path / "t.csv")
    cases.append(({"path": csv, "round_duration": 1}, r"round_duration: applies to FedScale"))
    cases.append(({"path": csv, "clients": [0, 1, 2]}, r"params\.clients: applies to FedScale"))
    for params, message in cases:
        with pytest.raises(ScenarioError, match=message):
            scenario_with(scenario_dict, "trace", params)
