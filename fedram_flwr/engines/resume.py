"""Resumable in-process runs: the server loop that can start after a checkpoint's
round, and taking / restoring a checkpoint of the live objects
(:mod:`fedram_flwr.rundir.checkpoint` says what one holds and when one is used).

:class:`ResumableServer` is the engines' server
(:class:`~fedram_flwr.engines.server.StrategyEveryRound`) with two additions: a hook
called at the end of every round (after Flower's ``evaluate_round``, the last step of
a round in ``Server.fit``), which saves a checkpoint every K rounds; and ``start_round``:
0 runs Flower's own ``fit`` as it is (a run never interrupted computes exactly what it
did), r > 0 runs rounds r + 1, ... with the server's model already restored, each round
the steps of Flower 1.39's ``Server.fit`` loop (round 0's evaluation of the initial
model, and ``initialize_parameters``, happened before the interruption).
"""

from __future__ import annotations

import io
import math
import time
import timeit
from collections.abc import Callable, Mapping
from logging import INFO
from typing import Any

import numpy as np
from flwr.common import Context, Parameters, RecordDict, Scalar
from flwr.common.logger import log
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict
from flwr.server import History
from flwr.server.client_manager import ClientManager
from flwr.server.server import EvaluateResultsAndFailures
from flwr.server.strategy import Strategy

from fedram_flwr.engines.flwr.errors import TimeLimitError
from fedram_flwr.engines.server import StrategyEveryRound
from fedram_flwr.rundir import RunDirectory, checkpoint, state_codec
from fedram_flwr.rundir.checkpoint import Checkpoint, CheckpointError


class ResumableServer(StrategyEveryRound):
    """:class:`StrategyEveryRound` that calls ``after_round(server_round)`` at the end of
    every round and, with ``start_round`` = r > 0, starts at round r + 1 from the model
    in ``self.parameters`` (set by :func:`restore_checkpoint`)."""

    def __init__(
        self,
        *,
        client_manager: ClientManager,
        strategy: Strategy,
        after_round: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(client_manager=client_manager, strategy=strategy)
        self.after_round = after_round
        self.start_round = 0  # the round the run resumes after; 0: from the start

    def checkpoint(self) -> dict[str, Any]:
        """What the server carries between rounds besides the model: its strategy's
        ``checkpoint()`` (a ``RecordingStrategy``)."""
        return self.strategy.checkpoint()  # type: ignore[attr-defined]

    def restore(self, saved: dict[str, Any]) -> None:
        """Take back what :meth:`checkpoint` gave (a :class:`CheckpointError`, raised
        before anything changed, for one that does not fit)."""
        self.strategy.restore(saved)  # type: ignore[attr-defined]

    def fit(self, num_rounds: int, timeout: float | None) -> tuple[History, float]:
        """Flower's ``fit``; after a checkpoint, its loop from ``start_round + 1``."""
        if not self.start_round:
            return super().fit(num_rounds, timeout)
        log(INFO, "[RESUME] after round %s", self.start_round)
        history = History()
        start_time = timeit.default_timer()
        for current_round in range(self.start_round + 1, num_rounds + 1):
            log(INFO, "[ROUND %s]", current_round)
            res_fit = self.fit_round(server_round=current_round, timeout=timeout)
            if res_fit is not None:
                parameters_prime, fit_metrics, _ = res_fit
                if parameters_prime:
                    self.parameters = parameters_prime
                history.add_metrics_distributed_fit(current_round, fit_metrics)
            res_cen = self.strategy.evaluate(current_round, parameters=self.parameters)
            if res_cen is not None:
                history.add_loss_centralized(current_round, res_cen[0])
                history.add_metrics_centralized(current_round, res_cen[1])
            res_fed = self.evaluate_round(server_round=current_round, timeout=timeout)
            if res_fed is not None and res_fed[0] is not None:
                history.add_loss_distributed(current_round, res_fed[0])
                history.add_metrics_distributed(current_round, res_fed[1])
        return history, timeit.default_timer() - start_time

    def evaluate_round(
        self, server_round: int, timeout: float | None
    ) -> tuple[float | None, dict[str, Scalar], EvaluateResultsAndFailures] | None:
        """Flower's ``evaluate_round``, then the end-of-round hook."""
        result = super().evaluate_round(server_round, timeout)
        if self.after_round is not None:
            self.after_round(server_round)
        return result


def state_bytes(state: RecordDict) -> bytes:
    """A client's ``Context.state`` as Flower's protobuf bytes (exact: arrays as their
    bytes, config values as protobuf scalars)."""
    return recorddict_to_proto(state).SerializeToString()


def state_from_bytes(data: bytes) -> RecordDict:
    return recorddict_from_proto(ProtoRecordDict.FromString(data))


def take_checkpoint(
    run: RunDirectory,
    server_round: int,
    server: ResumableServer,
    contexts: Mapping[int, Context],
    identity: tuple[str, str],
) -> Checkpoint:
    """The run's state after ``server_round`` (between rounds): the server's model, its
    ``checkpoint()`` (the strategy's; a timed server's adds its clock), every client's non-empty
    ``Context.state``; ``identity``: (scenario fingerprint, code source)."""
    metrics_bytes, metrics_sha256 = checkpoint.metrics_mark(run)
    return Checkpoint(
        round=server_round,
        scenario=identity[0],
        code=identity[1],
        metrics_bytes=metrics_bytes,
        metrics_sha256=metrics_sha256,
        parameters=list(server.parameters.tensors),
        tensor_type=server.parameters.tensor_type,
        strategy=server.checkpoint(),
        clients={pid: state_bytes(c.state) for pid, c in contexts.items() if len(c.state)},
    )


def restore_checkpoint(
    saved: Checkpoint, server: ResumableServer, contexts: Mapping[int, Context]
) -> None:
    """Put the run back as it was after ``saved.round``: the server's model and start
    round, its strategy's state, the clients' ``Context.state`` and the oracle's round
    counter (its draws are functions of (seed, round)). Checked first
    (:func:`check_against`): a :class:`CheckpointError` changes nothing."""
    states = check_against(saved, server, contexts)
    server.restore(saved.strategy)  # first: its CheckpointError changes nothing either
    server.parameters = Parameters(tensors=list(saved.parameters), tensor_type=saved.tensor_type)
    server.start_round = saved.round
    for pid, context in contexts.items():
        context.state = states.get(pid, RecordDict())
    server.client_manager().round = saved.round  # type: ignore[attr-defined]


def check_against(
    saved: Checkpoint, server: ResumableServer, contexts: Mapping[int, Context]
) -> dict[int, RecordDict]:
    """The clients' states of ``saved``, once it is known to fit the live run (built
    for the same scenario, not yet started): its model the same arrays (number, dtype,
    shape) as the strategy's initial model, its strategy state the shape of the live
    strategy's ``checkpoint()`` (:func:`~fedram_flwr.rundir.state_codec.check_like`),
    its clients among the run's partition ids, each state Flower's ``RecordDict``, and
    every number in the model, the strategy state and the clients' arrays finite (a run
    resumed from a NaN model would fail every round of every rerun);
    :class:`CheckpointError` naming the first field that does not."""
    initial = getattr(getattr(server.strategy, "strategy", None), "initial_parameters", None)
    if isinstance(initial, Parameters):
        check_model(saved, initial)
    try:
        state_codec.check_like(saved.strategy, server.checkpoint(), "strategy")
    except state_codec.StateCodecError as err:
        raise CheckpointError(f"not this run's ({err})") from None
    where = first_nonfinite_model(saved) or state_codec.first_nonfinite(saved.strategy, "strategy")
    if where is not None:
        raise CheckpointError(f"not usable ({where} holds NaN or infinite values)")
    unknown = sorted(set(saved.clients) - set(contexts))
    if unknown:
        raise CheckpointError(f"not this run's (clients: no partition ids {unknown[:5]})")
    states = {}
    for pid, data in saved.clients.items():
        try:
            states[pid] = state_from_bytes(data)
        except Exception as err:  # protobuf's DecodeError, or what a forged record breaks
            raise CheckpointError(
                f"garbled (clients[{pid}]: not a RecordDict, {type(err).__name__})"
            ) from None
        for name, record in states[pid].array_records.items():
            for key, array in record.items():
                if state_codec.first_nonfinite(array.numpy(), "") is not None:
                    raise CheckpointError(
                        f"not usable (clients[{pid}][{name!r}][{key!r}] holds NaN or "
                        "infinite values)"
                    )
    return states


def first_nonfinite_model(saved: Checkpoint) -> str | None:
    """``parameters[i]`` of the first of ``saved``'s model arrays holding a NaN or an
    infinity (read in place of its ``.npy`` bytes; arrays that are not ``.npy`` are
    :func:`check_model`'s to refuse); None when every one is finite."""
    for i, data in enumerate(saved.parameters):
        layout = npy_layout(data)
        if layout is not None:
            dtype, shape = layout
            start = len(data) - math.prod(shape) * dtype.itemsize
            values = np.frombuffer(data, dtype, offset=start)
            if state_codec.first_nonfinite(values, "") is not None:
                return f"parameters[{i}]"
    return None


def check_model(saved: Checkpoint, initial: Parameters) -> None:
    """:class:`CheckpointError` unless ``saved``'s parameters are arrays of the number,
    shapes and dtype kinds of ``initial``'s (the model the run starts from; floats
    may widen: Flower's QFedAvg aggregates float32 models into float64)."""
    if saved.tensor_type != initial.tensor_type:
        raise CheckpointError(
            f"not this run's (tensor_type: {saved.tensor_type!r}, not {initial.tensor_type!r})"
        )
    if len(saved.parameters) != len(initial.tensors):
        raise CheckpointError(
            f"not this run's (parameters: {len(saved.parameters)} arrays, "
            f"not the model's {len(initial.tensors)})"
        )
    for i, (data, like) in enumerate(zip(saved.parameters, initial.tensors)):
        got, want = npy_layout(data), npy_layout(like)
        if got is None or want is None or got[1] != want[1] or got[0].kind != want[0].kind:
            shown = f"{got[0]} {got[1]}" if got else "not an array"
            raise CheckpointError(
                f"not this run's (parameters[{i}]: {shown}, not "
                f"{want[0] if want else '?'} {want[1] if want else ''})"
            )


def npy_layout(data: bytes) -> tuple[np.dtype, tuple[int, ...]] | None:
    """(dtype, shape) of an array in ``.npy`` bytes whose length matches its header
    (read from the header only, nothing allocated); None for anything else."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    except Exception:  # numpy raises ValueError, SyntaxError, ... on a bad header
        return None
    if dtype.hasobject or len(data) - stream.tell() != math.prod(shape) * dtype.itemsize:
        return None
    return dtype, tuple(shape)


def checkpoint_every_k_rounds(
    run: RunDirectory,
    every: int,
    num_rounds: int,
    server: ResumableServer,
    contexts: Mapping[int, Context],
    identity: tuple[str, str],
) -> Callable[[int], None]:
    """The end-of-round hook that writes a checkpoint after every ``every``-th round
    (never after the last: the run is complete then; ``every`` = 0: never)."""

    def after_round(server_round: int) -> None:
        if every and server_round % every == 0 and server_round < num_rounds:
            saved = take_checkpoint(run, server_round, server, contexts, identity)
            checkpoint.write_checkpoint(run.path, saved)

    return after_round


def within_time_limit(
    after_round: Callable[[int], None], limit: float | None, num_rounds: int
) -> Callable[[int], None]:
    """``after_round``, then :class:`TimeLimitError` when ``limit`` seconds (None: no
    limit) have passed since this was called and rounds are left."""
    if limit is None:
        return after_round
    deadline = time.monotonic() + limit

    def hook(server_round: int) -> None:
        after_round(server_round)
        if server_round < num_rounds and time.monotonic() >= deadline:
            raise TimeLimitError(
                f"--time-limit: {limit:g} s ran out after round {server_round} of "
                f"{num_rounds}; a rerun continues from the run's last checkpoint"
            )

    return hook
