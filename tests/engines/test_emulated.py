"""Device speeds emulated on Flower's Simulation Engine (``time.emulate``): the timed case
of :mod:`tests.engines.cases` (a deadline, client 2's update late and kept for MIFA) with
its devices 100 times faster, so that the ClientApps sleep a few hundredths of a second.

The run completes and is the in-process run (where no ClientApp runs and nothing sleeps):
the same clients, clock, rows and final model. Its replies carry each client's
``modelled-seconds``, the simulated clock's completion time of that client: each round's
aggregated value is the mean over the round's replies, weighted by m_i, of the clients'
completion times in the server's time model. No assertion on wall-clock time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedram_flwr.clock import SimulatedClock, start_round
from fedram_flwr.engines import run_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.timed import time_model
from fedram_flwr.protocol import MODELLED_SECONDS, SLEPT_SECONDS
from fedram_flwr.registry import load_scenario, scenario_from_dict
from tests.engines.background import BackgroundRuns, RunSpec
from tests.engines.cases import ROUNDS, assert_same_run, scenario_dict
from tests.helpers import SEED, without_timings

pytestmark = [pytest.mark.flwr, pytest.mark.breadth]

FAST_DEVICES = {
    str(k): {"computation": ms, "communication": 1000.0} for k, ms in enumerate([0.1, 0.2, 0.4])
}
"""The case's devices 100 times faster: 0.024, 0.048 and 0.096 s of computation a round."""
DEADLINE_S = 0.06
"""The case's deadline scaled alike: client 2 is late whenever it starts."""


def write_emulated(folder: Path) -> Path:
    """The timed case with fast devices, its deadline scaled, emulated."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = scenario_dict("mifa-deadline", folder)
    devices = folder / "fast-devices.json"
    devices.write_text(json.dumps(FAST_DEVICES))
    raw["time"]["speeds"]["path"] = str(devices.resolve())
    raw["time"]["policy"]["deadline_s"] = DEADLINE_S
    raw.update(name="engines-emulated", time={**raw["time"], "emulate": True})
    path = folder / "emulated.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


EMULATED = RunSpec("simulation-message-emulated", write_emulated)


@pytest.mark.flower_runs(EMULATED)
def test_an_emulated_run_is_the_simulated_one_and_reports_the_modelled_seconds(
    flower_runs: BackgroundRuns, tmp_path: Path
) -> None:
    run = flower_runs.result(EMULATED)
    scenario = load_scenario(write_emulated(tmp_path / "scenario"))
    reference = run_in_process(scenario, SEED, tmp_path / "in-process")
    assert_same_run(reference, run, EMULATED.name)
    assert without_timings(run.read_metrics()) == without_timings(reference.read_metrics())

    exp = Experiment(scenario, SEED)
    time = time_model(exp, exp.client_manager())
    ids = np.arange(scenario.data.num_clients)
    seconds = start_round(SimulatedClock(SEED), time.speeds, ids, time.task).cost.total
    modelled = dict(enumerate(seconds.tolist()))
    sizes = [len(y) for y in exp.data.client_y]
    rows = [r for r in run.read_metrics() if r["round"] > 0]
    assert len(rows) == ROUNDS
    assert any(r["not-used"] for r in rows), "no client was late: the case lost its point"
    for row in rows:
        relayed = row["relayed"]
        weights = [sizes[c] for c in relayed]
        want = sum(w * modelled[c] for w, c in zip(weights, relayed)) / sum(weights)
        assert row[f"fit-{MODELLED_SECONDS}"] == pytest.approx(want, rel=1e-12), row["round"]
        assert 0.0 <= row[f"fit-{SLEPT_SECONDS}"] <= row[f"fit-{MODELLED_SECONDS}"]
    late = {c for r in rows for c in r["not-used"]}
    assert all(modelled[c] > DEADLINE_S for c in late)
    assert all(modelled[c] <= DEADLINE_S for r in rows for c in r["relayed"] if c not in late)


SLOW_DEVICES = {
    str(k): {"computation": ms, "communication": 1000.0} for k, ms in enumerate([160, 160, 800])
}
"""Two devices of about 38 s a round and one of about 192 s (5 steps of 16)."""
SLOW_DEADLINE_S = 120.0
"""Far from both: a fast node is late only if its ClientApp took 80 s more than modelled
(start-up, polling: 10-25 s a message on two loaded cores), the slow one always is (its
ClientApp sleeps until 192 s after the push)."""
SLOW_ROUNDS = 4
"""Round 1 waits for the deadline (120 s); the fast nodes then take at least 38 s a round,
so round 4 ends at 234 s or later, after the slow node's update (192 s) arrived."""


def write_slow_nodes(folder: Path) -> Path:
    """MIFA on the wall clock on SuperNodes that take their emulated devices' time, counted
    from the push; every node available every round; late updates kept."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = scenario_dict("mifa-deadline", folder)
    devices = folder / "slow-devices.json"
    devices.write_text(json.dumps(SLOW_DEVICES))
    raw.update(
        name="engines-slow-nodes",
        rounds=SLOW_ROUNDS,
        availability={"oracle": "bernoulli", "params": {"p": [1.0, 1.0, 1.0]}},
        time={
            "clock": "wall",
            "emulate": True,
            "emulate_from": "push",
            "speeds": {"law": "fedscale", "path": str(devices.resolve())},
            "policy": {"kind": "deadline", "deadline_s": SLOW_DEADLINE_S, "late": "keep"},
        },
    )
    path = folder / "slow-nodes.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


SLOW_NODES = RunSpec("deployment-wall-slow-nodes", write_slow_nodes, engine="deployment")


@pytest.mark.flower_runs(SLOW_NODES)
def test_slow_supernodes_are_the_late_ones_and_mifa_receives_their_updates(
    flower_runs: BackgroundRuns, tmp_path: Path
) -> None:
    """On the Deployment Engine, the wall clock's deadline finds late exactly the nodes
    whose emulated devices are slower than it, in every round they start in; the slow
    node's update reaches MIFA in a later round (late-delivered, its staleness), and the
    node starts again only after it arrived."""
    run = flower_runs.result(SLOW_NODES)
    assert run.status() == "complete"
    raw = yaml.safe_load(write_slow_nodes(tmp_path / "scenario").read_text())
    for key in ("clock", "emulate", "emulate_from"):  # the same devices, simulated
        del raw["time"][key]
    scenario = scenario_from_dict(raw)
    exp = Experiment(scenario, SEED)
    time = time_model(exp, exp.client_manager())
    ids = np.arange(scenario.data.num_clients)
    seconds = start_round(SimulatedClock(SEED), time.speeds, ids, time.task).cost.total
    slow = {c for c, s in enumerate(seconds.tolist()) if s > SLOW_DEADLINE_S}
    assert slow == {2} and max(seconds[:2]) < SLOW_DEADLINE_S / 3, seconds

    rows = [r for r in run.read_metrics() if r["round"] > 0]
    assert [r["round"] for r in rows] == list(range(1, SLOW_ROUNDS + 1))
    for row in rows:
        started = set(row["active"])  # the nodes the round started (not the busy ones)
        assert {0, 1} <= started and {0, 1} <= set(row["relayed"]), row  # fast: used
        assert set(row["not-used"]) == started & slow, row  # late: exactly the slow
        assert row["started"] == len(started) and row["dropped"] == 0, row
    r1 = rows[0]
    assert r1["active"] == [0, 1, 2] and r1["used"] == 2 and r1["late"] == 1
    # the slow node's update reaches MIFA in a later round: aggregated there (relayed)
    # though not started there, with its staleness; until then the node is busy
    arrival = next(r for r in rows if r["late-delivered"])
    assert arrival["round"] >= 2 and 2 in arrival["relayed"] and 2 not in arrival["active"]
    assert arrival["late-delivered"] == 1 and arrival["staleness"] == [arrival["round"] - 1]
    assert all(2 not in r["active"] for r in rows[1 : arrival["round"]])
