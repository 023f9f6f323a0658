"""FedBuff through Flower's Message API, in every engine.

:func:`fedbuff_strategy` is the scenario's :class:`~fedram_flwr.message_api.FedBuff` with
what the in-process event loop gets (:mod:`fedram_flwr.engines.fedbuff_in_process`): who
is available at t (``time.availability``, or the oracle per tick), how long a task takes
(FedScale's completion time, or one tick), the seed, one node per partition, the
scenario's ``max_failed_rounds``, and the recorder's hook (:class:`FedBuffSteps`: the same
rows). :func:`serve_fedbuff_messages` runs it on a grid: round 0's row, then ``start``
for ``rounds`` server steps. Two grids:

- in-process (``fedram run --api message``, :func:`serve_fedbuff_grid`): the project's
  Message-API ClientApp on an :class:`~fedram_flwr.engines.grid.InProcessGrid`; the
  ``auto`` clock is simulated there, and the run equals the event loop's bit for bit;
- Flower's (``fedram run --engine flwr|deployment``, ``flwr run .``): the ServerApp's
  grid (:func:`fedram_flwr.server_app.serve_messages`); ``auto`` is simulated on the
  Simulation Engine (the same run again) and ``wall`` on the Deployment Engine (replies
  taken as they arrive: real asynchrony).
"""

from __future__ import annotations

from typing import Any

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid

from fedram_flwr.clients.app import project_message_app
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.wire import partition_id
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.fedbuff_in_process import FedBuffSteps, available_at, durations
from fedram_flwr.engines.grid import InProcessGrid
from fedram_flwr.engines.in_process import quiet_single_threaded
from fedram_flwr.message_api.fedbuff import FedBuff, resolve_clock
from fedram_flwr.registry import algorithm_params, algorithm_spec
from fedram_flwr.rundir.outputs import RunDirectory

DEFAULT_TTL_S = 3600.0
"""A train message's time to live (Flower's ``start`` timeout default)."""


def fedbuff_strategy(exp: Experiment, steps: FedBuffSteps, **settings: Any) -> FedBuff:
    """The scenario's FedBuff strategy, its clock and nodes as the event loop's, its
    steps recorded by ``steps``; ``settings``: :class:`FedBuff`'s (``wait_timeout``, ...)."""
    s = exp.scenario
    initial = get_weights(exp.new_model())
    return algorithm_spec(s).build_message_strategy(
        algorithm_params(s),
        exp,
        available_at=available_at(exp),
        durations=durations(exp, initial),
        max_failed_rounds=s.max_failed_rounds,
        on_step=steps.step,
        **settings,
    )


def serve_fedbuff_messages(
    exp: Experiment,
    out: RunDirectory,
    label: str,
    grid: Grid,
    *,
    ttl: float = DEFAULT_TTL_S,
    **settings: Any,
) -> FedBuff:
    """Run the scenario's FedBuff on ``grid`` for ``rounds`` server steps, recorded in
    ``out`` (``ttl``: each train message's time to live, s); the strategy after the run."""
    steps = FedBuffSteps(exp, out, label)
    strategy = fedbuff_strategy(exp, steps, **settings)
    initial = get_weights(exp.new_model())
    steps.clock = resolve_clock(strategy.core.clock, grid)
    steps.initial(initial)
    strategy.start(grid, ArrayRecord(initial), num_rounds=exp.scenario.rounds, timeout=ttl)
    if out.status() != "complete":
        raise RuntimeError("FedBuff's strategy ended before the last step was recorded")
    return strategy


def serve_fedbuff_grid(exp: Experiment, out: RunDirectory, label: str) -> None:
    """FedBuff in-process through the Message API: the project's ClientApp over ``exp``
    on an :class:`InProcessGrid`."""

    def experiment_of(context: Context) -> tuple[Experiment, int]:
        return exp, partition_id(context)

    grid = InProcessGrid(project_message_app(experiment_of), exp.scenario.data.num_clients)
    with quiet_single_threaded():
        serve_fedbuff_messages(exp, out, label, grid)
