"""FedBuff's asynchronous event loop on the simulated clock, Flower-free.

About C clients train at any time (Nguyen et al., AISTATS 2022, Algorithm 1): whenever
fewer than C train, the server starts clients chosen among those available and idle at
the clock's time (all of them when there are no more than needed; otherwise a uniform
draw without replacement from the ``fedbuff-select`` stream of
:mod:`fedram_flwr.rng`, keyed by (seed, draw number)); each downloads the current model
and its version; its finish time is ``now + duration`` (the time model:
:func:`fedram_flwr.clock.start_round`, or one tick per task without one). Finish events
are processed in time order, ties by partition id: the client's training runs (the
caller's ``train``, the project's local training in the engine), its update goes to
:meth:`~fedram_flwr.strategies.fedbuff.FedBuffCore.receive` with staleness = server
version now - version downloaded, and the server steps when K are buffered. Once every
update arriving at that instant is in, idle available clients are started to refill C
(so N equally fast clients with K = C = N all restart on the new model: a synchronous
round). When nobody trains and nobody is available, the clock waits ``idle_seconds``
and asks again.

FLSim's counterpart: ``AsyncTrainer`` (``flsim/trainers/async_trainer.py``) over an
``AsyncTrainingEventGenerator`` (``flsim/utils/async_trainer/training_event_generator.py``):
clients start at a rate and train for a drawn duration, and, as here, a client's
training is computed when its end event is processed, on the model it downloaded
("The actual training process doesn't start until on_training_end",
``AsyncTrainer.on_training_start``). FLSim starts clients at a rate; the paper and
this loop keep C in flight.

Everything is a function of its arguments: the loop's state (:class:`LoopState`) is an
explicit value, and one seed gives one schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedram_flwr.protocol import Arrays
from fedram_flwr.rng import stream
from fedram_flwr.strategies.fedbuff import FedBuffCore, FedBuffState

__all__ = ["Job", "LoopState", "StepRecord", "fill", "next_job", "run_fedbuff", "start"]

AvailableAt = Callable[[float], np.ndarray]
"""``available_at(t)``: the client ids available at simulated time t (seconds)."""
Durations = Callable[[np.ndarray, float], np.ndarray]
"""``durations(ids, t)``: seconds each client started at t takes (train and transfer)."""
Train = Callable[[int, Arrays, int], Arrays]
"""``train(partition_id, model, version)``: the model the client returns."""


@dataclass(frozen=True)
class Job:
    """A client training.

    Parameters
    ----------
    partition_id : int
        The client.
    start, finish : float
        Simulated seconds it started and its update arrives.
    version : int
        The model version it downloaded.
    arrays : Arrays
        That model.
    """

    partition_id: int
    start: float
    finish: float
    version: int
    arrays: Arrays


@dataclass(frozen=True)
class StepRecord:
    """One server step.

    Parameters
    ----------
    version : int
        The model version the step made (1 for the first).
    time : float
        Simulated seconds when the K-th update arrived.
    clients, staleness, weights : tuple
        The buffered updates' partition ids, staleness and weights, in arrival order.
    """

    version: int
    time: float
    clients: tuple[int, ...]
    staleness: tuple[int, ...]
    weights: tuple[float, ...]


@dataclass(frozen=True)
class LoopState:
    """The loop between events.

    Parameters
    ----------
    server : FedBuffState
        The server's state.
    now : float
        Simulated seconds.
    training : tuple of Job
        The clients training, by (finish, partition id).
    draws : int
        Random selections made so far (the next one's key).
    """

    server: FedBuffState
    now: float = 0.0
    training: tuple[Job, ...] = ()
    draws: int = 0


def start(core: FedBuffCore, initial_arrays: Sequence[np.ndarray]) -> LoopState:
    """Return the loop at time 0: version 0, nobody training."""
    return LoopState(core.init(initial_arrays))


def fill(
    core: FedBuffCore,
    loop: LoopState,
    available_at: AvailableAt,
    durations: Durations,
    seed: int,
) -> LoopState:
    """Start idle available clients until C train (or none is left).

    Parameters
    ----------
    core : FedBuffCore
        ``concurrency`` is C.
    loop : LoopState
        The loop now.
    available_at, durations : callable
        Who is available at ``loop.now``; how long each started client takes.
    seed : int
        The scenario seed (the ``fedbuff-select`` stream).

    Returns
    -------
    LoopState
        With the started jobs (downloading ``loop.server``'s model and version).
    """
    need = core.concurrency - len(loop.training)
    busy = {job.partition_id for job in loop.training}
    idle = np.array(sorted(set(np.asarray(available_at(loop.now)).tolist()) - busy), dtype=int)
    if need <= 0 or idle.size == 0:
        return loop
    draws = loop.draws
    if idle.size > need:
        rng = stream("fedbuff-select", seed, draws)
        idle = np.sort(rng.choice(idle, size=need, replace=False))
        draws += 1
    seconds = np.asarray(durations(idle, loop.now), dtype=np.float64).reshape(-1)
    server = loop.server
    jobs = [
        Job(int(pid), loop.now, loop.now + float(d), server.version, server.arrays)
        for pid, d in zip(idle, seconds, strict=True)
    ]
    training = tuple(sorted((*loop.training, *jobs), key=lambda j: (j.finish, j.partition_id)))
    return replace(loop, training=training, draws=draws)


def next_job(loop: LoopState) -> tuple[Job, LoopState]:
    """Take the earliest finishing job (ties: the lower partition id); the clock moves to it."""
    job, rest = loop.training[0], loop.training[1:]
    return job, replace(loop, now=max(loop.now, job.finish), training=rest)


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
    """Run FedBuff until ``steps`` server steps are taken.

    Parameters
    ----------
    core : FedBuffCore
        K, C, the staleness weight and eta_g.
    initial_arrays : sequence of np.ndarray
        The model at version 0.
    steps : int
        Server steps to take, >= 0.
    available_at, durations, train : callable
        Who is available at t; how long a client started at t takes; a client's local
        training (:data:`Train`).
    seed : int
        The scenario seed.
    idle_seconds : float
        How long the clock waits when nobody trains, > 0.
    max_idle_waits : int
        Consecutive waits after which the run fails (nobody ever comes).
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
    """
    if not (math.isfinite(idle_seconds) and idle_seconds > 0):
        raise ValueError(f"idle_seconds: {idle_seconds!r} must be > 0")
    loop = fill(core, start(core, initial_arrays), available_at, durations, seed)
    records: list[StepRecord] = []
    waits = 0
    while len(records) < steps:
        if not loop.training:
            waits += 1
            if waits > max_idle_waits:
                raise RuntimeError(
                    f"FedBuff: nobody was available for {max_idle_waits} waits of "
                    f"{idle_seconds} s (simulated time {loop.now} s)"
                )
            loop = fill(
                core, replace(loop, now=loop.now + idle_seconds), available_at, durations, seed
            )
            continue
        waits = 0
        job, loop = next_job(loop)
        returned = train(job.partition_id, job.arrays, job.version)
        server, stepped = core.receive(
            loop.server, job.partition_id, job.arrays, job.version, returned
        )
        loop = replace(loop, server=server)
        if stepped is not None:
            record = StepRecord(
                server.version, loop.now, stepped.clients, stepped.staleness, stepped.weights
            )
            records.append(record)
            if on_step is not None:
                on_step(record, loop)
        if not (loop.training and loop.training[0].finish <= loop.now):
            loop = fill(core, loop, available_at, durations, seed)  # all of now's arrived
    return loop, records
