"""FedBuff's legacy face with the scenario's glue, and its in-process run.

:func:`fedbuff_server` builds the legacy face
(:class:`~fedram_flwr.engines.fedbuff_server.FedBuffServer`, whose ``fit`` runs the
Flower-free loop :func:`~fedram_flwr.strategies.fedbuff_loop.drive` on the simulated
clock) over an oracle's proxies, for the in-process run (:func:`serve_fedbuff`, over
``InProcessClientProxy``s) and the ServerApp's legacy path alike, with what the scenario
gives:

- **training**: each client is the scenario's legacy NumPyClient
  (:meth:`~fedram_flwr.engines.experiment.Experiment.client`, the ERM client for ``fedbuff``),
  its ``fit`` called through its proxy on the model version it downloaded with the config
  ``server-round`` = that version + 1, its ``Context.state`` kept per partition as the
  in-process engine keeps it;
- **who is available at t**: the scenario's ``time.availability`` law
  (:func:`~fedram_flwr.availability.timed.clock_availability`), or, without a ``time``
  section, the ``availability`` oracle with one round per tick
  (:class:`~fedram_flwr.availability.timed.RoundTicks`);
- **how long a client takes**: FedScale's completion time of one task on its device
  (``time.speeds``, :func:`~fedram_flwr.clock.start_round`: the client's local steps,
  the model both ways), or one tick (:data:`~fedram_flwr.clock.TICK_SECONDS`) per task
  without a ``time`` section.

One server step is one row of ``metrics.jsonl`` (:class:`FedBuffSteps`, which the
Message-API run writes too): ``round`` is the model version made, ``sim-seconds`` the
simulated time (``wall-seconds`` since the start on the Message API's wall clock),
``relayed`` the buffered clients (sorted), ``failures`` the updates that failed since the
previous step, ``buffer-clients`` / ``buffer-versions`` / ``staleness`` /
``staleness-weights`` the updates in arrival order (the version each downloaded; the
staleness is ``round`` - 1 minus it); the server's evaluation as every engine's
(``eval_every``, version 0 included). ``rounds`` in the scenario counts server steps. No
checkpoint is written. The run is recorded as ``engine: in-process``, ``api: legacy``
(its clients are the legacy NumPyClients, through in-process ClientProxies); the legacy
face runs the simulated clock only (``algorithm.params.clock: wall`` is refused: it
needs the Message API).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from flwr.client import NumPyClient
from flwr.common import Context, ndarrays_to_parameters

from fedram_flwr.availability.manager import OracleClientManager
from fedram_flwr.availability.timed import RoundTicks, clock_availability
from fedram_flwr.clients.emulate import round_task
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clock import TICK_SECONDS, SimulatedClock, start_round
from fedram_flwr.clock.scenario import scenario_speeds
from fedram_flwr.engines.batching import RoundBatch, round_batcher
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.fedbuff_server import FedBuffServer, FedBuffStrategy
from fedram_flwr.engines.in_process import (
    InProcessClientProxy,
    ReceivedArrays,
    node_context,
    quiet_single_threaded,
    recorder_settings,
    run_in_process,
)
from fedram_flwr.protocol import Arrays
from fedram_flwr.registry import algorithm_params, algorithm_spec
from fedram_flwr.rundir.outputs import RoundRecorder, RunDirectory
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.strategies.fedbuff import FedBuffCore
from fedram_flwr.strategies.fedbuff_loop import StepRecord


def fedbuff_core(exp: Experiment) -> FedBuffCore:
    """The scenario's FedBuff core (its ``algorithm.params`` and what the run gives)."""
    return algorithm_spec(exp.scenario).build_core(algorithm_params(exp.scenario), exp)


def available_at(
    exp: Experiment, oracle: OracleClientManager | None = None
) -> Callable[[float], np.ndarray]:
    """Who is available at simulated time t (``time.availability``, or the oracle per tick);
    ``oracle``: the scenario's (default: a new one)."""
    s = exp.scenario
    oracle = exp.client_manager() if oracle is None else oracle
    if s.time is None:
        law = RoundTicks(oracle)
    else:
        law = clock_availability(s.time.availability, s.data.num_clients, exp.seed, oracle)
    return lambda t: np.asarray(law.available_at(t), dtype=int)


def durations(exp: Experiment, initial: Arrays) -> Callable[[np.ndarray, float], np.ndarray]:
    """Seconds a client started at t takes: FedScale's completion time, or one tick."""
    s = exp.scenario
    if s.time is None:
        return lambda ids, t: np.full(len(ids), TICK_SECONDS)
    speeds = scenario_speeds(s.time.speeds, s.data.num_clients, exp.seed)
    task = round_task(s.training, [len(y) for y in exp.data.client_y], initial)

    def seconds(ids: np.ndarray, t: float) -> np.ndarray:
        return start_round(SimulatedClock(exp.seed, now=t), speeds, ids, task).cost.total

    return seconds


class FedBuffSteps:
    """FedBuff's rows in ``out``, whichever API runs it: round 0, then one per server step
    (its fields: the module docstring), the evaluation as every engine's."""

    def __init__(self, exp: Experiment, out: RunDirectory, label: str) -> None:
        self.recorder = RoundRecorder(out, **recorder_settings(exp, label))
        self.evaluate = exp.evaluate_fn()
        self.clock = "simulated"  # the message API's ``wall`` records ``wall-seconds``

    def initial(self, model: Arrays) -> None:
        """Round 0's row: the initial model evaluated."""
        self.recorder.record_round(0, self.evaluate(0, model, {}), lambda: model)

    def step(self, record: StepRecord, model: Arrays) -> None:
        """One server step's row (``model``: the version it made)."""
        rec = self.recorder
        rec.record_fit(record.version, sorted(record.clients), record.failures, {}, {}, True)
        rec.record_extra(
            {
                "sim-seconds" if self.clock == "simulated" else "wall-seconds": record.time,
                "buffer-clients": list(record.clients),
                "buffer-versions": list(record.versions),
                "staleness": list(record.staleness),
                "staleness-weights": list(record.weights),
            }
        )
        rec.record_round(record.version, self.evaluate(record.version, model, {}), lambda: model)


WALL_REFUSED = (
    "algorithm.params.clock: wall takes updates as replies arrive, which needs "
    "Flower's Message API (fedram run --api message, or --engine deployment); FedBuff's "
    "legacy face (FedBuffServer) calls its clients one after another on the simulated clock"
)


def fedbuff_server(
    exp: Experiment,
    manager: OracleClientManager,
    out: RunDirectory,
    label: str,
    batch: RoundBatch | None = None,
) -> FedBuffServer:
    """The legacy face over ``manager``'s proxies: the scenario's core, availability,
    durations and seed, each step recorded in ``out`` (``clock: wall`` refused);
    ``batch``: the run's batched rounds (``training.batched``, in-process)."""
    core = fedbuff_core(exp)
    if core.clock == "wall":
        raise ScenarioError(WALL_REFUSED)
    initial = get_weights(exp.new_model())
    steps = FedBuffSteps(exp, out, label)
    return FedBuffServer(
        client_manager=manager,
        strategy=FedBuffStrategy(core, ndarrays_to_parameters(initial)),
        available_at=available_at(exp, manager),
        durations=durations(exp, initial),
        seed=exp.seed,
        on_start=steps.initial,
        on_step=steps.step,
        batch=batch,
    )


def serve_fedbuff(exp: Experiment, out: RunDirectory, label: str) -> None:
    """Run FedBuff for ``rounds`` server steps over the in-process legacy clients (their
    ``Context.state`` kept per partition), recording each step in ``out``. With
    ``training.batched`` the jobs in flight on one model version train as one stacked
    round when the first of them arrives."""
    manager = exp.client_manager()
    k = exp.scenario.data.num_clients

    def client_fn(context: Context) -> NumPyClient:
        return exp.client(int(context.node_config["partition-id"]), context.state)

    received = ReceivedArrays()
    for pid in range(k):
        context = node_context(pid, k, {})
        manager.register(InProcessClientProxy(str(pid), client_fn, context, received, exp))
    with round_batcher(exp) as batch:  # training.batched: a version's jobs stacked
        server = fedbuff_server(exp, manager, out, label, batch)
        with quiet_single_threaded():
            server.fit(exp.scenario.rounds, timeout=None)
    if out.status() != "complete":
        raise RuntimeError("FedBuff's loop ended before the last step was recorded")


def run_fedbuff_in_process(
    scenario: Scenario, seed: int, run_dir: str | Path, *, label: str = ""
) -> RunDirectory:
    """Run one (scenario, seed) of FedBuff to completion in ``run_dir``.

    Parameters
    ----------
    scenario : Scenario
        A scenario with ``algorithm.name: fedbuff``.
    seed : int
        The seed.
    run_dir : str or Path
        The run folder (locked while the run writes it).
    label : str
        The progress lines' tag.

    Returns
    -------
    RunDirectory
        The run's folder, status ``complete``.
    """
    return run_in_process(scenario, seed, run_dir, label=label, serve=serve_fedbuff)
