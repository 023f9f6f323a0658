"""The server loop every engine runs: Flower's legacy ``Server``, except that a round in
which nobody is available still reaches the strategy.

Flower 1.39's ``Server.fit_round`` cancels a round whose ``configure_fit`` returns no
instructions: ``aggregate_fit`` never runs and the model stays. That is right for
FedAvg, but not for the rules that step from what the server remembers: FedAR's
eq. (7) (Alg. 1 line 15) and MIFA's Algorithm 1 move the model with the stored
updates in every round, available clients or not. :class:`StrategyEveryRound` calls
``strategy.aggregate_fit(round, [], [])`` in such a round, so the algorithm's core
decides (:meth:`~fedram_flwr.strategies.core.Core.aggregate` with no replies): FedAR and
MIFA step from memory, every other algorithm keeps the model (FedVARP too, as its
authors' code does) and only updates what it tracks (availability counts, FedAU's
intervals, FedAR's tau). Flower's logging and ``History`` are kept as they are.

With one worker (``set_max_workers(1)``, the in-process engine) the clients run in
turn in the server's own thread (:func:`fit_clients_in_turn`) instead of through a
one-thread pool: the same calls and the same results and failures, without a future
and a hand-over between threads per client (~15-30 us each, which matter when a client
trains for ~1 ms). Strategies take replies in partition order, so the order in which
they arrive (the pool's: a set of futures) changes nothing.
"""

from __future__ import annotations

from functools import partial
from logging import INFO

from flwr.common import Code, FitIns, FitRes, Parameters, Scalar
from flwr.common.logger import log
from flwr.server import Server
from flwr.server.client_proxy import ClientProxy
from flwr.server.server import FitResultsAndFailures, fit_client, fit_clients

from fedram_flwr.engines.batching import RoundBatch


def fit_clients_in_turn(
    client_instructions: list[tuple[ClientProxy, FitIns]],
    timeout: float | None,
    group_id: int,
    batch: RoundBatch | None = None,
) -> FitResultsAndFailures:
    """Flower's ``fit_clients`` (1.39) with one worker, run in this thread: each
    client's ``fit`` in instruction order; a reply with status OK is a result, one with
    another status or an exception (``Exception``: an interrupt or a signal's exception
    ends the run, as it would in the pool's waiting thread) a failure. With ``batch``
    (``training.batched``) the fits run together, their local SGD stacked
    (:class:`~fedram_flwr.engines.batching.RoundBatch`): the same results and
    failures, in the same order."""
    results: list[tuple[ClientProxy, FitRes]] = []
    failures: list[tuple[ClientProxy, FitRes] | BaseException] = []
    if batch is not None:
        fit = partial(fit_client, timeout=timeout, group_id=group_id)
        outcomes = batch.fits(client_instructions, fit)
    for i, (proxy, ins) in enumerate(client_instructions):
        try:
            result = (
                fit_client(proxy, ins, timeout, group_id) if batch is None else outcomes[i].get()
            )
        except Exception as err:  # noqa: BLE001 - Flower's pool records it as a failure
            failures.append(err)
            continue
        (results if result[1].status.code == Code.OK else failures).append(result)
    return results, failures


class StrategyEveryRound(Server):
    """``flwr.server.Server`` whose ``fit_round`` hands an empty round to the strategy
    (``aggregate_fit`` with no results and no failures) instead of cancelling it.
    ``batch``: with one worker, the round's fits run together through it
    (``training.batched``, :func:`fit_clients_in_turn`)."""

    batch: RoundBatch | None = None

    def received(
        self,
        server_round: int,
        instructions: list[tuple[ClientProxy, FitIns]],
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> FitResultsAndFailures:
        """The replies the strategy aggregates, given the round's instructions and what
        came back: all of them (a timed server keeps those its round policy lets through,
        :class:`~fedram_flwr.engines.timed.TimedServer`)."""
        return results, failures

    def fit_round(
        self, server_round: int, timeout: float | None
    ) -> tuple[Parameters | None, dict[str, Scalar], FitResultsAndFailures] | None:
        """Flower's ``fit_round`` (1.39), but an empty round is aggregated too (and
        with one worker the clients run in this thread)."""
        client_instructions = self.strategy.configure_fit(
            server_round=server_round,
            parameters=self.parameters,
            client_manager=self._client_manager,
        )
        if client_instructions:
            log(
                INFO,
                "configure_fit: strategy sampled %s clients (out of %s)",
                len(client_instructions),
                self._client_manager.num_available(),
            )
            if self.max_workers == 1:
                results, failures = fit_clients_in_turn(
                    client_instructions, timeout, group_id=server_round, batch=self.batch
                )
            else:
                results, failures = fit_clients(
                    client_instructions=client_instructions,
                    max_workers=self.max_workers,
                    timeout=timeout,
                    group_id=server_round,
                )
        else:
            log(INFO, "configure_fit: no clients selected, aggregating no results")
            results, failures = [], []
        results, failures = self.received(server_round, client_instructions, results, failures)
        log(
            INFO,
            "aggregate_fit: received %s results and %s failures",
            len(results),
            len(failures),
        )
        parameters, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        return parameters, metrics, (results, failures)
