"""FedBuff's jobs and the loop's state, Flower-free.

Who trains, on which version, and what one arrival does: the pieces
:mod:`fedram_flwr.strategies.fedbuff_loop` drives (and re-exports). :class:`Job` is a
client training, :class:`LoopState` the server's state, the clock, the jobs and the
draws made, :class:`StepRecord` one server step; :func:`fill` keeps C training (every
idle available client when no more are idle than needed, else a uniform draw without
replacement from the ``fedbuff-select`` stream of :mod:`fedram_flwr.rng`, keyed by
(seed, draw number)); :func:`next_job` takes the earliest finish event, :func:`withdraw`
the job whose update arrived (the wall clock), and :func:`arrive` hands an update to
:meth:`~fedram_flwr.strategies.fedbuff.FedBuffCore.receive`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedram_flwr.protocol import Arrays
from fedram_flwr.rng import stream
from fedram_flwr.strategies.fedbuff import FedBuffCore, FedBuffState

__all__ = [
    "AvailableAt",
    "Durations",
    "Job",
    "LoopState",
    "StepRecord",
    "Train",
    "arrive",
    "fill",
    "next_job",
    "start",
    "withdraw",
]

AvailableAt = Callable[[float], np.ndarray]
"""``available_at(t)``: the client ids available at time t (seconds)."""
Durations = Callable[[np.ndarray, float], np.ndarray]
"""``durations(ids, t)``: seconds each client started at t takes (train and transfer)."""
Train = Callable[[int, Arrays, int], "Arrays | None"]
"""``train(partition_id, model, version)``: the model the client returns (``None``: it failed)."""


@dataclass(frozen=True)
class Job:
    """A client training.

    Parameters
    ----------
    partition_id : int
        The client.
    start, finish : float
        Seconds when it started and when its update arrives (``inf``: not known, on the
        wall clock).
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
        Seconds when the K-th update arrived (simulated, or since the start on the wall clock).
    clients, staleness, weights : tuple
        The buffered updates' partition ids, staleness and weights, in arrival order.
    versions : tuple of int
        The versions they downloaded (staleness = ``version`` - 1 - each).
    failures : int
        Updates that failed since the previous step.
    """

    version: int
    time: float
    clients: tuple[int, ...]
    staleness: tuple[int, ...]
    weights: tuple[float, ...]
    versions: tuple[int, ...] = ()
    failures: int = 0


@dataclass(frozen=True)
class LoopState:
    """The loop between events.

    Parameters
    ----------
    server : FedBuffState
        The server's state.
    now : float
        Seconds (simulated, or since the start on the wall clock).
    training : tuple of Job
        The clients training, by (finish, partition id).
    draws : int
        Random selections made so far (the next one's key).
    failures : int
        Updates that failed since the last step.
    """

    server: FedBuffState
    now: float = 0.0
    training: tuple[Job, ...] = ()
    draws: int = 0
    failures: int = 0


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
        Who is available at ``loop.now`` (asked only when fewer than C train); how long
        each started client takes.
    seed : int
        The scenario seed (the ``fedbuff-select`` stream).

    Returns
    -------
    LoopState
        With the started jobs (downloading ``loop.server``'s model and version).
    """
    need = core.concurrency - len(loop.training)
    if need <= 0:
        return loop
    busy = {job.partition_id for job in loop.training}
    idle = np.array(sorted(set(np.asarray(available_at(loop.now)).tolist()) - busy), dtype=int)
    if idle.size == 0:
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


def withdraw(loop: LoopState, partition_id: int) -> tuple[Job, LoopState]:
    """Take the job of ``partition_id`` (its update arrived), the clock unchanged.

    Raises
    ------
    KeyError
        If that client is not training.
    """
    for i, job in enumerate(loop.training):
        if job.partition_id == partition_id:
            return job, replace(loop, training=loop.training[:i] + loop.training[i + 1 :])
    raise KeyError(f"partition {partition_id} is not training")


def arrive(
    core: FedBuffCore, loop: LoopState, job: Job, returned: Arrays
) -> tuple[LoopState, StepRecord | None]:
    """Hand ``job``'s update to the core at ``loop.now``; the step it made, if any."""
    server, stepped = core.receive(loop.server, job.partition_id, job.arrays, job.version, returned)
    if stepped is None:
        return replace(loop, server=server), None
    record = StepRecord(
        server.version,
        loop.now,
        stepped.clients,
        stepped.staleness,
        stepped.weights,
        stepped.versions,
        loop.failures,
    )
    return replace(loop, server=server, failures=0), record
