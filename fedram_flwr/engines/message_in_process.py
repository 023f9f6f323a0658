"""In-process engine for Flower's Message API: a Message-API strategy's own ``start``
loop (Flower's) over an :class:`~fedram_flwr.engines.grid.InProcessGrid` whose nodes call
a Message-API ``ClientApp`` directly; no Ray, no network, no threads. The run directory
records it as the legacy in-process engine records its runs
(:class:`~fedram_flwr.engines.message_recording.MessageRecordingStrategy`), with the same
lock, signals and failure handling (:func:`~fedram_flwr.engines.in_process.run_in_process`).

What runs is given by a :data:`ComponentsFn`: ``Experiment -> MessageComponents`` (the
strategy, the ClientApp, the initial arrays, the server evaluation, the configs), so any
Message-API strategy and ClientApp plug in: Flower's own, or the project's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
from flwr.serverapp.strategy import Strategy as MessageStrategy

from fedram_flwr.config import Scenario
from fedram_flwr.engines.grid import ClientAppFn, InProcessGrid
from fedram_flwr.engines.in_process import quiet_single_threaded, recorder_settings, run_in_process
from fedram_flwr.engines.message_recording import MessageRecordingStrategy, ServerEvaluate
from fedram_flwr.experiment import Experiment
from fedram_flwr.rundir import RunDirectory


@dataclass(frozen=True)
class MessageComponents:
    """What the Message-API in-process engine runs for one experiment.

    ``strategy``: a Message-API strategy (its ``start`` is Flower's). ``client_app``: a
    ``ClientApp`` (called as ``client_app(message=..., context=...)``) serving every
    partition. ``initial_arrays``: the first broadcast, in the wire order.
    ``evaluate``: the server-side evaluation of each round's broadcast arrays (the
    metrics rows); ``train_config`` / ``evaluate_config``: Flower's ``start`` configs;
    ``run_config``: every node's ``context.run_config``."""

    strategy: MessageStrategy
    client_app: ClientAppFn
    initial_arrays: list[np.ndarray]
    evaluate: ServerEvaluate | None = None
    train_config: dict[str, Any] = field(default_factory=dict)
    evaluate_config: dict[str, Any] = field(default_factory=dict)
    run_config: dict[str, Any] = field(default_factory=dict)


ComponentsFn = Callable[[Experiment], MessageComponents]


def legacy_server_side(exp: Experiment) -> tuple[list[np.ndarray], ServerEvaluate]:
    """The first broadcast and the server evaluation of ``exp``'s legacy strategy
    (``Strategy.evaluate``: the model part of the arrays evaluated, the core's extras
    beside), for a Message-API run whose rows must carry the legacy run's metrics."""
    legacy = exp.strategy()
    initial = parameters_to_ndarrays(legacy.initial_parameters)
    return initial, lambda r, arrays: legacy.evaluate(r, ndarrays_to_parameters(arrays))


def run_message_in_process(
    scenario: Scenario,
    seed: int,
    run_dir: str | Path,
    components: ComponentsFn,
    *,
    label: str = "",
) -> RunDirectory:
    """Run one (scenario, seed) to completion through ``components(Experiment(scenario,
    seed))``; the run directory records it (see :func:`run_in_process`)."""
    return run_in_process(
        scenario, seed, run_dir, label=label, serve=partial(serve_messages, components)
    )


def serve_messages(
    components: ComponentsFn, exp: Experiment, out: RunDirectory, label: str
) -> None:
    """The strategy's ``start`` over the in-process grid, to the last round."""
    parts = components(exp)
    k = exp.scenario.data.num_clients
    grid = InProcessGrid(parts.client_app, k, run_config=parts.run_config)
    recorder = MessageRecordingStrategy(
        parts.strategy,
        out,
        partition_of=grid.partition_of,
        num_clients=k,
        evaluate=parts.evaluate,
        **recorder_settings(exp, label),
    )
    with quiet_single_threaded():
        recorder.start(
            grid=grid,
            initial_arrays=ArrayRecord(parts.initial_arrays),
            train_config=ConfigRecord(parts.train_config),
            evaluate_config=ConfigRecord(parts.evaluate_config),
        )
    if out.status() != "complete":
        raise RuntimeError("the strategy's loop ended before the last round was recorded")
