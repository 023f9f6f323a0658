"""Availability on the simulated clock (fedram_flwr/availability/timed.py): FedScale
traces replayed in seconds on a hand-made trace, FedScale's own moving index replayed
and where it differs, the diurnal law's hourly frequencies against p_i(t), every
round-indexed oracle unchanged one round per tick, and a run's schedule a function of
its seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.availability import (
    AvailableAt,
    BernoulliClientManager,
    CyclicClientManager,
    DiurnalLaw,
    MarkovClientManager,
    NonStationaryClientManager,
    RandomAccessClientManager,
    RoundTicks,
    TraceAvailability,
    TraceClientManager,
    clock_availability,
    fedscale_is_active,
    read_fedscale,
)
from fedram_flwr.availability.fedscale import Behaviour, parse_behaviour
from fedram_flwr.clock import DeviceSpeeds, SimulatedClock, Task, lognormal_speeds, start_round
from fedram_flwr.scenario.config import ClockAvailabilityConfig

# Client 1: [0, 59.9] and [120, 180] of every 300 s; client 2: [60, 90] of every 200 s.
TRACE = {
    "1": {"active": [0, 120], "inactive": [59.9, 180], "finish_time": 300},
    "2": {"active": [60], "inactive": [90], "finish_time": 200, "model": "x"},
}
# t -> who, worked out by hand (ends included; t mod finish_time past the first cycle):
BY_HAND = {
    0.0: [0],
    59.9: [0],  # client 1's end, included
    60.0: [1],  # 60 > 59.9: client 1 out; client 2's start, included
    90.0: [1],
    90.1: [],
    120.0: [0],
    180.0: [0],
    200.0: [],  # client 1: 200 in the gap; client 2: 200 mod 200 = 0, out
    260.0: [1],  # client 2: 260 mod 200 = 60
    300.0: [0],  # client 1: 0 again; client 2: 100, out
    359.9: [0],  # client 1: 59.9; client 2: 159.9
    420.0: [0],  # client 1: 120; client 2: 20
    460.0: [0, 1],  # client 1: 160, in [120, 180]; client 2: 60
}


def behaviours(tmp_path: Path) -> list[Behaviour]:
    path = tmp_path / "behave.json"
    path.write_text(json.dumps(TRACE))
    return read_fedscale(path, TRACE, 2)


def test_trace_replay_in_seconds_by_hand(tmp_path: Path) -> None:
    replay = TraceAvailability(behaviours(tmp_path))
    assert {t: replay.available_at(t) for t in BY_HAND} == BY_HAND
    # Starting 60 s into the trace: t = 0 reads the trace at 60.
    late = TraceAvailability(behaviours(tmp_path), start_time=60.0)
    assert late.available_at(0.0) == [1] and late.available_at(60.0) == [0]
    # Asking again, in any order, gives the same answers (a function of t alone).
    assert [replay.available_at(t) for t in sorted(BY_HAND, reverse=True)] == [
        BY_HAND[t] for t in sorted(BY_HAND, reverse=True)
    ]


# FedScale's own fixture (tests/cloud/internal/test_client_metadata.py).
FEDSCALE_FIXTURE = {"active": [1, 3, 6, 9], "inactive": [1, 4, 7, 10], "finish_time": 10}


def test_fedscale_moving_index_reproduces_fedscale_own_test() -> None:
    b = parse_behaviour("fixture", FEDSCALE_FIXTURE)
    times = [2, 6, 8, 9, 10, 15]
    flags, index = fedscale_is_active(b, times)
    assert flags.tolist() == [False, True, False, True, False, False]  # FedScale's asserts
    assert index == 3
    # On these queries the interval test agrees.
    assert b.available_at(np.array(times, dtype=float)).tolist() == flags.tolist()


def test_where_fedscale_moving_index_differs_from_the_interval_test() -> None:
    b = parse_behaviour("fixture", FEDSCALE_FIXTURE)
    # Skipping an interval: at 2 the index moves to [3, 4]; at 9 it moves one step, to
    # [6, 7], and answers False although 9 lies in [9, 10].
    assert fedscale_is_active(b, [2, 9])[0].tolist() == [False, False]
    assert b.available_at(np.array([2.0, 9.0])).tolist() == [False, True]
    # Past finish_time: the index stays on the last interval ([9, 10], whose end is
    # finish_time, so no query ever moves it on): the second cycle is never seen.
    times = [1, 3.5, 6.5, 9.5, 13.5, 16.5, 19.5]
    fedscale, _ = fedscale_is_active(b, times)
    assert fedscale.tolist() == [True, True, True, True, False, False, True]
    assert b.available_at(np.array(times)).all()
    # With a gap after the last interval a query in it moves the index back to 0.
    gap = parse_behaviour("gap", {"active": [0, 50], "inactive": [10, 60], "finish_time": 100})
    times = [5, 55, 105, 170, 205]  # mod 100: 5, 55, 5, 70, 5
    assert fedscale_is_active(gap, times)[0].tolist() == [True, True, False, False, True]
    assert gap.available_at(np.array(times, dtype=float)).tolist() == [
        True, True, True, False, True,
    ]  # fmt: skip
    # No interval: never active (FedScale divides by zero).
    empty = parse_behaviour("empty", {"active": [], "inactive": [], "finish_time": 5})
    assert not fedscale_is_active(empty, [0, 1])[0].any()


def test_diurnal_frequencies_per_hour_follow_p() -> None:
    base = np.array([0.2, 0.4, 0.5, 0.3])
    peaks = np.array([0.0, 6.0, 12.0, 18.0]) * 3600
    law = DiurnalLaw(base, 0.8, peaks, seed=5, slot_seconds=300.0)
    days, per_hour = 40, 12  # 12 slots of 300 s an hour
    slots = np.arange(days * 24 * per_hour)
    flags = np.array([law.slot_flags(int(s)) for s in slots])  # (slots, K)
    hour = (slots // per_hour) % 24
    for h in range(24):
        seen = flags[hour == h].mean(axis=0)
        # The slots of hour h start at h x 3600 + j x 300: p is drawn at the slot's start.
        p = law.probabilities(h * 3600.0 + 300.0 * np.arange(per_hour)).mean(axis=0)
        n = days * per_hour
        assert np.all(np.abs(seen - p) <= 4.5 * np.sqrt(p * (1 - p) / n) + 1e-12), (h, seen, p)
    # Over whole days the frequency is base_i (nothing clipped: base (1 + 0.8) < 1).
    assert np.all(np.abs(flags.mean(axis=0) - base) < 4 * np.sqrt(base * (1 - base) / len(slots)))


def test_diurnal_law_by_hand_and_per_slot() -> None:
    # p = clip(0.6 (1 + cos(2 pi (t - peak) / day)), 0, 1): 1 at the peak (1.2 clipped),
    # 0 twelve hours later, 0.6 six hours from it.
    law = DiurnalLaw(np.full(3, 0.6), 1.0, np.array([0.0, 43200.0, 21600.0]), seed=1)
    assert law.probabilities(0.0) == pytest.approx([1.0, 0.0, 0.6])
    assert law.available_at(0.0)[0] == 0 and 1 not in law.available_at(0.0)
    assert 1 not in law.available_at(30.0)  # client 1's trough: p = 0
    for s in range(50):  # the peak slot is always on, the trough slot always off
        flags = law.slot_flags(s * 1440)  # slot start s x 86400 s
        assert flags[0] and not flags[1]
    # Constant within a slot (60 s), a function of (seed, slot).
    for t in (0.0, 3601.0, 86399.0):
        start = 60.0 * (t // 60)
        assert law.available_at(t) == law.available_at(start) == law.available_at(start + 59.9)
    with pytest.raises(ValueError, match=r"peak_seconds: give one finite time or one per"):
        DiurnalLaw(np.full(3, 0.6), 1.0, np.zeros(2), seed=1)
    other = DiurnalLaw(np.full(3, 0.6), 1.0, np.array([0.0, 43200.0, 21600.0]), seed=2)
    draws = [law.slot_flags(s)[2] for s in range(200)]
    assert draws != [other.slot_flags(s)[2] for s in range(200)]


def oracles(seed: int) -> dict[str, object]:
    pi = np.array([0.2, 0.5, 0.8, 0.3])
    trace = np.random.default_rng(0).random((7, 4)) < 0.5
    return {
        "ram": RandomAccessClientManager([0.1, 0.2, 0.3, 0.4], seed, clients_per_round=2),
        "bernoulli": BernoulliClientManager(pi, seed),
        "markov": MarkovClientManager(pi, [0.3, 0.5, 0.1, 0.6], seed),
        "clustered": MarkovClientManager([0.4, 0.7], [0.5, 0.2], seed, cluster_of=[0, 0, 1, 1]),
        "cyclic": CyclicClientManager([0, 1, 2, 3], 4, 2, seed),
        "trace": TraceClientManager(trace, seed, wrap=True),
        "nonstationary": NonStationaryClientManager(pi, "sine", seed, period=6),
    }


@pytest.mark.parametrize("name", sorted(oracles(0)))
def test_round_ticks_ask_every_oracle_exactly_its_round(name: str) -> None:
    oracle, twin = oracles(3)[name], oracles(3)[name]
    ticks = RoundTicks(oracle)
    clock = SimulatedClock(seed=3)
    for r in range(1, 41):  # no time model: one tick per round, round r at t = r - 1
        assert clock.now == r - 1
        assert ticks.available_at(clock.now) == twin.draw(r)
        clock = clock.next_round()
    # Markov chains are a function of (seed, round): asking in any order is the same.
    assert [ticks.available_at(t) for t in (39.0, 0.0, 17.0)] == [
        twin.draw(40), twin.draw(1), twin.draw(18),
    ]  # fmt: skip


def test_equally_fast_clients_without_deadline_replay_the_round_run() -> None:
    """Every client equally fast, no deadline, ticks of the common round duration: the
    time-aware loop asks the oracle for round 1, 2, ... exactly as the round run does."""
    speeds = DeviceSpeeds.uniform(4, 20.0, 1000.0)
    task = Task(batch_size=32, local_steps=5, download_kbit=700.3, upload_kbit=700.3)
    duration = start_round(SimulatedClock(0), speeds, np.arange(4), task).duration  # 11.0006
    oracle, twin = oracles(9)["markov"], oracles(9)["markov"]
    ticks = RoundTicks(oracle, tick_seconds=duration)
    clock = SimulatedClock(seed=9)
    for r in range(1, 501):
        ids = ticks.available_at(clock.now)
        assert ids == twin.draw(r), r
        timing = start_round(clock, speeds, np.array(ids, dtype=int), task)
        clock = clock.next_round(timing.duration if ids else duration)
    assert clock.rounds == 500


def schedule(seed: int, rounds: int = 30) -> list[tuple[float, list[int], list[float]]]:
    """A run's schedule: at each round's start, who is available and when each finishes."""
    speeds = lognormal_speeds(6, seed, (30.0, 0.7), (800.0, 1.0))
    law = DiurnalLaw(np.full(6, 0.4), 0.5, np.arange(6) * 4 * 3600.0, seed, slot_seconds=30.0)
    task = Task(batch_size=16, local_steps=10, download_kbit=1000.0, upload_kbit=1000.0)
    clock, out = SimulatedClock(seed), []
    for _ in range(rounds):
        ids = law.available_at(clock.now)
        timing = start_round(clock, speeds, np.array(ids, dtype=int), task)
        out.append((clock.now, ids, timing.finish.tolist()))
        clock = clock.next_round(timing.duration) if ids else clock.advance(30.0)
    return out


def test_same_seed_same_schedule_another_seed_another() -> None:
    a = schedule(12)
    assert a == schedule(12)
    assert a != schedule(13)
    assert sum(bool(ids) for _, ids, _ in a) > 5 and a[-1][0] > 0  # the run did something


def test_clock_availability_builds_each_law(tmp_path: Path) -> None:
    oracle = oracles(0)["bernoulli"]
    ticks = clock_availability(ClockAvailabilityConfig(tick_seconds=5.0), 4, 0, oracle)
    assert ticks.available_at(12.0) == oracle.draw(3)
    with pytest.raises(ValueError, match="rounds needs the scenario's oracle"):
        clock_availability(ClockAvailabilityConfig(), 4, 0)
    path = tmp_path / "behave.json"
    path.write_text(json.dumps(TRACE))
    trace = clock_availability(ClockAvailabilityConfig(law="fedscale", path=str(path)), 2, 0)
    assert {t: trace.available_at(t) for t in BY_HAND} == BY_HAND
    with pytest.raises(ValueError, match=r"time\.availability\.clients: client 9 is not in"):
        clock_availability(
            ClockAvailabilityConfig(law="fedscale", path=str(path), clients=(9, 1)), 2, 0
        )
    with pytest.raises(ValueError, match=r"time\.availability\.path: .*trace file not found"):
        clock_availability(ClockAvailabilityConfig(law="fedscale", path="/nope.json"), 2, 0)
    diurnal = clock_availability(ClockAvailabilityConfig(law="diurnal", base=(0.3,)), 5, 7)
    assert diurnal.num_clients == 5
    assert all(isinstance(law, AvailableAt) for law in (ticks, trace, diurnal))
    assert diurnal.available_at(100.0) == DiurnalLaw(np.full(5, 0.3), 0.5, 0.0, 7).available_at(
        100.0
    )
