"""The oracles observed outside the simulation: ``trace`` and ``connected``.

The oracles whose availability is observed outside the simulation: ``trace`` (a
recorded matrix, a run's ``availability.csv`` or a FedScale behaviour trace) and
``connected`` (a deployment's live connections). Registered in
:mod:`fedram_flwr.availability.specs.oracles`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from fedram_flwr.availability import (
    ConnectedClientManager,
    OracleClientManager,
    TraceClientManager,
    read_trace,
)
from fedram_flwr.availability.specs.checks import as_scenario_error, check_length
from fedram_flwr.availability.specs.oracle_spec import OracleParams
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.scenario.schema import check_range


@dataclass(frozen=True)
class TraceParams(OracleParams):
    """Params of the ``trace`` oracle.

    Replay of a recorded trace (``path``): a round x client 0/1 CSV matrix (e.g. a
    run's ``availability.csv``) or JSON active ids per round. Past its last round:
    ``past_end: error`` (checked at load against ``rounds``) or ``wrap``. A JSON object
    is a FedScale client behaviour trace (:mod:`fedram_flwr.availability.fedscale`):
    round r is available when start_time + (r - 1) ``round_duration`` seconds, modulo
    the client's finish_time, lies in one of its active intervals; partition k follows
    trace client ``clients[k]`` (default: the trace's ids in ascending order).
    """

    path: str
    past_end: Literal["error", "wrap"] = "error"
    round_duration: float | None = None
    start_time: float = 0.0
    clients: tuple[int, ...] | None = None

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        if self.round_duration is not None:
            check_range(
                "availability.params.round_duration", self.round_duration, 0.0, None, lo_open=True
            )
        check_range("availability.params.start_time", self.start_time, 0.0, None)
        k = scenario.data.num_clients
        check_length("availability.params.clients", self.clients, k, "data.num_clients")
        num_rounds = len(self.matrix(scenario))
        if self.past_end == "error" and scenario.rounds > num_rounds:
            raise ScenarioError(
                f"availability.params.path: the trace has {num_rounds} rounds but "
                f"rounds is {scenario.rounds}; run fewer rounds or set "
                "availability.params.past_end: wrap"
            )

    def matrix(self, scenario: Scenario) -> np.ndarray:
        """Return the trace as a rounds x clients bool matrix.

        Its shape is checked; a FedScale trace gives the run's ``rounds`` rows.
        """
        path = Path(self.path)  # absolute: the schema resolved it at load
        return as_scenario_error(
            read_trace,
            path,
            scenario.data.num_clients,
            round_duration=self.round_duration,
            num_rounds=scenario.rounds,
            start_time=self.start_time,
            clients=self.clients,
        )


def build_trace(params: TraceParams, scenario: Scenario, seed: int) -> OracleClientManager:
    """Build the ``trace`` oracle's ClientManager for ``seed``."""
    return TraceClientManager(params.matrix(scenario), seed, wrap=params.past_end == "wrap")


# ---------------------------------------------------------------- connected
@dataclass(frozen=True)
class ConnectedParams(OracleParams):
    """Params of the ``connected`` oracle.

    Physical availability (Deployment Engine): every connected client that has not
    failed, or ``clients_per_round`` of them drawn uniformly; round 1 waits for
    ``min_clients`` connections (default: all); a reply later than ``round_timeout`` s
    is a failure (null: no timeout); a failed client is left out for ``retry_after``
    rounds (null: until it reconnects).
    """

    clients_per_round: int | None = None
    min_clients: int | None = None
    round_timeout: float | None = 30.0
    retry_after: int | None = None

    def check(self, scenario: Scenario) -> None:
        """Raise :class:`ScenarioError` naming ``availability.params.<field>``."""
        k = scenario.data.num_clients
        if self.clients_per_round is not None:
            check_range("availability.params.clients_per_round", self.clients_per_round, 1, k)
        if self.min_clients is not None:
            check_range("availability.params.min_clients", self.min_clients, 1, k)
        if self.round_timeout is not None:
            check_range("availability.params.round_timeout", self.round_timeout, 0.1, None)
        if self.retry_after is not None:
            check_range("availability.params.retry_after", self.retry_after, 1, None)


def build_connected(params: ConnectedParams, scenario: Scenario, seed: int) -> OracleClientManager:
    """Build the ``connected`` oracle's ClientManager for ``seed``."""
    return ConnectedClientManager(
        scenario.data.num_clients,
        seed,
        clients_per_round=params.clients_per_round,
        min_clients=params.min_clients,
        round_timeout=params.round_timeout,
        retry_after=params.retry_after,
    )
