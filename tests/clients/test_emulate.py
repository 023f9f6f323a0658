"""Device speeds emulated by the ClientApp (clients/emulate.py): the pacing sleeps the
modelled seconds less the measured ones (fake clock and sleep: no real sleep, no wall
clock), the modelled seconds are the simulated clock's completion time of that client,
and with emulation off the ClientApp neither reads the clock nor sleeps."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.common import FitIns, ndarrays_to_parameters
from flwr.compat.common.recorddict_compat import fitins_to_recorddict, recorddict_to_fitres

from fedram_flwr.clients.app import project_message_app
from fedram_flwr.clients.emulate import Pacing, emulates, modelled_seconds, pace, round_task
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.node import NodeExperiment
from fedram_flwr.clock import SimulatedClock, start_round
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.timed import scenario_task, time_model
from fedram_flwr.protocol import MODELLED_SECONDS, SERVER_ROUND, SLEPT_SECONDS, TRAIN_SECONDS
from fedram_flwr.registry import load_scenario
from tests.helpers import SEED, TINY_GAUSSIAN, instruction_message

SPEEDS = {
    "law": "lognormal",
    "compute_ms_per_sample": {"median": 20.0, "sigma": 0.5},
    "bandwidth_kbps": {"median": 1000.0, "sigma": 0.3},
}


class FakeClock:
    """``now`` returns the given times in turn; ``sleep`` records what it is asked."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)
        self.slept: list[float] = []

    def now(self) -> float:
        return self.times.pop(0)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_pace_sleeps_the_modelled_seconds_less_the_measured_ones() -> None:
    clock = FakeClock(10.25)
    assert pace(1.0, 10.0, now=clock.now, sleep=clock.sleep) == Pacing(1.0, 0.25, 0.75)
    assert clock.slept == [0.75]


@pytest.mark.parametrize("finished", [12.5, 11.0])
def test_pace_never_sleeps_when_training_took_as_long_or_longer(finished: float) -> None:
    clock = FakeClock(finished)
    got = pace(1.0, 10.0, now=clock.now, sleep=clock.sleep)
    assert got == Pacing(1.0, finished - 10.0, 0.0) and clock.slept == []
    assert got.metrics() == {MODELLED_SECONDS: 1.0, SLEPT_SECONDS: 0.0}


def write_scenario(
    tmp_path: Path, emulate: bool | None, emulate_from: str = "node", **training: Any
) -> Path:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw["training"].update(training)
    if emulate is not None:
        raw["time"] = {"speeds": copy.deepcopy(SPEEDS), "emulate": emulate}
        if emulate_from != "node":
            raw["time"]["emulate_from"] = emulate_from
    path = tmp_path / f"emulate-{emulate}-{emulate_from}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_a_uniform_device_takes_fedscales_completion_time(tmp_path: Path) -> None:
    """Hand-computed: 20 ms/sample, 1000 kbit/s, batch 16, 5 steps: 3 x 16 x 5 x 20 / 1000
    = 4.8 s of computation; the logreg model's 9 float32 (36 bytes, 0.28125 kbit) down and
    up: 0.5625 / 1000 s of communication."""
    raw = yaml.safe_load(write_scenario(tmp_path, True, local_steps=5).read_text())
    raw["time"]["speeds"]["compute_ms_per_sample"]["sigma"] = 0.0
    raw["time"]["speeds"]["bandwidth_kbps"]["sigma"] = 0.0
    path = tmp_path / "uniform.yaml"
    path.write_text(yaml.safe_dump(raw))
    exp = NodeExperiment(load_scenario(path), SEED)
    for pid in range(3):
        assert modelled_seconds(exp, pid) == pytest.approx(4.8 + 0.5625 / 1000, rel=1e-12)


def test_the_modelled_seconds_are_the_simulated_clocks(tmp_path: Path) -> None:
    """Each client's modelled seconds, computed on the node, equal its completion time in
    the server's time model (the one :mod:`fedram_flwr.clock.rounds` times rounds by), at
    any round: the time model does not depend on the clock."""
    scenario = load_scenario(write_scenario(tmp_path, True))
    exp = Experiment(scenario, SEED)
    time = time_model(exp, exp.client_manager())
    ids = np.arange(3)
    for clock in (SimulatedClock(SEED), SimulatedClock(SEED, now=123.4, rounds=7)):
        want = start_round(clock, time.speeds, ids, time.task).cost.total
        got = [modelled_seconds(NodeExperiment(scenario, SEED), pid) for pid in range(3)]
        assert got == want.tolist()
    assert len(set(want.tolist())) == 3  # three different devices
    assert scenario_task(exp) == round_task(
        scenario.training, [len(y) for y in exp.data.client_y], get_weights(exp.new_model())
    )


def test_no_emulation_without_the_option(tmp_path: Path) -> None:
    assert emulates(load_scenario(write_scenario(tmp_path, True)))
    for emulate in (None, False):
        assert not emulates(load_scenario(write_scenario(tmp_path, emulate)))
    with pytest.raises(ValueError, match="the scenario has no time: section"):
        modelled_seconds(NodeExperiment(load_scenario(write_scenario(tmp_path, None)), SEED), 0)


def node(path: Path) -> Context:
    return Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": 1},
        state=RecordDict(),
        run_config={"scenario": str(path), "overrides": "", "seed": SEED},
    )


def train_message(exp: NodeExperiment, legacy: bool):
    arrays = [*get_weights(exp.new_model()), np.array([0.2], np.float32)]  # (theta, t)
    config = {SERVER_ROUND: 1, "cvar-alpha": 0.1, "cvar-gamma": 0.1, "lr-t": 0.01}
    if legacy:
        fit_ins = FitIns(ndarrays_to_parameters(arrays), config)
        return instruction_message(fitins_to_recorddict(fit_ins, keep_input=True))
    *theta, t = arrays
    content = RecordDict({"arrays": ArrayRecord([*theta, t]), "config": ConfigRecord(config)})
    return instruction_message(content)


def replied(
    path: Path, legacy: bool, clock: FakeClock, wall: FakeClock | None = None, created=0.0
) -> tuple[list[bytes], dict[str, Any]]:
    """(the reply's arrays as bytes, its metrics) of one train message (created at
    ``created`` on the wall clock ``wall``)."""
    app = project_message_app()
    wall = wall or FakeClock()
    app.now, app.sleep, app.wall_now = clock.now, clock.sleep, wall.now
    msg = train_message(NodeExperiment(load_scenario(path), SEED), legacy)
    msg.metadata.created_at = created
    reply = app(msg, node(path))
    if legacy:
        res = recorddict_to_fitres(reply.content, keep_input=False)
        arrays = [np.frombuffer(t, np.uint8) for t in res.parameters.tensors]
        metrics = dict(res.metrics)
    else:
        arrays = reply.content["arrays"].to_numpy_ndarrays()
        metrics = dict(reply.content["metrics"])
    metrics.pop(TRAIN_SECONDS)
    return [a.tobytes() for a in arrays], metrics


@pytest.mark.parametrize("legacy", [False, True], ids=["message-api", "legacy-api"])
def test_the_client_app_paces_training_and_changes_nothing_else(
    tmp_path: Path, legacy: bool
) -> None:
    """Emulation off (no time section, or ``emulate: false``): the clock is never read,
    nobody sleeps. On: one sleep of modelled - measured seconds (the fake clock measures
    0.5 s), both in the reply's metrics; the arrays and every other metric are the same."""
    off = FakeClock()
    plain = replied(write_scenario(tmp_path, None), legacy, off)
    assert replied(write_scenario(tmp_path, False), legacy, off) == plain
    assert off.slept == [] and MODELLED_SECONDS not in plain[1]

    on = FakeClock(100.0, 100.5)
    path = write_scenario(tmp_path, True)
    arrays, metrics = replied(path, legacy, on)
    modelled = modelled_seconds(NodeExperiment(load_scenario(path), SEED), 1)
    assert modelled > 0.5
    assert metrics.pop(MODELLED_SECONDS) == modelled
    assert metrics.pop(SLEPT_SECONDS) == on.slept[0] == modelled - 0.5
    assert on.slept == [modelled - 0.5] and on.times == []
    assert (arrays, metrics) == plain


def test_an_evaluate_message_is_not_paced(tmp_path: Path) -> None:
    clock = FakeClock()
    app = project_message_app()
    app.now, app.sleep = clock.now, clock.sleep
    path = write_scenario(tmp_path, True)
    exp = NodeExperiment(load_scenario(path), SEED)
    content = RecordDict(
        {
            "arrays": ArrayRecord([*get_weights(exp.new_model()), np.zeros(1, np.float32)]),
            "config": ConfigRecord(),
        }
    )
    reply = app(instruction_message(content, message_type="evaluate"), node(path))
    assert MODELLED_SECONDS not in reply.content["metrics"] and clock.slept == []


@pytest.mark.parametrize(
    ("wall_times", "measured"),
    [((1002.0, 1003.0), 3.0), ((999.0, 1000.5), 1.5)],
    ids=["from-the-push", "node-clock-behind"],
)
def test_emulating_from_the_push_counts_the_wait_before_the_node_started(
    tmp_path: Path, wall_times: tuple[float, float], measured: float
) -> None:
    """``emulate_from: push``: the time spent counts from the message's ``created_at``
    (1000.0) on the wall clock: 2 s of polling and start-up before the node started, 1 s of
    answering, 3 s measured. A node clock behind the server's (999.0 at the start) counts
    from the node's start. The node's own clock is not read."""
    path = write_scenario(tmp_path, True, "push")
    modelled = modelled_seconds(NodeExperiment(load_scenario(path), SEED), 1)
    assert modelled > 3.0
    node_clock, wall = FakeClock(), FakeClock(*wall_times)
    _, metrics = replied(path, False, node_clock, wall, created=1000.0)
    assert wall.slept == [] and wall.times == [] and node_clock.times == []
    assert node_clock.slept == [modelled - measured]
    assert metrics[SLEPT_SECONDS] == modelled - measured
