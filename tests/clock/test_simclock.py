"""The simulated clock and round timing (fedram_flwr/clock/simclock.py): an explicit
value that only moves forward; each started client finishes after FedScale's completion
time; a round without deadline lasts until its slowest member finishes."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.clock import DeviceSpeeds, SimulatedClock, Task, model_size_kbit, start_round


def test_clock_advances_by_returning_a_new_value() -> None:
    clock = SimulatedClock(seed=4)
    later = clock.advance(2.5).next_round(10.0).next_round()
    assert (clock.now, clock.rounds) == (0.0, 0)  # unchanged
    assert (later.now, later.rounds, later.seed) == (13.5, 2, 4)
    with pytest.raises(ValueError, match="not a duration >= 0"):
        clock.advance(-1.0)
    with pytest.raises(ValueError, match="not a duration >= 0"):
        clock.next_round(float("nan"))


def test_start_round_finish_times_and_duration_by_hand() -> None:
    speeds = DeviceSpeeds(np.array([20.0, 50.0, 10.0]), np.array([1000.0, 5000.0, 250.0]))
    size = model_size_kbit(4 * 250_000)  # 7812.5 kbit each way
    task = Task(batch_size=32, local_steps=5, download_kbit=size, upload_kbit=size)
    clock = SimulatedClock(seed=0).advance(100.0)
    timing = start_round(clock, speeds, np.array([0, 1]), task)
    # Client 0: 9.6 + 15.625 = 25.225 s; client 1: 24 + 3.125 = 27.125 s.
    assert timing.finish == pytest.approx([125.225, 127.125], rel=1e-15)
    assert timing.duration == pytest.approx(27.125, rel=1e-15)
    # Client 2 on the slow link: 3 x 32 x 5 x 10 / 1000 = 4.8 s + 15625 / 250 = 62.5 s.
    slow = start_round(clock, speeds, np.array([2, 0]), task)
    assert slow.duration == pytest.approx(67.3, rel=1e-15)
    assert clock.next_round(slow.duration).now == pytest.approx(167.3, rel=1e-15)
    # Per-client steps are indexed by client id.
    steps = Task(batch_size=32, local_steps=(5, 1, 1), download_kbit=0.0, upload_kbit=0.0)
    assert start_round(clock, speeds, np.array([1]), steps).cost.computation.tolist() == [4.8]
    empty = start_round(clock, speeds, np.array([], dtype=int), task)
    assert empty.duration == 0.0 and empty.finish.size == 0


def test_bad_tasks_are_named() -> None:
    with pytest.raises(ValueError, match="batch_size: 0 must be >= 1"):
        Task(batch_size=0, local_steps=1, download_kbit=0.0, upload_kbit=0.0)
    with pytest.raises(ValueError, match="upload_kbit: -1.0 is not a size"):
        Task(batch_size=1, local_steps=1, download_kbit=0.0, upload_kbit=-1.0)
