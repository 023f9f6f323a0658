"""In-process engine: Flower's own legacy server loop, clients called directly.

Flower's ``Server`` (as :class:`~fedram_flwr.engines.resume.ResumableServer`: the
engines' ``StrategyEveryRound``, which hands a round in which nobody was available to
the strategy too, saving a checkpoint every K rounds and able to resume after one) runs
the rounds with the scenario's Strategy and oracle (ClientManager); each client is an
``InProcessClientProxy`` that builds the NumPyClient through ``client_fn(context)`` on
every call, like Flower's engines, with one persistent ``Context`` per partition. No
Ray, no network. Clients run one after another in the server's thread (one worker:
:func:`~fedram_flwr.engines.server.fit_clients_in_turn`) and torch uses one intra-op
thread: a round of 55 logistic-regression clients of 5 steps
costs ~15% less CPU than with Flower's default pool of threads contending for the GIL,
and the results are the same (strategies aggregate in partition order).
"""

from __future__ import annotations

import logging
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.client import Client, NumPyClient
from flwr.common import (
    Context,
    DisconnectRes,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    GetParametersIns,
    GetParametersRes,
    GetPropertiesIns,
    GetPropertiesRes,
    ReconnectIns,
    RecordDict,
)
from flwr.common.logger import FLOWER_LOGGER as flwr_logger
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.clients.erm import fit_res
from fedram_flwr.clients.node import NodeExperiment
from fedram_flwr.clients.stacked_round import RoundClient
from fedram_flwr.engines.batching import round_batcher
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.flwr.signals import signals_raise
from fedram_flwr.engines.plot_inputs import write_plot_inputs
from fedram_flwr.engines.resume import (
    ResumableServer,
    checkpoint_every_k_rounds,
    restore_checkpoint,
    within_time_limit,
)
from fedram_flwr.engines.timed import TimedServer, time_model
from fedram_flwr.protocol import npy_array
from fedram_flwr.registry import is_asynchronous
from fedram_flwr.rundir import (
    CHECKPOINT_FILE,
    Checkpoint,
    CheckpointError,
    checkpoint,
    code_version,
    default_checkpoint_every,
    scenario_fingerprint,
)
from fedram_flwr.rundir.outputs import RecordingStrategy, RunDirectory
from fedram_flwr.scenario.config import Scenario


class ReceivedArrays:
    """The arrays of a round's fit instructions, decoded once for all the clients that
    receive the same bytes (Flower's ``FitIns`` of a round is one object for all): each
    client gets fresh copies, the arrays decoding would give it."""

    def __init__(self) -> None:
        self._tensors: list[bytes] = []
        self._arrays: list[np.ndarray] = []

    def __call__(self, tensors: list[bytes]) -> list[np.ndarray]:
        """Fresh arrays of ``tensors`` (.npy bytes, :func:`~fedram_flwr.protocol.npy_array`)."""
        return [a.copy(order="K") for a in self.shared(tensors)]

    def shared(self, tensors: list[bytes]) -> list[np.ndarray]:
        """The arrays of ``tensors``, the same objects for the same bytes (not copied:
        a caller that writes them copies them first)."""
        if len(tensors) != len(self._tensors) or any(
            t is not seen for t, seen in zip(tensors, self._tensors)
        ):  # bytes objects are immutable: the same objects hold the same arrays
            self._arrays = [npy_array(t) for t in tensors]
            self._tensors = list(tensors)
        return self._arrays


class InProcessClientProxy(ClientProxy):
    """A ClientProxy that calls a Flower ``Client`` (or ``NumPyClient``) in this process.
    ``received``: the decoder of the fit arrays, shared by the proxies of one server so
    that a round's global model is decoded once (default: the proxy's own)."""

    def __init__(
        self,
        cid: str,
        client_fn: Callable[[Context], Client | NumPyClient],
        context: Context,
        received: ReceivedArrays | None = None,
        experiment: NodeExperiment | None = None,
    ) -> None:
        super().__init__(cid)
        self.client_fn = client_fn
        self.context = context
        self.received = ReceivedArrays() if received is None else received
        self.experiment = experiment

    def _client(self) -> Client:
        client = self.client_fn(self.context)
        return client.to_client() if isinstance(client, NumPyClient) else client

    def get_properties(
        self, ins: GetPropertiesIns, timeout: float | None, group_id: int | None
    ) -> GetPropertiesRes:
        return self._client().get_properties(ins)

    def get_parameters(
        self, ins: GetParametersIns, timeout: float | None, group_id: int | None
    ) -> GetParametersRes:
        return self._client().get_parameters(ins)

    def fit(self, ins: FitIns, timeout: float | None, group_id: int | None) -> FitRes:
        client = self.client_fn(self.context)
        if not isinstance(client, NumPyClient):
            return client.fit(ins)
        # Flower's NumPyClient ``fit`` with the .npy bytes (de)coded by the protocol's
        # codec: the same bytes and arrays, ~10x cheaper for a small model (the global
        # model decoded once a round).
        return fit_res(client.fit(self.received(ins.parameters.tensors), ins.config))

    def stacked_client(self, ins: FitIns, exp: NodeExperiment) -> RoundClient | None:
        """This client's part of a stacked round of ``exp``'s clients (``training.batched``,
        :func:`~fedram_flwr.clients.stacked_round.stacked_fits`): its partition id and
        state, the round's arrays (decoded once, shared: read, not written) and config;
        None when its ``fit`` must run itself: a proxy not made for ``exp``'s client
        (``experiment``, whose ``client(partition-id, context.state)`` ``client_fn``
        builds) or a subclass's own ``fit``."""
        if self.experiment is not exp or type(self).fit is not InProcessClientProxy.fit:
            return None
        return RoundClient(
            int(self.context.node_config["partition-id"]),
            self.context.state,
            self.received.shared(ins.parameters.tensors),
            ins.config,
        )

    def evaluate(
        self, ins: EvaluateIns, timeout: float | None, group_id: int | None
    ) -> EvaluateRes:
        return self._client().evaluate(ins)

    def reconnect(
        self, ins: ReconnectIns, timeout: float | None, group_id: int | None
    ) -> DisconnectRes:
        return DisconnectRes(reason="in-process client")


def node_context(partition_id: int, num_partitions: int, run_config: dict) -> Context:
    return Context(
        run_id=0,
        node_id=partition_id,
        node_config={"partition-id": partition_id, "num-partitions": num_partitions},
        state=RecordDict(),
        run_config=run_config,
    )


def finish_run(exp: Experiment) -> Callable[[RunDirectory, list[dict]], None]:
    """The ``on_finish`` hook every engine gives ``RecordingStrategy``: what the plots
    need besides the metrics (the CLI draws them from the run folder)."""

    def finish(run_dir: RunDirectory, rows: list[dict]) -> None:
        write_plot_inputs(run_dir.path, exp)

    return finish


def recorder_settings(exp: Experiment, label: str) -> dict[str, Any]:
    """The keyword arguments of :class:`~fedram_flwr.rundir.outputs.RoundRecorder` for ``exp``,
    the same for the recorders of both Flower APIs."""
    return dict(
        num_rounds=exp.scenario.rounds,
        on_finish=finish_run(exp),
        label=label,
        summary_extra={
            "rare-clients": list(exp.rare_clients),
            "rare-classes": list(exp.data.rare_classes),
        },
        true_law=markov_law(exp),
    )


def recording_strategy(exp: Experiment, run_dir: RunDirectory, label: str) -> RecordingStrategy:
    return RecordingStrategy(exp.strategy(), run_dir, **recorder_settings(exp, label))


def markov_law(exp: Experiment) -> tuple[np.ndarray, np.ndarray] | None:
    """The oracle's hidden (pi, lambda) when it defines both (Markov-type oracles), for
    the recorder's estimator errors only; None otherwise."""
    law = exp.client_manager().hidden_law()
    if law.lam is None:
        return None
    return np.asarray(law.pi, dtype=float), np.asarray(law.lam, dtype=float)


def run_in_process(
    scenario: Scenario,
    seed: int,
    run_dir: str | Path,
    *,
    label: str = "",
    serve: Callable[[Experiment, RunDirectory, str], None] | None = None,
    checkpoint_every: int | None = None,
    resume: bool = True,
    api: str = "legacy",
    time_limit: float | None = None,
) -> RunDirectory:
    """Run one (scenario, seed) to completion; the run directory records it. Holds the
    folder's lock throughout (:class:`~fedram_flwr.rundir.RunDirectoryBusy` at once if
    another run writes it); SIGTERM and SIGHUP, like Ctrl-C, end the run ``failed``.
    ``serve(exp, run_dir, label)`` runs the rounds: Flower's legacy server loop unless
    given (the Message API's: :mod:`fedram_flwr.engines.message_in_process`); ``api``
    names which in the run's fingerprint.

    Every ``checkpoint_every`` rounds (default ``rounds // 20``, at least 1; 0: never)
    the legacy loop's state is saved in the folder; with ``resume``, a run that did not
    complete continues after its last checkpoint when that was made for the same
    scenario, seed and code (saying so on stderr; otherwise it starts over, saying why),
    and ends with the files of a run never interrupted
    (:mod:`fedram_flwr.rundir.checkpoint`; a run on the simulated clock saves its clock
    and the late updates in flight too: :mod:`fedram_flwr.engines.timed`). A given
    ``serve`` neither checkpoints nor resumes. ``time_limit`` (seconds, the legacy loop):
    the run fails with :class:`~fedram_flwr.engines.flwr.errors.TimeLimitError` at the
    end of the first round that ends past it (after that round's checkpoint, so a rerun
    continues from there), as a Flower engine's ``flwr run`` is stopped past its limit.
    An asynchronous algorithm (FedBuff) is refused here: its event loop is
    :func:`~fedram_flwr.engines.fedbuff_in_process.run_fedbuff_in_process`."""
    out = RunDirectory(run_dir)
    every = (
        default_checkpoint_every(scenario.rounds) if checkpoint_every is None else checkpoint_every
    )
    if every < 0:
        raise ValueError(f"checkpoint_every: a number of rounds >= 0 (0: never), got {every}")
    with out.lock(), signals_raise(signal.SIGTERM, signal.SIGHUP):
        try:  # from here on the run's status is final however it ends (bar SIGKILL)
            exp = Experiment(scenario, seed)
            if serve is None and is_asynchronous(scenario):
                raise ValueError(
                    f"algorithm.name: {scenario.algorithm.name} is asynchronous: run it "
                    "with fedram_flwr.engines.run_fedbuff_in_process (fedram run does)"
                )
            saved = resume_from(out, scenario, seed, label) if resume and serve is None else None
            if serve is None:
                _serve(exp, out, label, every, saved, time_limit)
            else:
                out.start(scenario.to_dict(), seed, engine="in-process", api=api)
                serve(exp, out, label)
        except BaseException as err:
            # Ctrl-C ends a run that can go on (``fedram run`` then adds its last round)
            status = "interrupted" if isinstance(err, KeyboardInterrupt) else "failed"
            out.set_status(
                status, error=f"{type(err).__name__}: {err}", traceback=traceback.format_exc()
            )
            raise
    return out


def resume_from(out: RunDirectory, scenario: Scenario, seed: int, label: str) -> Checkpoint | None:
    """The checkpoint this run may continue from (once checked against the live run:
    :func:`restore_or_start`), or None, saying why on stderr."""
    saved, why = checkpoint.resume_point(out, scenario.to_dict(), seed)
    if saved is None and why:
        not_used(out, label, why)
    return saved


def not_used(out: RunDirectory, label: str, why: str) -> None:
    """Say on stderr that the run's checkpoint is not used, and why."""
    tag = label or str(out.path)
    print(f"{tag}: checkpoint not used ({why}); starting from round 1", file=sys.stderr)


def _serve(
    exp: Experiment,
    out: RunDirectory,
    label: str,
    every: int,
    saved: Checkpoint | None,
    time_limit: float | None = None,
) -> None:
    """Flower's server loop over the in-process clients, to the last round (from the
    round after ``saved`` when given); a checkpoint every ``every`` rounds."""
    scenario = exp.scenario
    manager = exp.client_manager()
    k = scenario.data.num_clients

    def client_fn(context: Context) -> NumPyClient:
        return exp.client(int(context.node_config["partition-id"]), context.state)

    contexts = {pid: node_context(pid, k, {}) for pid in range(k)}
    received = ReceivedArrays()
    for pid, context in contexts.items():
        manager.register(InProcessClientProxy(str(pid), client_fn, context, received, exp))
    strategy = recording_strategy(exp, out, label)
    if scenario.time is None:
        server = ResumableServer(client_manager=manager, strategy=strategy)
    else:  # on the simulated clock, under the round policy
        model = time_model(exp, manager)
        server = TimedServer(time=model, seed=exp.seed, client_manager=manager, strategy=strategy)
    identity = (scenario_fingerprint(scenario.to_dict(), exp.seed), code_version()["source"])
    server.after_round = within_time_limit(
        checkpoint_every_k_rounds(out, every, scenario.rounds, server, contexts, identity),
        time_limit,
        scenario.rounds,
    )
    saved = restore_or_start(out, exp, label, saved, server, contexts)
    server.set_max_workers(1)
    with quiet_single_threaded(), round_batcher(exp) as server.batch:
        server.fit(num_rounds=scenario.rounds, timeout=None)
    if out.status() != "complete":
        raise RuntimeError("the server loop ended before the last round was recorded")
    (out.path / CHECKPOINT_FILE).unlink(missing_ok=True)  # only an unfinished run needs it
    if saved is not None:
        checkpoint.note_resumed(out, saved.round)


def restore_or_start(
    out: RunDirectory,
    exp: Experiment,
    label: str,
    saved: Checkpoint | None,
    server: ResumableServer,
    contexts: dict[int, Context],
) -> Checkpoint | None:
    """Resume ``out`` after ``saved`` (the server and clients restored, the folder
    reopened), or start it from round 0, saying why, when there is no checkpoint or it
    does not fit the live run (:func:`~fedram_flwr.engines.resume.check_against`);
    returns the checkpoint used."""
    if saved is not None:
        try:
            restore_checkpoint(saved, server, contexts)
        except CheckpointError as err:
            not_used(out, label, f"{CHECKPOINT_FILE} is {err}")
            saved = None
    if saved is None:
        out.start(exp.scenario.to_dict(), exp.seed, engine="in-process", api="legacy")
        return None
    print(
        f"{label or out.path}: resuming from its checkpoint after round {saved.round} of "
        f"{exp.scenario.rounds}",
        file=sys.stderr,
        flush=True,
    )
    checkpoint.resume(out, saved, "in-process", exp.scenario.to_dict(), exp.seed)
    return saved


@contextmanager
def quiet_single_threaded() -> Iterator[None]:
    """Flower's logger at WARNING (our progress lines replace its lines per round) and
    torch on one intra-op thread, both restored after."""
    level, threads = flwr_logger.level, torch.get_num_threads()
    flwr_logger.setLevel(logging.WARNING)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        flwr_logger.setLevel(level)
        torch.set_num_threads(threads)
