"""The shape every algorithm core has, Flower-free (fedjax's ``init`` / ``apply``).

A core is a small frozen value holding an algorithm's hyper-parameters; its server
state is a separate explicit value (a frozen dataclass replaced each round). The
methods are pure functions of (state, round, replies): a Flower face (the legacy
``Strategy`` in :mod:`~fedram_flwr.strategies.base`, the Message-API one in
:mod:`fedram_flwr.message_api.strategy`) only converts wire types to
:class:`~fedram_flwr.protocol.ClientReply` and back, so no algorithm is written twice.
Nothing here imports Flower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from fedram_flwr.protocol import Arrays, ClientReply

S = TypeVar("S")


@dataclass(frozen=True)
class Outcome(Generic[S]):
    """What one aggregation gives: the new state, the round's diagnostics (logged as fit
    metrics) and whether the global model moved (``False``: the server keeps the model
    it has, as Flower does when ``aggregate_fit`` returns no parameters)."""

    state: S
    diagnostics: dict[str, Any] = field(default_factory=dict)
    aggregated: bool = True


class Core(Generic[S]):
    """An algorithm's server side. Subclasses are frozen dataclasses of hyper-parameters
    and implement :meth:`init`, :meth:`arrays` and :meth:`aggregate`."""

    def for_model(self, initial_arrays: Sequence[np.ndarray]) -> Core[S]:
        """This core for a model shaped like ``initial_arrays`` (the vector cores record
        its shapes and dtypes; the others need nothing). A strategy that learns the
        model only when it starts (the Message API's ``start(initial_arrays=...)``)
        calls it then."""
        return self

    def client_count(self) -> int | None:
        """N, the number of clients this core knows by partition id 0..N-1 (``None``: it
        keeps nothing per client, so any id >= 0 is taken); a reply's id is checked
        against it (:func:`~fedram_flwr.strategies.rounds.partition_problems`)."""
        n = getattr(self, "num_clients", None)
        return n if isinstance(n, int) else None

    def init(self, initial_arrays: Sequence[np.ndarray]) -> S:
        """The state before round 1 from the initial model."""
        raise NotImplementedError

    def arrays(self, state: S) -> Arrays:
        """What the server broadcasts (the model, and what travels with it)."""
        raise NotImplementedError

    def fit_config(self, state: S, server_round: int) -> dict[str, Any]:
        """Keys (:mod:`fedram_flwr.protocol`) sent with the model to every client."""
        return {}

    def aggregate(
        self, state: S, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[S]:
        """One round: the replies in partition-id order, ``elapsed`` rounds since the
        last aggregation (> 1 when the server skipped rounds in which nobody was
        available: they still count)."""
        raise NotImplementedError

    def kept(self, server_round: int, replies: Sequence[ClientReply]) -> Sequence[int]:
        """Positions of the round's ``replies`` (in partition-id order) to aggregate when
        the server could not choose who trains before training: all of them; FedAvg(S)
        its seeded subset (:func:`~fedram_flwr.strategies.round_driver.drive_round`)."""
        return range(len(replies))

    def evaluated(self, arrays: Sequence[np.ndarray]) -> tuple[Arrays, dict[str, Any]]:
        """The model part of the broadcast arrays, and metrics to report beside its
        evaluation (Fed-CVaR-Avg's t, ...)."""
        return list(arrays), {}

    def diagnostics(self, state: S) -> dict[str, Any]:
        """What a recorder logs of the state: ``q`` (the last aggregation's weights over
        all clients) for algorithms that weigh clients individually, availability
        estimates, thresholds..."""
        return {}
