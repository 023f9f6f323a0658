"""In-process engine for Flower's Message API: a Message-API strategy's own ``start``
loop (Flower's) over an :class:`~fedram_flwr.engines.grid.InProcessGrid` whose nodes call
a Message-API ``ClientApp`` directly; no Ray, no network, no threads. The run directory
records it as the legacy in-process engine records its runs
(:class:`~fedram_flwr.engines.message_recording.MessageRecordingStrategy`), with the same
lock, signals and failure handling (:func:`~fedram_flwr.engines.in_process.run_in_process`).

What runs is given by a :data:`ComponentsFn`: ``Experiment -> MessageComponents`` (the
strategy, the ClientApp, the initial arrays, the server evaluation, the configs), so any
Message-API strategy and ClientApp plug in: Flower's own, or the project's. The default,
:func:`project_components` (``fedram run --api message``), is the scenario's algorithm as
its Message-API strategy under ``with_availability`` and the project's ClientApp: the
legacy run's model, rows and files, bit for bit (tests/engines/test_message_api_engines.py).
An asynchronous algorithm (FedBuff) runs its own strategy instead
(:func:`~fedram_flwr.engines.fedbuff_message.serve_fedbuff_grid`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
from flwr.serverapp.strategy import Strategy as MessageStrategy

from fedram_flwr.clients.app import project_message_app
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.wire import partition_id
from fedram_flwr.engines.batching import round_batcher
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.fedbuff_message import serve_fedbuff_grid
from fedram_flwr.engines.grid import ClientAppFn, InProcessGrid
from fedram_flwr.engines.in_process import quiet_single_threaded, recorder_settings, run_in_process
from fedram_flwr.engines.message_recording import (
    MessageRecordingStrategy,
    ServerEvaluate,
    metric_record,
)
from fedram_flwr.engines.timed import message_availability
from fedram_flwr.registry import is_asynchronous
from fedram_flwr.rundir import RunDirectory
from fedram_flwr.scenario.config import Scenario


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


def project_evaluate(exp: Experiment, strategy: MessageStrategy) -> ServerEvaluate:
    """The server evaluation of ``exp``'s Message-API run, as its legacy strategy's
    ``evaluate``: the model part of the broadcast evaluated, the strategy's extras (t,
    eta, rFedFair's ``avg-`` metrics) beside."""
    evaluate_model = exp.evaluate_fn()
    evaluated = getattr(strategy, "core", None)

    def as_record(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        result = evaluate_model(server_round, arrays.to_numpy_ndarrays(), {})
        return None if result is None else metric_record(*result)

    def evaluate(server_round: int, arrays: list[np.ndarray]) -> tuple[float, dict] | None:
        model = arrays if evaluated is None else evaluated.evaluated(arrays)[0]
        result = evaluate_model(server_round, model, {})
        if result is None or evaluated is None:
            return result
        loss, metrics = result
        return loss, {**metrics, **strategy.evaluation_extras(server_round, as_record)}

    return evaluate


def project_components(exp: Experiment) -> MessageComponents:
    """The scenario's own Message-API run: the algorithm's Message-API strategy
    (:meth:`Experiment.message_strategy`) under the scenario's oracle
    (:func:`~fedram_flwr.message_api.with_availability`), the project's ClientApp over
    ``exp`` (:func:`~fedram_flwr.clients.app.project_message_app`), the legacy run's
    initial model and server evaluation: the same rows and files as the legacy run."""
    strategy = exp.message_strategy()

    def experiment_of(context: Context) -> tuple[Experiment, int]:
        return exp, partition_id(context)

    return MessageComponents(
        strategy=message_availability(exp, strategy, exp.client_manager()),
        client_app=project_message_app(experiment_of),
        initial_arrays=get_weights(exp.new_model()),
        evaluate=project_evaluate(exp, strategy),
    )


def run_message_in_process(
    scenario: Scenario,
    seed: int,
    run_dir: str | Path,
    components: ComponentsFn | None = None,
    *,
    label: str = "",
) -> RunDirectory:
    """Run one (scenario, seed) to completion through ``components(Experiment(scenario,
    seed))`` (default :func:`project_components`: the scenario's own algorithm, oracle
    and clients); the run directory records it (see :func:`run_in_process`)."""
    if components is None and is_asynchronous(scenario):  # FedBuff: push and pull, no rounds
        serve: Callable[[Experiment, RunDirectory, str], None] = serve_fedbuff_grid
    else:
        serve = partial(serve_messages, components or project_components)
    return run_in_process(scenario, seed, run_dir, label=label, serve=serve, api="message")


def serve_messages(
    components: ComponentsFn, exp: Experiment, out: RunDirectory, label: str
) -> None:
    """The strategy's ``start`` over the in-process grid, to the last round."""
    parts = components(exp)
    k = exp.scenario.data.num_clients
    with round_batcher(exp) as batch:  # training.batched
        grid = InProcessGrid(parts.client_app, k, run_config=parts.run_config, batch=batch)
        record_messages(exp, out, label, parts, grid)


def record_messages(
    exp: Experiment, out: RunDirectory, label: str, parts: MessageComponents, grid: InProcessGrid
) -> None:
    """The strategy's ``start`` over ``grid``, recorded in ``out``."""
    k = exp.scenario.data.num_clients
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
