"""Device speeds emulated on real processes: a ClientApp that takes its device's time.

With ``time.emulate: true`` each ClientApp, when it trains, takes the seconds the
scenario's time model gives its round: FedScale's completion time (computation +
communication, :func:`fedram_flwr.clock.start_round`) of this client's task, from the
same seeded device speeds (:func:`fedram_flwr.clock.scenario_speeds`) and the same task
(:func:`round_task`) as the simulated clock. It measures the time already spent and
sleeps for the rest (:func:`pace`), so a Deployment on one machine behaves like a
federation of slow and fast devices. The time spent counts from the node's start on the
message (``time.emulate_from: node``, the default: loading the node's data and model,
training) or from the server's creation of the message (``push``: Flower's
``created_at``, the timestamp its message TTL is checked against on the node, so the
polling and the ClientApp process's start-up are taken out of the sleep too).

The node recomputes its modelled seconds from the run config (the scenario and seed every
SuperNode reads), rather than being sent them: the completion time depends only on the
client's device and task, never on the round or the clock, so the one formula gives both
sides the same number without a new wire key, and it works under every server (a round
policy on the simulated clock, a wall-clock one, FedBuff's asynchronous loop, an app's
own strategy).

What it cannot emulate: a time spent that is already longer than the modelled one is not
undone (``slept-seconds`` is then 0); what is not counted comes on top (from the node: the
polling, the process start-up; either way: the reply's way back to the server).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.node import NodeExperiment
from fedram_flwr.clients.training import num_local_steps
from fedram_flwr.clock import SimulatedClock, Task, model_size_kbit, scenario_speeds, start_round
from fedram_flwr.protocol import MODELLED_SECONDS, SLEPT_SECONDS
from fedram_flwr.scenario.config import Scenario, TrainingConfig


def round_task(
    training: TrainingConfig, client_sizes: Sequence[int], weights: Sequence[np.ndarray]
) -> Task:
    """One round's work in FedScale's terms, for every client.

    Parameters
    ----------
    training : TrainingConfig
        ``batch_size``, ``local_steps`` or ``local_epochs`` passes, ``drop_last``.
    client_sizes : sequence of int
        m_i, each client's number of training examples.
    weights : sequence of np.ndarray
        The model's arrays: their bytes are sent down and up
        (:func:`~fedram_flwr.clock.model_size_kbit`).

    Returns
    -------
    Task
        Each client's local SGD steps, as its local training takes them
        (:func:`~fedram_flwr.clients.training.num_local_steps`).
    """
    t = training
    steps = tuple(
        num_local_steps(m, t.batch_size, t.local_epochs, t.local_steps, t.drop_last)
        for m in client_sizes
    )
    size = model_size_kbit(sum(int(np.asarray(a).nbytes) for a in weights))
    return Task(t.batch_size, steps, size, size)


def emulates(scenario: Scenario) -> bool:
    """Whether ``scenario``'s ClientApps take their devices' time (``time.emulate``)."""
    return scenario.time is not None and scenario.time.emulate


def modelled_seconds(exp: NodeExperiment, partition_id: int) -> float:
    """Give the seconds the time model gives client ``partition_id``'s round.

    Parameters
    ----------
    exp : NodeExperiment
        The node's side of a run with a ``time:`` section (scenario, seed, data, model).
    partition_id : int
        The client, 0..K-1.

    Returns
    -------
    float
        Computation + communication seconds, the simulated clock's completion time.

    Raises
    ------
    ValueError
        If the scenario has no ``time:`` section.
    """
    time_config = exp.scenario.time
    if time_config is None:
        raise ValueError("modelled seconds: the scenario has no time: section")
    sizes = [len(y) for y in exp.data.client_y]
    task = round_task(exp.scenario.training, sizes, get_weights(exp.client_model()))
    speeds = scenario_speeds(time_config.speeds, len(sizes), exp.seed)
    timing = start_round(SimulatedClock(exp.seed), speeds, np.array([partition_id]), task)
    return float(timing.cost.total[0])


@dataclass(frozen=True)
class Pacing:
    """How one emulated round was paced, seconds.

    Parameters
    ----------
    modelled : float
        What the time model gives the round.
    measured : float
        What the handler really took.
    slept : float
        max(0, modelled - measured).
    """

    modelled: float
    measured: float
    slept: float

    def metrics(self) -> dict[str, float]:
        """Return the reply's fit metrics: ``modelled-seconds`` and ``slept-seconds``."""
        return {MODELLED_SECONDS: self.modelled, SLEPT_SECONDS: self.slept}


def pace(
    modelled: float,
    started: float,
    *,
    now: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
) -> Pacing:
    """Sleep until ``modelled`` seconds have passed since ``started``.

    Parameters
    ----------
    modelled : float
        The round's modelled seconds (:func:`modelled_seconds`).
    started : float
        ``now()`` when the handler started.
    now, sleep : callable
        The time source and the sleep (injectable: tests pass fakes).

    Returns
    -------
    Pacing
        Modelled, measured and slept seconds; ``sleep`` is called only when there is
        time left (never with 0 or less).
    """
    measured = now() - started
    slept = max(0.0, modelled - measured)
    if slept > 0:
        sleep(slept)
    return Pacing(modelled, measured, slept)
