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
"""

from __future__ import annotations

from logging import INFO

from flwr.common import Parameters, Scalar
from flwr.common.logger import log
from flwr.server import Server
from flwr.server.server import FitResultsAndFailures, fit_clients


class StrategyEveryRound(Server):
    """``flwr.server.Server`` whose ``fit_round`` hands an empty round to the strategy
    (``aggregate_fit`` with no results and no failures) instead of cancelling it."""

    def fit_round(
        self, server_round: int, timeout: float | None
    ) -> tuple[Parameters | None, dict[str, Scalar], FitResultsAndFailures] | None:
        """Flower's ``fit_round`` (1.39), but an empty round is aggregated too."""
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
            results, failures = fit_clients(
                client_instructions=client_instructions,
                max_workers=self.max_workers,
                timeout=timeout,
                group_id=server_round,
            )
        else:
            log(INFO, "configure_fit: no clients selected, aggregating no results")
            results, failures = [], []
        log(
            INFO,
            "aggregate_fit: received %s results and %s failures",
            len(results),
            len(failures),
        )
        parameters, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        return parameters, metrics, (results, failures)
