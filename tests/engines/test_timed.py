"""The in-process engine on a simulated clock: round policies.

The tiny 2-D scenario: 3 clients of 40 samples, batch 16, 2 epochs (6 steps each), a
logistic model of 9 float32 (36 bytes: 0.28125 kbit each way, FedScale's size).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from flwr.common import Code, FitRes, Parameters, Status

from fedram_flwr.engines import run_in_process, run_message_in_process
from fedram_flwr.engines.timed import rebased
from fedram_flwr.protocol import npy_array, npy_bytes
from fedram_flwr.registry import ALGORITHMS, scenario_from_dict
from fedram_flwr.report.run_plots import plot_run
from fedram_flwr.rundir import CHECKPOINT_FILE, checkpoint, read_checkpoint
from tests.helpers import TINY_GAUSSIAN, final_arrays, without_timings

STEPS, BATCH, KBIT = 6, 16, 36 / 1024 * 8
ALWAYS = {"oracle": "bernoulli", "params": {"p": [1.0, 1.0, 1.0]}}
TIME_KEYS = (
    "sim-seconds", "sim-round-seconds", "available", "started", "used", "late", "dropped",
    "late-delivered", "staleness", "not-used",
)  # fmt: skip


def seconds(ms_per_sample: float, kbps: float) -> float:
    """FedScale's completion time of the tiny scenario's round on one device."""
    return 3 * BATCH * STEPS * ms_per_sample / 1000 + 2 * KBIT / kbps


def tiny(algorithm: dict, availability: dict, time: dict | None, rounds: int = 6) -> dict:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(rounds=rounds, algorithm=algorithm, availability=availability)
    if time is not None:
        raw["time"] = time
    return raw


def capacity(tmp_path: Path, ms: list[float], kbps: float = 1000.0) -> str:
    """A FedScale device-capacity file: client k computes at ms[k] ms per sample."""
    path = tmp_path / "capacity.json"
    path.write_text(
        json.dumps({str(k): {"computation": c, "communication": kbps} for k, c in enumerate(ms)})
    )
    return str(path)


def without_clock(rows: list[dict]) -> list[dict]:
    return [without_timings({k: v for k, v in r.items() if k not in TIME_KEYS}) for r in rows]


@pytest.mark.parametrize(
    ("algorithm", "availability"),
    [
        ({"name": "fed-cvar-avg", "params": {"alpha": 0.1, "gamma": 0.1, "lr_t": 0.01}},
         TINY_GAUSSIAN["availability"]),
        ({"name": "mifa"}, {"oracle": "bernoulli", "params": {"p": [0.5, 0.3, 0.2]}}),
    ],
)  # fmt: skip
def test_equal_speeds_and_no_deadline_is_the_round_based_run(
    tmp_path: Path, algorithm: dict, availability: dict
) -> None:
    """sigma 0, wait-all, one oracle round per round's duration: bit for bit today's run,
    a round (empty ones too) lasting what FedScale's formula gives."""
    duration = seconds(20.0, 1000.0)
    time = {
        "speeds": {
            "compute_ms_per_sample": {"median": 20.0, "sigma": 0.0},
            "bandwidth_kbps": {"median": 1000.0, "sigma": 0.0},
        },
        "availability": {"law": "rounds", "tick_seconds": duration},
    }
    plain = run_in_process(
        scenario_from_dict(tiny(algorithm, availability, None)), 0, tmp_path / "a"
    )
    timed = run_in_process(
        scenario_from_dict(tiny(algorithm, availability, time)), 0, tmp_path / "b"
    )
    for x, y in zip(final_arrays(plain), final_arrays(timed), strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    rows = timed.read_metrics()
    assert without_clock(rows) == without_clock(plain.read_metrics())
    assert [r["sim-round-seconds"] for r in rows[1:]] == pytest.approx([duration] * 6, rel=1e-12)
    assert rows[-1]["sim-seconds"] == pytest.approx(6 * duration, rel=1e-12)
    assert all(r["dropped"] == r["late"] == 0 for r in rows[1:])
    if algorithm["name"] == "mifa":  # a round nobody is available in lasts one tick too
        assert any(r["started"] == 0 for r in rows[1:])


def test_a_deadline_drops_the_slow_client_every_round(tmp_path: Path) -> None:
    """Client 2 needs 11.52 s, the deadline is 6 s: 3 started, 2 used, 1 dropped."""
    time = {
        "speeds": {"law": "fedscale", "path": capacity(tmp_path, [10.0, 20.0, 40.0])},
        "policy": {"kind": "deadline", "deadline_s": 6.0},
    }
    run = run_in_process(
        scenario_from_dict(tiny({"name": "mifa"}, ALWAYS, time)), 0, tmp_path / "r"
    )
    rows = run.read_metrics()[1:]
    assert [(r["started"], r["used"], r["dropped"], r["late"]) for r in rows] == [(3, 2, 1, 0)] * 6
    assert [r["relayed"] for r in rows] == [[0, 1]] * 6
    assert [r["failed"] for r in rows] == [[]] * 6  # dropped is no failure
    assert [r["sim-seconds"] for r in rows] == pytest.approx([6.0 * r for r in range(1, 7)])
    assert run.read_summary()["sim-seconds"] == pytest.approx(36.0)
    hours = plot_run(run.path)["accuracy_time.png"]["1:overall"][:, 0]
    assert hours == pytest.approx([0.0, 18 / 3600, 36 / 3600])  # evaluated rounds 0, 3, 6


def test_a_late_update_is_delivered_in_the_round_it_arrives_in(tmp_path: Path) -> None:
    """Round 1 (t 0..6): client 2 is late, arriving at 11.52 s. Round 2 starts clients 0
    and 1 only (2 is busy) and ends at 6 + 5.76 s: client 2's update arrives in it, one
    round stale. Round 3 is round 1 again, and so on."""
    time = {
        "speeds": {"law": "fedscale", "path": capacity(tmp_path, [10.0, 20.0, 40.0])},
        "policy": {"kind": "deadline", "deadline_s": 6.0, "late": "keep"},
    }
    scenario = scenario_from_dict(tiny({"name": "mifa"}, ALWAYS, time))
    rows = run_in_process(scenario, 0, tmp_path / "r").read_metrics()[1:]
    odd = (3, 2, 0, 1, 0, [])  # started, used, dropped, late, delivered, staleness
    even = (2, 2, 0, 0, 1, [1])
    got = [
        tuple(r[k] for k in ("started", "used", "dropped", "late", "late-delivered", "staleness"))
        for r in rows
    ]
    assert got == [odd, even] * 3
    assert [r["relayed"] for r in rows] == [[0, 1], [0, 1, 2]] * 3
    assert [r["sim-round-seconds"] for r in rows] == pytest.approx([6.0, seconds(20.0, 1000.0)] * 3)
    # fedavg keeps no memory: the late update is dropped when it arrives
    fedavg = scenario_from_dict(tiny({"name": "fedavg"}, ALWAYS, time))
    rows = run_in_process(fedavg, 0, tmp_path / "f").read_metrics()[1:]
    assert [(r["late-delivered"], r["dropped"]) for r in rows] == [(0, 0), (0, 1)] * 3
    assert [r["relayed"] for r in rows] == [[0, 1]] * 6


MEMORY = {"fedar", "fedawe", "fedstale", "fedstale-active", "fedvarp", "mifa"}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_runs_under_a_deadline_and_the_memories_take_late_updates(
    tmp_path: Path, name: str
) -> None:
    """Round 2 delivers client 2's late update of round 1 to the algorithms that keep
    per-client memory; the others drop it when it arrives."""
    time = {
        "speeds": {"law": "fedscale", "path": capacity(tmp_path, [10.0, 20.0, 40.0])},
        "policy": {"kind": "deadline", "deadline_s": 6.0, "late": "keep"},
    }
    raw = tiny({"name": name}, ALWAYS, time, rounds=2)
    rows = run_in_process(scenario_from_dict(raw), 0, tmp_path / "r").read_metrics()[1:]
    assert [r["late"] for r in rows] == [1, 0]
    memory = name in MEMORY
    assert [(r["late-delivered"], r["dropped"]) for r in rows] == [
        (0, 0),
        (int(memory), 1 - memory),
    ]


def test_over_selection_uses_the_first_to_finish(tmp_path: Path) -> None:
    """select 1, over 2: two of the three start, the faster one's update is used."""
    time = {
        "speeds": {"law": "fedscale", "path": capacity(tmp_path, [10.0, 20.0, 40.0])},
        "policy": {"kind": "over-selection", "select": 1, "over": 2.0},
    }
    run = run_in_process(
        scenario_from_dict(tiny({"name": "fedavg"}, ALWAYS, time)), 0, tmp_path / "r"
    )
    speed = [10.0, 20.0, 40.0]
    for r in run.read_metrics()[1:]:
        assert (r["started"], r["used"], r["dropped"]) == (2, 1, 1) and len(r["active"]) == 2
        assert r["relayed"] == [min(r["active"])]
        assert r["sim-round-seconds"] == pytest.approx(seconds(speed[min(r["active"])], 1000.0))


def test_same_seed_same_schedule(tmp_path: Path) -> None:
    time = {
        "speeds": {
            "compute_ms_per_sample": {"median": 20.0, "sigma": 0.8},
            "bandwidth_kbps": {"median": 1000.0, "sigma": 1.0},
        },
        "availability": {"law": "diurnal", "base": [0.6], "slot_seconds": 5.0},
        "policy": {"kind": "deadline", "deadline_s": 6.0, "late": "keep"},
    }
    raw = tiny({"name": "fedvarp"}, ALWAYS, time, rounds=8)
    a = run_in_process(scenario_from_dict(raw), 3, tmp_path / "a").read_metrics()
    b = run_in_process(scenario_from_dict(raw), 3, tmp_path / "b").read_metrics()
    keys = ("active", "relayed", *TIME_KEYS)
    assert [[r.get(k) for k in keys] for r in a] == [[r.get(k) for k in keys] for r in b]
    assert len({tuple(r["active"]) for r in a[1:]}) > 1  # the schedule is not trivial
    c = run_in_process(scenario_from_dict(raw), 4, tmp_path / "c").read_metrics()
    assert [r["sim-seconds"] for r in c[1:]] != [r["sim-seconds"] for r in a[1:]]


def test_a_late_update_is_rebased_on_the_current_model() -> None:
    def params(*values: float) -> Parameters:
        return Parameters([npy_bytes(np.array(values, np.float32))], "numpy.ndarray")

    res = FitRes(Status(Code.OK, ""), params(1.0, 5.0), 10, {})
    moved = rebased(res, sent=params(2.0, 2.0), current=params(10.0, 20.0))
    assert npy_array(moved.parameters.tensors[0]).tolist() == [9.0, 23.0]
    assert moved.num_examples == 10


def deadline(tmp_path: Path, late: str) -> dict:
    return {
        "speeds": {"law": "fedscale", "path": capacity(tmp_path, [10.0, 20.0, 40.0])},
        "policy": {"kind": "deadline", "deadline_s": 6.0, "late": late},
    }


def over_selection(tmp_path: Path, late: str) -> dict:
    return {
        "speeds": {"law": "fedscale", "path": capacity(tmp_path, [10.0, 20.0, 40.0])},
        "policy": {"kind": "over-selection", "select": 1, "over": 2.0, "late": late},
    }


def lognormal_diurnal(tmp_path: Path, late: str) -> dict:
    return {
        "speeds": {
            "compute_ms_per_sample": {"median": 20.0, "sigma": 0.8},
            "bandwidth_kbps": {"median": 1000.0, "sigma": 1.0},
        },
        "availability": {"law": "diurnal", "base": [0.6], "slot_seconds": 5.0},
        "policy": {"kind": "deadline", "deadline_s": 6.0, "late": late},
    }


@pytest.mark.parametrize(
    ("name", "time", "late", "delivered"),
    [
        ("mifa", deadline, "keep", True),  # re-based late updates
        ("fedawe", deadline, "keep", True),  # late updates as sent
        ("fedavg", deadline, "keep", False),  # dropped when they arrive
        ("fed-cvar-avg", deadline, "drop", False),
        ("fedavg", over_selection, "drop", False),
        ("fedvarp", over_selection, "keep", True),
        ("fedvarp", lognormal_diurnal, "keep", True),
    ],
)
def test_the_message_api_gives_the_legacy_timed_run(
    tmp_path: Path, name: str, time, late: str, delivered: bool
) -> None:
    """The Message API in-process (``TimedAvailability``) and the legacy API
    (``TimedServer``) call one timed round: the same clients started, used, late and
    dropped, the same clock, rows and final model, bit for bit."""
    availability = ALWAYS if time is not lognormal_diurnal else TINY_GAUSSIAN["availability"]
    scenario = scenario_from_dict(tiny({"name": name}, availability, time(tmp_path, late), 8))
    legacy = run_in_process(scenario, 1, tmp_path / "legacy")
    message = run_message_in_process(scenario, 1, tmp_path / "message")
    assert message.api() == "message"
    for x, y in zip(final_arrays(legacy), final_arrays(message), strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    rows, got = legacy.read_metrics(), message.read_metrics()
    assert [[r.get(k) for k in TIME_KEYS] for r in got] == [
        [r.get(k) for k in TIME_KEYS] for r in rows
    ]
    assert without_timings(got) == without_timings(rows)
    assert legacy.read_summary()["sim-seconds"] == message.read_summary()["sim-seconds"]
    # the cases exercise what they are for
    assert sum(r["late-delivered"] for r in rows[1:]) > 0 if delivered else True
    assert sum(r["dropped"] + r["late"] for r in rows[1:]) > 0


def test_an_interrupted_timed_run_resumes_to_the_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MIFA under a deadline with late updates kept, a checkpoint every 3 rounds: after
    round 3 client 2's update is in flight (it arrives in round 4, re-based). Failed at
    round 6's checkpoint and resumed from round 3's, the run ends with the clock, rows and
    model of a run never stopped."""
    scenario = scenario_from_dict(tiny({"name": "mifa"}, ALWAYS, deadline(tmp_path, "keep"), 8))
    reference = run_in_process(scenario, 0, tmp_path / "reference", checkpoint_every=0)
    write = checkpoint.write_checkpoint

    def write_or_fail(folder: Path, saved: checkpoint.Checkpoint) -> Path:
        if saved.round == 6:
            raise RuntimeError("round 6")
        return write(folder, saved)

    with monkeypatch.context() as patch:
        patch.setattr(checkpoint, "write_checkpoint", write_or_fail)
        with pytest.raises(RuntimeError, match="round 6"):
            run_in_process(scenario, 0, tmp_path / "run", checkpoint_every=3)
    saved = read_checkpoint(tmp_path / "run" / CHECKPOINT_FILE)
    (late,) = saved.strategy["clock"]["pending"]
    assert (saved.round, late["update"].client, late["update"].started_round) == (3, 2, 3)
    assert saved.strategy["clock"]["clock"].now == pytest.approx(12.0 + seconds(20.0, 1000.0))
    resumed = run_in_process(scenario, 0, tmp_path / "run", checkpoint_every=3)
    assert json.loads((resumed.path / "status.json").read_text())["resumed-from"] == 3
    for x, y in zip(final_arrays(reference), final_arrays(resumed), strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    rows, got = reference.read_metrics(), resumed.read_metrics()
    assert [[r.get(k) for k in TIME_KEYS] for r in got] == [
        [r.get(k) for k in TIME_KEYS] for r in rows
    ]
    assert without_timings(got) == without_timings(rows)
    assert [r["late-delivered"] for r in got[1:]] == [0, 1] * 4
