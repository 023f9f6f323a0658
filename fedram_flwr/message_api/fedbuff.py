"""FedBuff as a Flower Message-API strategy: push and pull, not one blocking round.

:class:`FedBuff` runs FedBuff (Nguyen et al., AISTATS 2022, Algorithm 1) in Flower's
Message API: the Flower-free core (:class:`~fedram_flwr.strategies.fedbuff.FedBuffCore`)
and the Flower-free loop (:func:`~fedram_flwr.strategies.fedbuff_loop.drive`: ``fill``
keeps C training, an arriving update goes to ``FedBuffCore.receive``, the K-th steps),
with the messages of :class:`~fedram_flwr.message_api.fedbuff_flight.InFlight`: each
started client gets one train ``Message`` (the model of the version it downloads under
``start``'s keys, ``server-round`` = that version + 1 beside ``train_config``), pushed at
once; replies are pulled as they come. ``start(grid, initial_arrays, num_rounds=...)``
takes ``num_rounds`` server steps; each step takes exactly K updates (more arrived at the
same time stay buffered for the next); ``evaluate_fn`` is called at version 0 and after
every step (Flower's ``start`` calls it every round: the project's skips all but every
``eval_every``-th); at the end the replies still in flight are pulled and dropped.

The order updates are taken in is the core's ``clock`` (``algorithm.params.clock``),
declared once:

- ``simulated``: in the order of their finish times on the simulated clock
  (``durations``: the time model, one tick per task without one; ties by partition id),
  each taken when it is due, the replies arriving earlier kept until then; who is
  available at simulated time t is ``available_at(t)`` among the connected nodes. One
  seed gives one run, whatever the transport: the in-process event loop's, bit for bit
  (models, steps, staleness), also on Flower's Simulation Engine.
- ``wall``: as replies arrive, each poll's in partition-id order; staleness from the
  versions; who is available at t is ``available_at(t)`` (t: seconds since the start)
  among the connected nodes. Real asynchrony, not reproducible.
- ``auto`` (the default): ``wall`` on the Deployment Engine (a grid over a SuperLink's
  ServerAppIo), ``simulated`` on the Simulation Engine (Flower's ``InMemoryGrid``) and on
  a grid that delivers in this process (``delivers_in_process``: the in-process engine's).

A reply with an error, NaN or inf, or none within ``start``'s ``timeout`` (each message's
time to live) frees its slot and counts as a failure (``StepRecord.failures``);
``max_failed_rounds`` x C failed updates in a row stop the run. Nodes are learnt by the
partition-id query (:class:`~fedram_flwr.message_api.node_partitions.PartitionLookup`),
``min_nodes`` waited for at the start; a node that disconnects leaves the idle set. Empty
polls sleep ``poll_interval``: no busy loop.
"""

from __future__ import annotations

import inspect
import math
import sys
import time
from collections.abc import Callable, Iterable
from logging import INFO
from typing import Any, ClassVar

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedram_flwr.availability.partition_directory import AvailabilityError
from fedram_flwr.availability.timed import available_at_of
from fedram_flwr.message_api.fedbuff_flight import InFlight
from fedram_flwr.message_api.node_partitions import PartitionLookup
from fedram_flwr.message_api.partitions import grid_query
from fedram_flwr.message_api.round_guard import warn
from fedram_flwr.protocol import SERVER_ROUND, Arrays
from fedram_flwr.strategies.fedbuff import FedBuffCore
from fedram_flwr.strategies.fedbuff_loop import (
    Job,
    LoopState,
    SimulatedArrivals,
    StepRecord,
    WallArrivals,
    drive,
    start,
)
from fedram_flwr.strategies.hyper import (
    core_parameters,
    make_core,
    parameters_doc,
    with_parameters_doc,
)

__all__ = ["FedBuff", "resolve_clock"]

TICK_SECONDS = 1.0  # a task's duration, and the clock's wait, without a time model
NEW_NODE_TIMEOUT = 5.0  # s a node seen mid-run has to say its partition id
PARTITION_HINT = "register partition_id_query in the ClientApp (fedram_flwr.message_api)"
NO_ROUNDS = (
    "FedBuff is asynchronous: it has no rounds to configure or aggregate; run it with "
    "FedBuff.start(grid, initial_arrays, num_rounds=<server steps>)"
)
OWN_ARGS_DOC = """oracle : OracleClientManager, optional
    A round-indexed oracle (``fedram_flwr.availability``: RAM, Bernoulli, Markov, ...):
    available at t is ``oracle.draw(floor(t / 1 s) + 1)``, one of its rounds per second
    of the clock (:class:`~fedram_flwr.availability.timed.RoundTicks`); not with
    ``available_at``.
available_at : callable, optional
    ``available_at(t) -> partition ids`` available at t seconds (default: every connected
    node).
durations : callable, optional
    ``durations(ids, t) -> seconds`` each client started at simulated time t takes
    (default: one tick each; unused on the wall clock).
seed : int, default 0
    Keys the draws of the clients that start (``fedbuff-select``).
min_nodes : int, optional
    Nodes ``start`` waits for (default: C).
poll_interval : float, default 0.1
    Seconds between two empty pulls (and between two looks at the nodes), > 0.
wait_timeout : float, default 120
    Seconds ``start`` waits for ``min_nodes`` and their partition ids (and, on the wall
    clock, with nobody training), > 0.
drain_timeout : float, default 30
    Seconds the end waits for the replies still in flight before dropping them, >= 0.
max_failed_rounds : int, default 3
    The run stops after this many times C failed updates in a row, >= 1.
on_step : callable, optional
    ``on_step(record, model)`` after each step (the recorder's hook).
arrayrecord_key, configrecord_key : str
    The train message's records, ``"arrays"`` and ``"config"`` as Flower's."""


def resolve_clock(clock: str, grid: Grid) -> str:
    """Return ``clock``, ``auto`` resolved for ``grid`` (see the module docstring)."""
    if clock != "auto":
        return clock
    inmemory = sys.modules.get("flwr.superlink.grid.inmemory_grid")  # the Simulation Engine's
    if inmemory is not None and isinstance(grid, inmemory.InMemoryGrid):
        return "simulated"
    return "simulated" if getattr(grid, "delivers_in_process", False) else "wall"


class FedBuff(PartitionLookup, Strategy):
    """FedBuff in Flower's Message API (see the module docstring)."""

    core_type: ClassVar[type] = FedBuffCore
    asynchronous: ClassVar[bool] = True  # no rounds: with_availability refuses it

    def __init__(
        self,
        *,
        oracle: Any | None = None,
        available_at: Callable[[float], Iterable[int]] | None = None,
        durations: Callable[[np.ndarray, float], np.ndarray] | None = None,
        seed: int = 0,
        min_nodes: int | None = None,
        poll_interval: float = 0.1,
        wait_timeout: float = 120.0,
        drain_timeout: float = 30.0,
        max_failed_rounds: int = 3,
        on_step: Callable[[StepRecord, Arrays], None] | None = None,
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        **hyper: Any,
    ) -> None:
        others = f"and its own {[p for p in OWN_ARGS if p != 'hyper']}"
        self.core: FedBuffCore = make_core(FedBuffCore, hyper, "FedBuff", others)
        for name, value, least in (("poll_interval", poll_interval, 0.0),
                                   ("wait_timeout", wait_timeout, 0.0)):  # fmt: skip
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > least):
                raise ValueError(f"{name}: {value!r} must be a number of seconds > 0")
        if not drain_timeout >= 0:
            raise ValueError(f"drain_timeout: {drain_timeout!r} must be >= 0 seconds")
        if not (isinstance(max_failed_rounds, int) and max_failed_rounds >= 1):
            raise ValueError(f"max_failed_rounds: {max_failed_rounds!r} must be an int >= 1")
        available_at, self.oracle = available_at_of(oracle, available_at), oracle
        self.available_at, self.durations, self.seed = available_at, durations, int(seed)
        self.min_nodes = self.core.concurrency if min_nodes is None else int(min_nodes)
        self.poll_interval, self.wait_timeout = float(poll_interval), float(wait_timeout)
        self.query_timeout = self.wait_timeout  # each new node's partition-id answer
        self.drain_timeout, self.max_failed_rounds = float(drain_timeout), max_failed_rounds
        self.on_step, self.arrayrecord_key = on_step, arrayrecord_key
        self.configrecord_key = configrecord_key
        self.model_keys: list[str] = []
        self.node_of: dict[int, int] = {}  # partition id -> node id, connected ones
        self._looked = -math.inf  # when the grid's nodes were last looked at
        self._silent: set[int] = set()  # nodes left out: no partition id in time
        self.clock = ""  # the clock the last start ran on
        self.loop: LoopState | None = None  # the loop after the last step
        self.records: list[StepRecord] = []
        self.dropped = 0  # updates in flight at the end, pulled and dropped

    def __repr__(self) -> str:
        return f"FedBuff({self.core!r})"

    def summary(self) -> None:
        """Log the core."""
        log(INFO, "\t├──> %r (asynchronous: no rounds, one server step per K updates)", self.core)

    # ------------------------------------------ Flower's round methods: no rounds
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Refuse: FedBuff has no rounds (its ``start`` pushes and pulls itself).

        Raises
        ------
        NotImplementedError
            Always.
        """
        raise NotImplementedError(NO_ROUNDS)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Refuse: updates are received one at a time in ``start``.

        Raises
        ------
        NotImplementedError
            Always.
        """
        raise NotImplementedError(NO_ROUNDS)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Return no messages: no federated evaluation (``evaluate_fn`` evaluates)."""
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Return nothing: no federated evaluation."""
        return None

    # ------------------------------------------------------------------ the run
    def as_model(self, model: Arrays) -> ArrayRecord:
        """Put ``model``'s arrays under the keys of ``start``'s ``initial_arrays``."""
        if len(model) != len(self.model_keys):
            return ArrayRecord(list(model))
        return ArrayRecord({k: Array(np.asarray(a)) for k, a in zip(self.model_keys, model)})

    def connected(self, grid: Grid, *, strict: bool = False) -> dict[int, int]:
        """Return partition id -> node id of the connected nodes.

        Looks at the grid at most once every ``poll_interval`` s. ``strict`` (the start):
        every node must answer the partition-id query within ``query_timeout``. Later a
        new node (a SuperNode that came back) is asked once, for at most
        :data:`NEW_NODE_TIMEOUT` s; one that stays silent is left out of the run (logged).
        """
        now = time.monotonic()
        if now - self._looked < self.poll_interval:
            return self.node_of
        self._looked = now
        ids = sorted({int(i) for i in grid.get_node_ids()} - self._silent)
        if strict:
            placed = self.partition_ids(grid, ids, PARTITION_HINT)
        else:
            directory = self.partition_directory()
            if new := [n for n in ids if n not in directory]:
                unplaced = directory.learn(new, grid_query(grid), NEW_NODE_TIMEOUT)
                if unplaced.failed:
                    raise next(iter(unplaced.failed.values()))
                if unplaced.silent:
                    warn(f"FedBuff: node(s) {unplaced.silent} gave no partition id within "
                         f"{NEW_NODE_TIMEOUT:g} s: left out of this run")  # fmt: skip
                    self._silent |= set(unplaced.silent)
            placed = directory.partition_of(ids)
        self.node_of = {pid: node for node, pid in sorted(placed.items())}
        return self.node_of

    def wait_for_nodes(self, grid: Grid) -> None:
        """Wait at most ``wait_timeout`` s until ``min_nodes`` nodes are connected.

        Raises
        ------
        AvailabilityError
            Naming what was seen and what to change.
        """
        begin = time.monotonic()
        while len(self.connected(grid, strict=True)) < self.min_nodes:
            waited = time.monotonic() - begin
            if waited >= self.wait_timeout:
                raise AvailabilityError(
                    f"FedBuff: expected {self.min_nodes} nodes (min_nodes), saw "
                    f"{len(self.node_of)} after {waited:.0f} s; start the missing SuperNodes "
                    f"or raise wait_timeout (now {self.wait_timeout:g} s)"
                )
            time.sleep(self.poll_interval)

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Run FedBuff for ``num_rounds`` server steps (Flower's ``start`` arguments).

        ``timeout`` is each train message's time to live; ``evaluate_config`` is unused
        (no federated evaluation). Returns Flower's ``Result``: the final model,
        ``evaluate_fn``'s metrics by version, and per step ``buffered``, ``failures`` and
        ``mean-staleness``.
        """
        model = initial_arrays.to_numpy_ndarrays()
        self.model_keys = list(initial_arrays.keys())
        core = self.core.for_model(model)
        self.clock = resolve_clock(core.clock, grid)
        log(INFO, "Starting FedBuff: %d server steps, %r, %s clock", num_rounds, core, self.clock)
        self.own_partitions, self.node_of, self._looked = None, {}, -math.inf  # a new grid
        self._silent = set()
        result = Result(arrays=initial_arrays)
        evaluate = self._evaluator(evaluate_fn, result)
        evaluate(0, initial_arrays)
        self.wait_for_nodes(grid)
        config = dict(train_config or {})

        def content(job: Job) -> RecordDict:
            cfg = ConfigRecord({**config, SERVER_ROUND: job.version + 1})
            return RecordDict(
                {self.arrayrecord_key: self.as_model(job.arrays), self.configrecord_key: cfg}
            )

        flight = InFlight(grid, content, ttl=timeout, poll_interval=self.poll_interval)

        def available(t: float) -> np.ndarray:
            wanted = None if self.available_at is None else set(np.asarray(
                list(self.available_at(t)), dtype=int).tolist())  # fmt: skip
            if wanted is not None and not wanted:
                return np.array([], dtype=int)  # nobody: the grid is not asked
            connected = set(self.connected(grid))
            ids = connected if wanted is None else wanted & connected
            return np.array(sorted(ids), dtype=int)

        def dispatch(jobs: Iterable[Job]) -> None:
            flight.push(list(jobs), self.node_of)

        def step(record: StepRecord, loop: LoopState) -> None:
            arrays = self.as_model(loop.server.arrays)
            result.arrays = arrays
            mean = float(np.mean(record.staleness))
            result.train_metrics_clientapp[record.version] = MetricRecord(
                {"buffered": len(record.clients), "failures": record.failures,
                 "mean-staleness": mean}
            )  # fmt: skip
            log(INFO, "[FedBuff] version %d at %.3f s: clients %s, staleness %s", record.version,
                record.time, list(record.clients), list(record.staleness))  # fmt: skip
            if self.on_step is not None:
                self.on_step(record, loop.server.arrays)
            evaluate(record.version, arrays)

        if self.clock == "simulated":
            arrivals: Any = SimulatedArrivals(
                lambda pid, arrays, version: flight.reply_of(pid), TICK_SECONDS, dispatch
            )
            durations = self.durations or (lambda ids, t: np.full(len(ids), TICK_SECONDS))
            max_waits = 100_000
        else:
            t0 = time.monotonic()
            arrivals = WallArrivals(
                flight.pull, lambda: time.monotonic() - t0, self.poll_interval, dispatch
            )
            durations = lambda ids, t: np.full(len(ids), math.inf)  # noqa: E731
            max_waits = max(1, math.ceil(self.wait_timeout / self.poll_interval))
        done = False
        try:
            self.loop, self.records = drive(
                core,
                start(core, model),
                steps=num_rounds,
                available_at=available,
                durations=durations,
                arrivals=arrivals,
                seed=self.seed,
                max_idle_waits=max_waits,
                max_failures=self.max_failed_rounds * core.concurrency,
                on_step=step,
            )
            done = True
        finally:
            self.dropped = flight.drain(self.drain_timeout if done else 0.0)
        log(INFO, "FedBuff: %d server steps; %d update(s) in flight at the end dropped",
            len(self.records), self.dropped)  # fmt: skip
        return result

    @staticmethod
    def _evaluator(
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None, result: Result
    ) -> Callable[[int, ArrayRecord], None]:
        def evaluate(version: int, arrays: ArrayRecord) -> None:
            if evaluate_fn is not None and (res := evaluate_fn(version, arrays)) is not None:
                result.evaluate_metrics_serverapp[version] = res

        return evaluate


OWN_ARGS = [p for p in inspect.signature(FedBuff.__init__).parameters if p != "self"]
FedBuff.__doc__ = with_parameters_doc(
    FedBuff.__doc__, parameters_doc(FedBuffCore, trailing=OWN_ARGS_DOC)
)
FedBuff.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        *core_parameters(FedBuffCore),
        *(
            p
            for p in list(inspect.signature(FedBuff.__init__).parameters.values())[1:]
            if p.kind == inspect.Parameter.KEYWORD_ONLY
        ),
    ]
)
