"""FedBuff's asynchronous event loop, Flower-free, on the simulated clock or as updates arrive.

About C clients train at any time (Nguyen et al., AISTATS 2022, Algorithm 1): whenever
fewer than C train, the server starts clients chosen among those available and idle at
the clock's time (all of them when there are no more than needed; otherwise a uniform
draw without replacement from the ``fedbuff-select`` stream of
:mod:`fedram_flwr.rng`, keyed by (seed, draw number)); each downloads the current model
and its version; its finish time is ``now + duration`` (the time model:
:func:`fedram_flwr.clock.start_round`, or one tick per task without one). Each arriving
update goes to :meth:`~fedram_flwr.strategies.fedbuff.FedBuffCore.receive` with
staleness = server version now - version downloaded, and the server steps when K are
buffered. Once every update due at that instant is in, idle available clients are
started to refill C (so N equally fast clients with K = C = N all restart on the new
model: a synchronous round). When nobody trains, the clock waits and asks again.

Where updates come from is an :class:`Arrivals` (:func:`drive`): on the simulated clock
(:class:`SimulatedArrivals`, what :func:`run_fedbuff` uses) finish events are processed
in time order, ties by partition id, and a client's training runs when its event is
processed (the caller's ``train``: the project's local training in-process, the reply
to a pushed message in the Message API); as replies arrive
(:class:`~fedram_flwr.strategies.fedbuff_arrivals.WallArrivals`, the Message API's wall
clock) in the order a poll returns them. ``dispatch`` hears of every started job (the
Message API pushes its message); an update that fails (``None``) frees its slot and
counts as a failure.

FLSim's counterpart: ``AsyncTrainer`` (``flsim/trainers/async_trainer.py``) over an
``AsyncTrainingEventGenerator`` (``flsim/utils/async_trainer/training_event_generator.py``):
clients start at a rate and train for a drawn duration, and, as here, a client's
training is computed when its end event is processed, on the model it downloaded
("The actual training process doesn't start until on_training_end",
``AsyncTrainer.on_training_start``). FLSim starts clients at a rate; the paper and
this loop keep C in flight.

Everything is a function of its arguments: the loop's state (:class:`LoopState`) is an
explicit value, and on the simulated clock one seed gives one schedule.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from fedram_flwr.protocol import Arrays
from fedram_flwr.strategies.fedbuff import FedBuffCore
from fedram_flwr.strategies.fedbuff_jobs import (
    AvailableAt,
    Durations,
    Job,
    LoopState,
    StepRecord,
    Train,
    arrive,
    fill,
    next_job,
    start,
    withdraw,
)
from fedram_flwr.strategies.rounds import nonfinite_array

LOGGER = logging.getLogger(__name__)
"""Where the loop reports an update it refuses (NaN or inf)."""

__all__ = [
    "Arrivals",
    "FedBuffFailures",
    "Job",
    "LoopState",
    "SimulatedArrivals",
    "StepRecord",
    "WallArrivals",
    "arrive",
    "drive",
    "fill",
    "next_job",
    "run_fedbuff",
    "start",
    "withdraw",
]


class FedBuffFailures(RuntimeError):
    """Too many updates in a row failed (``max_failures`` of :func:`drive`)."""


class Arrivals(Protocol):
    """Where the loop's updates come from (:func:`drive`)."""

    idle_seconds: float  # one wait of :meth:`wait`, for the error after too many

    def dispatch(self, jobs: Sequence[Job]) -> None:
        """Hear of the jobs just started, by partition id (e.g. push their messages)."""

    def next(self, loop: LoopState) -> tuple[Job, Arrays | None, LoopState]:
        """Return the next arrival, its model (``None``: failed) and the loop without it."""

    def due(self, loop: LoopState) -> bool:
        """Whether another update arrives at this instant (the refill waits for it)."""

    def wait(self, loop: LoopState) -> LoopState:
        """Let time pass while nobody trains."""


class _Dispatching:
    """What both arrival orders share: a positive ``idle_seconds`` and ``on_dispatch``."""

    idle_seconds: float
    on_dispatch: Callable[[Sequence[Job]], None] | None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.idle_seconds) and self.idle_seconds > 0):
            raise ValueError(f"idle_seconds: {self.idle_seconds!r} must be > 0")

    def dispatch(self, jobs: Sequence[Job]) -> None:
        """Pass the started jobs to ``on_dispatch``."""
        if self.on_dispatch is not None:
            self.on_dispatch(jobs)


@dataclass
class SimulatedArrivals(_Dispatching):
    """Finish events in simulated time order; ``train`` runs when its event is processed.

    Parameters
    ----------
    train : callable
        ``train(partition_id, model, version)``: the returned model, ``None`` if it failed.
    idle_seconds : float
        How long the clock waits when nobody trains, > 0.
    on_dispatch : callable, optional
        Hears of the started jobs.
    train_together : callable, optional
        ``train_together(jobs)``: each job's update as ``train`` gives it, for several
        jobs at once (the in-process engine's stacked clients, ``training.batched``).
        Given, the first job of a model version to arrive trains with every job then in
        flight on that version, and their updates wait for their own events: an update
        depends only on its client, the model and the version (its batches are seeded
        from them), so training it before its event changes nothing.
    """

    train: Train
    idle_seconds: float = 1.0
    on_dispatch: Callable[[Sequence[Job]], None] | None = None
    train_together: Callable[[Sequence[Job]], Sequence[Arrays | None]] | None = None
    ready: dict[tuple[int, int, float], Arrays | None] = field(default_factory=dict)

    def next(self, loop: LoopState) -> tuple[Job, Arrays | None, LoopState]:
        """Take the earliest finish event and its update (trained now, or with an earlier job)."""
        job, loop = next_job(loop)
        if self.train_together is None:
            return job, self.train(job.partition_id, job.arrays, job.version), loop
        if job_key(job) not in self.ready:
            waiting = [j for j in loop.training if job_key(j) not in self.ready]
            alike = [job] + [j for j in waiting if j.version == job.version]
            for j, update in zip(alike, self.train_together(alike), strict=True):
                self.ready[job_key(j)] = update
        return job, self.ready.pop(job_key(job)), loop

    def due(self, loop: LoopState) -> bool:
        """Whether another job finishes at ``loop.now``."""
        return bool(loop.training) and loop.training[0].finish <= loop.now

    def wait(self, loop: LoopState) -> LoopState:
        """Move the clock ``idle_seconds`` on."""
        return replace(loop, now=loop.now + self.idle_seconds)


def job_key(job: Job) -> tuple[int, int, float]:
    """Return what tells jobs in flight apart: client, model version, finish time."""
    return job.partition_id, job.version, job.finish


@dataclass
class WallArrivals(_Dispatching):
    """Updates in the order they arrive: a poll's in partition-id order (real asynchrony).

    Parameters
    ----------
    poll : callable
        ``poll()``: the updates arrived since the last poll, as (partition id, model or
        ``None`` if it failed), each a client training.
    clock : callable
        ``clock()``: seconds since the start.
    idle_seconds : float
        The sleep between two empty polls, and a wait while nobody trains, > 0.
    on_dispatch : callable, optional
        Hears of the started jobs.
    sleep : callable
        ``time.sleep`` (tests give their own).
    """

    poll: Callable[[], Sequence[tuple[int, Arrays | None]]]
    clock: Callable[[], float]
    idle_seconds: float = 0.1
    on_dispatch: Callable[[Sequence[Job]], None] | None = None
    sleep: Callable[[float], None] = time.sleep
    queue: deque[tuple[int, Arrays | None]] = field(default_factory=deque)

    def next(self, loop: LoopState) -> tuple[Job, Arrays | None, LoopState]:
        """Take the next arrival, polling (with a sleep between empty polls) until one comes."""
        while not self.queue:
            arrived = sorted(self.poll(), key=lambda a: a[0])
            if not arrived:
                self.sleep(self.idle_seconds)
            self.queue.extend(arrived)
        partition_id, returned = self.queue.popleft()
        job, loop = withdraw(loop, partition_id)
        return job, returned, replace(loop, now=max(loop.now, self.clock()))

    def due(self, loop: LoopState) -> bool:
        """Whether the last poll brought more updates."""
        return bool(self.queue)

    def wait(self, loop: LoopState) -> LoopState:
        """Sleep ``idle_seconds``; the clock reads the time."""
        self.sleep(self.idle_seconds)
        return replace(loop, now=max(loop.now, self.clock()))


def drive(
    core: FedBuffCore,
    loop: LoopState,
    *,
    steps: int,
    available_at: AvailableAt,
    durations: Durations,
    arrivals: Arrivals,
    seed: int,
    max_idle_waits: int = 100_000,
    max_failures: int | None = None,
    on_step: Callable[[StepRecord, LoopState], None] | None = None,
) -> tuple[LoopState, list[StepRecord]]:
    """Run the loop from ``loop`` until ``steps`` server steps are taken.

    An update holding NaN or inf (:func:`~fedram_flwr.strategies.rounds.nonfinite_array`)
    is refused and counted as failed, on every face (event loop, legacy server, Message
    API), as a client that failed.

    Parameters
    ----------
    core : FedBuffCore
        K, C, the staleness weight and eta_g.
    loop : LoopState
        Where to start (:func:`start`).
    steps : int
        Server steps to take, >= 0.
    available_at, durations : callable
        Who is available at t; how long a client started at t takes.
    arrivals : Arrivals
        Where the updates come from.
    seed : int
        The scenario seed.
    max_idle_waits : int
        Consecutive waits with nobody training after which the run fails.
    max_failures : int, optional
        Consecutive failed updates after which the run fails (``None``: never).
    on_step : callable, optional
        Called after each step with its record and the loop (the new model in
        ``loop.server.arrays``).

    Returns
    -------
    tuple of (LoopState, list of StepRecord)
        The loop after the last step (its clients still training), and every step.

    Raises
    ------
    RuntimeError
        If nobody trains nor is available for ``max_idle_waits`` waits.
    FedBuffFailures
        After ``max_failures`` failed updates in a row.
    """

    def refill(loop: LoopState) -> LoopState:
        filled = fill(core, loop, available_at, durations, seed)
        busy = {job.partition_id for job in loop.training}
        started = sorted(
            (j for j in filled.training if j.partition_id not in busy),
            key=lambda j: j.partition_id,
        )
        if started:
            arrivals.dispatch(started)
        return filled

    loop = refill(loop)
    records: list[StepRecord] = []
    waits = streak = 0
    while len(records) < steps:
        if not loop.training:
            waits += 1
            if waits > max_idle_waits:
                raise RuntimeError(
                    f"FedBuff: nobody was available for {max_idle_waits} waits of "
                    f"{arrivals.idle_seconds} s (time {loop.now} s)"
                )
            loop = refill(arrivals.wait(loop))
            continue
        waits = 0
        job, returned, loop = arrivals.next(loop)
        if returned is not None and (problem := nonfinite_array(returned)) is not None:
            LOGGER.warning("FedBuff: partition %d refused, counted as failed: %s",
                           job.partition_id, problem)  # fmt: skip
            returned = None
        if returned is None:
            streak += 1
            loop = replace(loop, failures=loop.failures + 1)
            if max_failures is not None and streak >= max_failures:
                raise FedBuffFailures(
                    f"FedBuff: {streak} updates in a row failed (the last: partition "
                    f"{job.partition_id}, version {job.version}); the log names each"
                )
        else:
            streak = 0
            loop, record = arrive(core, loop, job, returned)
            if record is not None:
                records.append(record)
                if on_step is not None:
                    on_step(record, loop)
        if not arrivals.due(loop):
            loop = refill(loop)  # every update due now is in
    return loop, records


def run_fedbuff(
    core: FedBuffCore,
    initial_arrays: Sequence[np.ndarray],
    *,
    steps: int,
    available_at: AvailableAt,
    durations: Durations,
    train: Train,
    seed: int,
    idle_seconds: float = 1.0,
    max_idle_waits: int = 100_000,
    on_step: Callable[[StepRecord, LoopState], None] | None = None,
) -> tuple[LoopState, list[StepRecord]]:
    """Run FedBuff on the simulated clock until ``steps`` server steps are taken.

    :func:`drive` over :class:`SimulatedArrivals`; a client's training (``train``) runs
    when its finish event is processed, and a ``None`` it returns is a failure.

    Parameters
    ----------
    core, steps, available_at, durations, seed, max_idle_waits, on_step
        As for :func:`drive`.
    initial_arrays : sequence of np.ndarray
        The model at version 0.
    train : callable
        A client's local training (:data:`Train`).
    idle_seconds : float
        How long the clock waits when nobody trains, > 0.

    Returns
    -------
    tuple of (LoopState, list of StepRecord)
        The loop after the last step (its clients still training), and every step.

    Raises
    ------
    RuntimeError
        If nobody trains nor is available for ``max_idle_waits`` waits.
    """
    return drive(
        core,
        start(core, initial_arrays),
        steps=steps,
        available_at=available_at,
        durations=durations,
        arrivals=SimulatedArrivals(train, idle_seconds),
        seed=seed,
        max_idle_waits=max_idle_waits,
        on_step=on_step,
    )
