"""``time.clock: wall``: the project's runs with round policies on real replies.

- In-process through the Message API (the in-process grid answers every message at its
  push, so every reply arrives by any deadline): the run is the run without a ``time:``
  section, bit for bit, with the wall clock's counts in every row.
- The legacy API refuses it, naming the field (``fedram run`` before any run starts).
- Flower's Simulation Engine (markers ``flwr`` and ``breadth``): the same run again.
- Flower's Deployment Engine (``flwr``, ``breadth``, a federation of its own): SuperNode 2
  is SIGKILLed after round 1 of 3; round 2 started it and records it not used (dropped,
  or late and never delivered), round 3 no longer starts it, and the run completes.

No assertion reads a duration: the deadlines are far beyond a healthy round here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.engines import run_in_process, run_message_in_process
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.schema import ScenarioError
from tests.engines.background import BackgroundRuns, RunSpec
from tests.engines.cases import scenario_dict
from tests.helpers import SEED, final_arrays, surviving_processes, without_timings

WALL = {"clock": "wall", "policy": {"kind": "deadline", "deadline_s": 600.0, "late": "keep"}}
COUNTS = ("available", "started", "used", "late", "dropped", "late-delivered", "staleness",
          "not-used")  # fmt: skip


def wall_dict(folder: Path) -> dict[str, Any]:
    """The engines' MIFA case (Bernoulli availability) on the wall clock."""
    raw = scenario_dict("mifa-deadline", folder)
    raw.update(name="engines-mifa-wall", time=copy.deepcopy(WALL))
    return raw


def write_wall(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mifa-wall.yaml"
    path.write_text(yaml.safe_dump(wall_dict(folder), sort_keys=False))
    return path


def rounds(run: RunDirectory) -> list[dict[str, Any]]:
    return [row for row in run.read_metrics() if row["round"] > 0]


def assert_is_the_untimed_run(run: RunDirectory, folder: Path) -> None:
    """Every reply arrived by the deadline: the rows, less the wall clock's, and the
    model are those of the run without a time section."""
    untimed = {**wall_dict(folder), "time": None}
    reference = run_message_in_process(scenario_from_dict(untimed), SEED, folder / "untimed")
    assert run.status() == reference.status() == "complete"
    rows = rounds(run)
    for row in rows:
        assert row["used"] == row["started"] == len(row["active"]) and row["late"] == 0
        assert "wall-seconds" in row and "sim-seconds" not in row
    plain = [{k: v for k, v in r.items() if k not in COUNTS} for r in without_timings(rows)]
    assert plain == without_timings(rounds(reference))
    for x, y in zip(final_arrays(reference), final_arrays(run), strict=True):
        np.testing.assert_array_equal(x, y)


def test_in_process_a_deadline_nobody_misses_gives_the_untimed_run(tmp_path: Path) -> None:
    run = run_message_in_process(scenario_from_dict(wall_dict(tmp_path)), SEED, tmp_path / "w")
    assert_is_the_untimed_run(run, tmp_path)


def test_the_legacy_api_refuses_the_wall_clock(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="time.clock: wall runs through the Message API"):
        run_in_process(scenario_from_dict(wall_dict(tmp_path)), SEED, tmp_path / "legacy")


@pytest.mark.parametrize("engine", ["in-process", "deployment"])
def test_fedram_run_refuses_the_wall_clock_on_the_legacy_api_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    path = write_wall(tmp_path)
    argv = ["--engine", engine, "--api", "legacy"]
    code = main(["run", str(path), "--out", str(tmp_path / "runs"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and "time.clock: wall" in err and "add --api message" in err
    assert not (tmp_path / "runs").exists()


SIMULATION = RunSpec("simulation-message-wall", write_wall, engine="simulation")


@pytest.mark.flwr
@pytest.mark.breadth
@pytest.mark.flower_runs(SIMULATION)
def test_the_simulation_engine_runs_the_wall_clock(
    flower_runs: BackgroundRuns, tmp_path: Path
) -> None:
    assert_is_the_untimed_run(flower_runs.result(SIMULATION), tmp_path)


def write_killed(folder: Path) -> Path:
    """Whoever is connected trains (oracle ``connected``), FedAvg, 3 rounds, deadline 120 s
    (a healthy round took 5-50 s on the 2 shared cores), late updates kept."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = scenario_dict("fed-cvar-avg", folder)
    raw.update(
        name="wall-killed",
        algorithm={"name": "fedavg"},
        availability={"oracle": "connected", "params": {"round_timeout": 300.0}},
        time={**WALL, "policy": {**WALL["policy"], "deadline_s": 120.0}},
    )
    path = folder / "wall-killed.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


KILLED = RunSpec("deployment-wall-killed", write_killed, engine="deployment", own=True,
                 kill_after=((2, 1),))  # fmt: skip


@pytest.mark.flwr
@pytest.mark.breadth
@pytest.mark.flower_runs(KILLED)
def test_a_supernode_killed_mid_run_is_not_used_and_the_run_goes_on(
    flower_runs: BackgroundRuns,
) -> None:
    run = flower_runs.result(KILLED)
    assert run.status() == "complete" and not surviving_processes(run.path)
    r1, r2, r3 = rounds(run)
    assert r1["started"] == r1["used"] == 3 and r1["relayed"] == [0, 1, 2]
    # killed after round 1: still connected for Flower when round 2 starts it; its update
    # never comes (dropped, or late and never delivered)
    assert r2["started"] == 3 and 2 in r2["not-used"] and 2 not in r2["relayed"]
    assert r2["used"] == 2 and r2["late-delivered"] == 0
    assert 2 not in r3["active"] and r3["used"] == r3["started"] == 2
