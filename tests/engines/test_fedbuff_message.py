"""FedBuff through Flower's Message API (fedram_flwr/engines/fedbuff_message.py).

- In-process (``fedram run --api message``): the strategy pushes and pulls messages on the
  in-process grid, on the simulated clock, and gives the event loop's run
  (fedram_flwr/engines/fedbuff_in_process.py) bit for bit: the same rows (steps, clients,
  versions, staleness, weights, evaluations) and the same final model, with and without
  a time model, on scenarios/fedbuff_gaussian.yaml too.
- Flower's Simulation Engine (marker ``flwr``; the test session's shared Ray cluster,
  tests/engines/background.py): ``clock: auto`` is the simulated clock there, so the
  same run again, bit for bit.
- Flower's Deployment Engine (marker ``breadth``; the shared TLS federation of three
  SuperNodes): ``auto`` is the wall clock, real asynchrony. What is deterministic is
  checked: K updates per step, staleness = version at arrival - version sent >= 0 with
  the weights it gives, one row per step, the model moved, every message pulled at the
  end (the test session checks that no process survives its federations).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines import run_fedbuff_in_process, run_message_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.registry import load_scenario, scenario_from_dict, with_overrides
from fedram_flwr.rundir import code_version
from fedram_flwr.rundir.outputs import RunDirectory
from tests.engines.background import BackgroundRuns, RunSpec
from tests.engines.test_fedbuff_in_process import TIMED, fedbuff_dict
from tests.helpers import SEED, final_arrays, without_timings

ENGINE_STEPS = 5


def timed_dict(**params: object) -> dict:
    """Three clients on the time model, C = 3 > K = 2: some updates arrive stale."""
    raw = fedbuff_dict(buffer_size=2, concurrency=3, **params)
    raw["time"] = copy.deepcopy(TIMED)
    return raw


def write_timed(folder: Path, **fields: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    raw = {**timed_dict(), "rounds": ENGINE_STEPS, "eval_every": 2, "seeds": [SEED], **fields}
    path = folder / "fedbuff.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


SIMULATION = RunSpec("simulation-message-fedbuff", write_timed, engine="simulation")
DEPLOYMENT = RunSpec("deployment-message-fedbuff", write_timed, engine="deployment")


def assert_same_run(reference: RunDirectory, run: RunDirectory) -> None:
    assert reference.status() == run.status() == "complete"
    rows = without_timings(run.read_metrics())
    assert rows == without_timings(reference.read_metrics())
    for x, y in zip(final_arrays(reference), final_arrays(run), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "raw", [fedbuff_dict(staleness="constant"), timed_dict()], ids=["ticks", "time-model"]
)
def test_the_message_api_in_process_gives_the_event_loops_run(raw: dict, tmp_path: Path) -> None:
    scenario = scenario_from_dict(raw)
    loop = run_fedbuff_in_process(scenario, SEED, tmp_path / "loop")
    messages = run_message_in_process(scenario, SEED, tmp_path / "messages")
    assert_same_run(loop, messages)
    assert (loop.api(), messages.api()) == ("legacy", "message")
    steps = messages.read_metrics()[1:]
    assert all(len(r["buffer-clients"]) == scenario.algorithm.params["buffer_size"] for r in steps)
    if "time" in raw:  # C > K on the time model: some arrive stale
        assert any(s > 0 for r in steps for s in r["staleness"])


def test_fedbuff_gaussian_through_fedram_run_api_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped scenario (6 users, log-normal speeds), both staleness weights, through
    ``fedram run --api message``: the event loop's runs, bit for bit."""
    monkeypatch.setattr("fedram_flwr.cli.commands.plot_run", lambda *args: None)
    path = Path(__file__).parents[2] / "scenarios" / "fedbuff_gaussian.yaml"
    runs = {}
    for api in ("legacy", "message"):
        assert main(["run", str(path), "--out", str(tmp_path / api), "--api", api]) == 0
        runs[api] = sorted((tmp_path / api / "fedbuff_gaussian").glob("*/seed0"))
    assert len(runs["legacy"]) == len(runs["message"]) == 2
    for loop, messages in zip(runs["legacy"], runs["message"], strict=True):
        assert_same_run(RunDirectory(loop), RunDirectory(messages))
        steps = RunDirectory(messages).read_metrics()[1:]
        assert len(steps) == 60 and max(s for r in steps for s in r["staleness"]) > 0


@pytest.mark.flwr
@pytest.mark.flower_runs(SIMULATION)
def test_the_simulation_engine_gives_the_event_loops_run(
    flower_runs: BackgroundRuns, tmp_path: Path
) -> None:
    run = flower_runs.result(SIMULATION)
    assert run.api() == "message"
    assert run.fingerprint()["code"]["source"] == code_version()["source"]
    reference = run_fedbuff_in_process(load_scenario(write_timed(tmp_path)), SEED, tmp_path / "r")
    assert_same_run(reference, run)
    assert any(s > 0 for r in run.read_metrics()[1:] for s in r["staleness"])


@pytest.mark.flwr
@pytest.mark.breadth
@pytest.mark.flower_runs(DEPLOYMENT)
def test_the_deployment_engine_takes_replies_as_they_arrive(
    flower_runs: BackgroundRuns, tmp_path: Path
) -> None:
    run = flower_runs.result(DEPLOYMENT)
    scenario = load_scenario(write_timed(tmp_path))
    k = scenario.algorithm.params["buffer_size"]
    rows = run.read_metrics()
    assert run.status() == "complete" and [r["round"] for r in rows] == list(range(6))
    for row in rows[1:]:
        assert len(row["buffer-clients"]) == len(row["buffer-versions"]) == k
        sent = row["buffer-versions"]
        assert all(0 <= v <= row["round"] - 1 for v in sent)
        assert row["staleness"] == [row["round"] - 1 - v for v in sent]
        weights = [(1 + s) ** -0.5 for s in row["staleness"]]
        assert row["staleness-weights"] == pytest.approx(weights)
        assert row["relayed"] == sorted(row["buffer-clients"]) and row["failures"] == 0
        assert "wall-seconds" in row and "sim-seconds" not in row  # the wall clock
    initial = get_weights(Experiment(scenario, SEED).new_model())
    assert any(not np.array_equal(a, b) for a, b in zip(initial, final_arrays(run), strict=True))
    log = (run.path / "flwr-logs" / "flwr-run.log").read_text(errors="replace")
    # The replies still in flight at the end are dropped: how many arrive within the drain's
    # wall-clock wait depends on the machine's load, so the test does not count them.
    assert "wall clock" in log and "FedBuff: 5 server steps" in log


def test_with_overrides_reaches_the_clock() -> None:
    """``--set algorithm.params.clock=wall`` is the one place the clock is declared."""
    scenario = with_overrides(scenario_from_dict(timed_dict()), {"algorithm.params.clock": "wall"})
    assert Experiment(scenario, SEED).message_strategy().core.clock == "wall"
