"""A run's simulated clock, and when the clients a round starts finish.

A round driver asks three questions: at simulated time t, who is available
(an availability on the clock, :mod:`fedram_flwr.availability.timed`); if these clients
start this task now, when does each finish (:func:`start_round`); and the clock moves on
by the round's duration (:meth:`SimulatedClock.next_round`). Nothing here is random:
the speeds and availability a clock is read with are functions of the scenario seed,
so one seed gives one schedule.

Without a time model one round is one tick (:data:`TICK_SECONDS`): the clock reads
r - 1 at the start of round r and a round-indexed oracle is asked for round r
(:class:`fedram_flwr.availability.timed.RoundTicks`).

FedScale's counterpart (``fedscale/cloud/aggregation/aggregator.py``): a
``global_virtual_clock`` in seconds, advanced by ``round_duration`` after every round
(``round_completion_handler``); ``tictak_client_tasks`` computes each sampled client's
completion time and the round's duration (the slowest kept client's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from fedram_flwr.clock.speeds import CompletionTime, DeviceSpeeds, completion_time

TICK_SECONDS = 1.0
"""The simulated seconds of one round when no time model is set."""


@dataclass(frozen=True)
class SimulatedClock:
    """Simulated time of one run: an explicit value, advanced by returning a new one.

    Parameters
    ----------
    seed : int
        The scenario seed whose speeds and availability the run is read with.
    now : float
        Seconds since the run started, >= 0.
    rounds : int
        Rounds completed, >= 0.
    """

    seed: int
    now: float = 0.0
    rounds: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.now) and self.now >= 0):
            raise ValueError(f"now: {self.now!r} is not a time >= 0 (seconds)")
        if self.rounds < 0:
            raise ValueError(f"rounds: {self.rounds} is negative")

    def advance(self, seconds: float) -> SimulatedClock:
        """Return the clock ``seconds`` later (a wait, no round).

        Parameters
        ----------
        seconds : float
            >= 0 and finite.

        Returns
        -------
        SimulatedClock

        Raises
        ------
        ValueError
            If ``seconds`` is negative or not finite.
        """
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"seconds: {seconds!r} is not a duration >= 0")
        return replace(self, now=self.now + seconds)

    def next_round(self, duration: float = TICK_SECONDS) -> SimulatedClock:
        """Return the clock after a round of ``duration`` seconds (default: one tick).

        Parameters
        ----------
        duration : float
            The round's seconds, >= 0 (:attr:`RoundTiming.duration`).

        Returns
        -------
        SimulatedClock
            ``now + duration``, one more round completed.
        """
        return replace(self.advance(duration), rounds=self.rounds + 1)


@dataclass(frozen=True)
class Task:
    """What a round asks each client to do, in FedScale's terms.

    Parameters
    ----------
    batch_size : int
        Samples per local step, >= 1.
    local_steps : int or tuple of int
        Local SGD steps, >= 0: one for all clients or one per client (K).
    download_kbit, upload_kbit : float
        Kbit sent to the client and back, >= 0
        (:func:`fedram_flwr.clock.speeds.model_size_kbit`).
    """

    batch_size: int
    local_steps: int | tuple[int, ...]
    download_kbit: float
    upload_kbit: float

    def __post_init__(self) -> None:
        steps = np.asarray(self.local_steps)
        if self.batch_size < 1:
            raise ValueError(f"batch_size: {self.batch_size} must be >= 1")
        if np.any(steps < 0):
            raise ValueError(f"local_steps: {self.local_steps} must be >= 0")
        for name in ("download_kbit", "upload_kbit"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: {value!r} is not a size >= 0 (kbit)")


@dataclass(frozen=True, eq=False)
class RoundTiming:
    """When each client started on a round finishes.

    Parameters
    ----------
    start : float
        The clock's seconds when the round started.
    clients : np.ndarray
        The client ids started, shape (n,).
    cost : CompletionTime
        Each one's computation and communication seconds.
    """

    start: float
    clients: np.ndarray
    cost: CompletionTime

    @property
    def finish(self) -> np.ndarray:
        """Seconds on the clock at which each client's update arrives."""
        return self.start + self.cost.total

    @property
    def duration(self) -> float:
        """Seconds until the slowest client finishes (0 when nobody started).

        The round without deadline waits for its slowest member (FedScale's
        ``round_duration`` when every sampled client is kept).
        """
        total = self.cost.total
        return float(total.max()) if total.size else 0.0


def start_round(
    clock: SimulatedClock, speeds: DeviceSpeeds, clients: np.ndarray, task: Task
) -> RoundTiming:
    """Start ``clients`` on ``task`` at ``clock.now``: when does each finish.

    Parameters
    ----------
    clock : SimulatedClock
        The run's clock.
    speeds : DeviceSpeeds
        Every client's device.
    clients : np.ndarray
        Client ids in 0..K-1 (e.g. the available ones).
    task : Task
        The round's work; per-client ``local_steps`` are indexed by client id.

    Returns
    -------
    RoundTiming
    """
    ids = np.asarray(clients, dtype=int).reshape(-1)
    steps = np.asarray(task.local_steps)
    cost = completion_time(
        speeds.compute_ms_per_sample[ids],
        speeds.bandwidth_kbps[ids],
        batch_size=task.batch_size,
        local_steps=steps[ids] if steps.ndim else task.local_steps,
        download_kbit=task.download_kbit,
        upload_kbit=task.upload_kbit,
    )
    return RoundTiming(clock.now, ids, cost)
