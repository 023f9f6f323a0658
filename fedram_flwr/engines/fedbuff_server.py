"""FedBuff in Flower's legacy API: a ``flwr.server.Server`` whose ``fit`` is FedBuff's loop.

Flower's legacy ``Server.fit`` is a blocking round loop (``fit_round``: configure, wait for
every reply, aggregate); FedBuff has no rounds. As Flower intends custom loops,
:class:`FedBuffServer` overrides ``fit(num_rounds, timeout)``: it runs the Flower-free loop
(:func:`~fedram_flwr.strategies.fedbuff_loop.drive` over
:class:`~fedram_flwr.strategies.fedbuff_loop.SimulatedArrivals`, the same ``fill``,
``arrive``, core and ``StepRecord`` as the event loop and the Message API) with ``train`` =
a blocking ``ClientProxy.fit`` on the proxy of that partition (the oracle's partition
directory: :meth:`~fedram_flwr.availability.manager.OracleClientManager.by_partition`),
``FitIns`` carrying the downloaded version's model and ``server-round`` = version + 1.
``num_rounds`` counts server steps. A reply whose status is not OK, or a ``fit`` that
raises, is a failed update (its slot is freed and counted in the next step's
``failures``); ``max_failed_rounds`` x C failures in a row stop the run.

The simulated clock only: the proxies are called one after another when their finish
events are processed, so one seed gives the event loop's run on any engine. The legacy
``Strategy`` Flower's ``Server`` holds is :class:`FedBuffStrategy`: the core (its
hyper-parameters as declared) and the initial model; it has no rounds to configure.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable, Sequence
from functools import partial
from logging import INFO, WARNING

from flwr.common import (
    Code,
    EvaluateIns,
    EvaluateRes,
    FitIns,
    FitRes,
    Parameters,
    Scalar,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.common.logger import log
from flwr.server import ClientManager, Server
from flwr.server.client_proxy import ClientProxy
from flwr.server.history import History
from flwr.server.server import fit_client
from flwr.server.strategy import Strategy

from fedram_flwr.availability.manager import OracleClientManager
from fedram_flwr.clients.batched_round import Outcome
from fedram_flwr.engines.batching import RoundBatch
from fedram_flwr.protocol import SERVER_ROUND, Arrays, parameter_arrays
from fedram_flwr.strategies.fedbuff import FedBuffCore
from fedram_flwr.strategies.fedbuff_jobs import (
    AvailableAt,
    Durations,
    Job,
    LoopState,
    StepRecord,
)
from fedram_flwr.strategies.fedbuff_loop import SimulatedArrivals, drive, start

NO_ROUNDS = "FedBuff has no rounds: FedBuffServer.fit runs its loop (docs/fedbuff.md)"


class FedBuffStrategy(Strategy):
    """The legacy ``Strategy`` of FedBuff: its core and initial model, no rounds.

    Parameters
    ----------
    core : FedBuffCore
        K, C, the staleness weight, eta_g (as declared by :class:`FedBuffCore`).
    initial_parameters : Parameters
        The model at version 0.
    """

    def __init__(self, core: FedBuffCore, initial_parameters: Parameters) -> None:
        self.core = core
        self.initial_parameters = initial_parameters

    def __repr__(self) -> str:
        """Name the strategy and its core."""
        return f"FedBuffStrategy({self.core!r})"

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        """The model at version 0."""
        return self.initial_parameters

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Refuse: there are no rounds (:class:`FedBuffServer` runs the loop)."""
        raise RuntimeError(NO_ROUNDS)

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Refuse: there are no rounds (:class:`FedBuffServer` runs the loop)."""
        raise RuntimeError(NO_ROUNDS)

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, EvaluateIns]]:
        """No federated evaluation."""
        return []

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ) -> tuple[float | None, dict[str, Scalar]]:
        """No federated evaluation."""
        return None, {}

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, Scalar]] | None:
        """None: the project's evaluation is the recorder's (``on_step``)."""
        return None


class FedBuffServer(Server):
    """Flower's legacy ``Server`` whose ``fit`` runs FedBuff's loop (module docstring).

    Parameters
    ----------
    client_manager : OracleClientManager
        The scenario's oracle: the proxies by partition id.
    strategy : FedBuffStrategy
        The core and the initial model.
    available_at, durations : callable
        Who is available at simulated time t; how long clients started at t take.
    seed : int
        The scenario seed (the ``fedbuff-select`` draws).
    on_start : callable, optional
        ``on_start(initial)``: hears of the model at version 0.
    on_step : callable, optional
        ``on_step(record, model)``: after each server step.
    idle_seconds : float
        How long the clock waits when nobody trains.
    max_failed_rounds : int
        ``max_failed_rounds`` x C failed updates in a row stop the run.
    batch : RoundBatch, optional
        ``training.batched``: the jobs in flight on one model version train together
        (:class:`~fedram_flwr.strategies.fedbuff_loop.SimulatedArrivals`'
        ``train_together``) through the in-process engine's stacked round.
    """

    def __init__(
        self,
        *,
        client_manager: OracleClientManager,
        strategy: FedBuffStrategy,
        available_at: AvailableAt,
        durations: Durations,
        seed: int,
        on_start: Callable[[Arrays], None] | None = None,
        on_step: Callable[[StepRecord, Arrays], None] | None = None,
        idle_seconds: float = 1.0,
        max_failed_rounds: int = 3,
        batch: RoundBatch | None = None,
    ) -> None:
        super().__init__(client_manager=client_manager, strategy=strategy)
        self.batch = batch
        self.core = strategy.core
        self.available_at, self.durations, self.seed = available_at, durations, seed
        self.on_start, self.on_step = on_start, on_step
        self.idle_seconds, self.max_failed_rounds = idle_seconds, max_failed_rounds
        self.records: list[StepRecord] = []

    def train(self, proxies: dict[int, ClientProxy], timeout: float | None) -> Callable:
        """``train(partition_id, arrays, version)``: one blocking ``fit`` on that proxy."""

        def train(partition_id: int, arrays: Arrays, version: int) -> Arrays | None:
            ins = FitIns(ndarrays_to_parameters(list(arrays)), {SERVER_ROUND: version + 1})
            try:
                res = proxies[partition_id].fit(ins, timeout=timeout, group_id=version + 1)
            except Exception as err:  # noqa: BLE001 - a failed update, as in the Message API
                return update_of(partition_id, Outcome(error=err))
            return update_of(partition_id, Outcome(value=(None, res)))

        return train

    def train_together(
        self, proxies: dict[int, ClientProxy], timeout: float | None
    ) -> Callable[[Sequence[Job]], list[Arrays | None]] | None:
        """``train_together(jobs)``: their ``fit`` calls as one batched round (``batch``),
        or None without one."""
        batch = self.batch
        if batch is None:
            return None

        def together(jobs: Sequence[Job]) -> list[Arrays | None]:
            sent: dict[int, Parameters] = {}  # one encoding per model version
            instructions = []
            for job in jobs:
                if job.version not in sent:
                    sent[job.version] = ndarrays_to_parameters(list(job.arrays))
                config = {SERVER_ROUND: job.version + 1}
                instructions.append((proxies[job.partition_id], FitIns(sent[job.version], config)))
            fit = partial(fit_client, timeout=timeout, group_id=jobs[0].version + 1)
            outcomes = batch.fits(instructions, fit)
            return [update_of(job.partition_id, o) for job, o in zip(jobs, outcomes)]

        return together

    def fit(self, num_rounds: int, timeout: float | None) -> tuple[History, float]:
        """Take ``num_rounds`` server steps; ``timeout`` bounds each client's ``fit``."""
        log(INFO, "[INIT] FedBuff: %d server steps on the simulated clock", num_rounds)
        self.parameters = self._get_initial_parameters(server_round=0, timeout=timeout)
        initial = parameters_to_ndarrays(self.parameters)
        if self.on_start is not None:
            self.on_start(initial)
        manager: OracleClientManager = self._client_manager  # type: ignore[assignment]
        proxies = manager.by_partition()

        def stepped(record: StepRecord, loop: LoopState) -> None:
            log(INFO, "FedBuff step %d: %s", record.version, list(record.clients))
            if self.on_step is not None:
                self.on_step(record, loop.server.arrays)

        t0 = timeit.default_timer()
        loop, self.records = drive(
            self.core,
            start(self.core, initial),
            steps=num_rounds,
            available_at=self.available_at,
            durations=self.durations,
            arrivals=SimulatedArrivals(
                self.train(proxies, timeout),
                self.idle_seconds,
                train_together=self.train_together(proxies, timeout),
            ),
            seed=self.seed,
            max_failures=self.max_failed_rounds * self.core.concurrency,
            on_step=stepped,
        )
        self.parameters = ndarrays_to_parameters(list(loop.server.arrays))
        return History(), timeit.default_timer() - t0


def update_of(partition_id: int, outcome: Outcome) -> Arrays | None:
    """A job's update from its ``fit``'s outcome (Flower's ``(proxy, FitRes)``), or None
    for a failed one (an exception, a status other than OK), warned in Flower's log."""
    if outcome.error is not None:
        log(WARNING, "FedBuff: partition %d failed: %r", partition_id, outcome.error)
        return None
    res = outcome.value[1]
    if res.status.code != Code.OK:
        log(WARNING, "FedBuff: partition %d: %s", partition_id, res.status.message)
        return None
    return parameter_arrays(res.parameters)
