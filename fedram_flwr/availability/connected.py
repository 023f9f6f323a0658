"""Physical availability for the Deployment Engine.

Whoever is connected (and has not failed) answers. The ``connected`` oracle is the one
whose draw is *not* a function of (seed, round) alone: it passes the devices' own
availability through. ``round_timeout`` (seconds, None: unbounded) is the legacy server
loop's round timeout the ServerApp uses with the oracle: a reply later than that counts
as a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from flwr.server.client_proxy import ClientProxy
from flwr.server.criterion import Criterion

from fedram_flwr.availability.laws import HiddenLaw, connected_sample
from fedram_flwr.availability.manager import AvailabilityError, OracleClientManager


class ReportingProxy(ClientProxy):
    """A relayed client that tells its oracle when an instruction fails.

    A failure: an error reply, no reply within the round timeout, a lost connection.
    Every instruction goes to ``proxy``; a failure calls ``on_failure(cid)``, then
    re-raises.

    Parameters
    ----------
    proxy : ClientProxy
        The connected client.
    on_failure : callable
        Called with the client's ``cid`` when an instruction to it raises.
    """

    def __init__(self, proxy: ClientProxy, on_failure: Callable[[str], None]) -> None:
        super().__init__(proxy.cid)
        self.proxy = proxy
        self.on_failure = on_failure

    def _call(self, method: str, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        try:
            return getattr(self.proxy, method)(ins, timeout, group_id)
        except Exception:
            self.on_failure(self.cid)
            raise

    def get_properties(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        """Forward ``get_properties`` to the client, reporting a failure."""
        return self._call("get_properties", ins, timeout, group_id)

    def get_parameters(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        """Forward ``get_parameters`` to the client, reporting a failure."""
        return self._call("get_parameters", ins, timeout, group_id)

    def fit(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        """Forward ``fit`` to the client, reporting a failure."""
        return self._call("fit", ins, timeout, group_id)

    def evaluate(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        """Forward ``evaluate`` to the client, reporting a failure."""
        return self._call("evaluate", ins, timeout, group_id)

    def reconnect(self, ins: Any, timeout: float | None, group_id: int | None) -> Any:
        """Forward ``reconnect`` to the client, reporting a failure."""
        return self._call("reconnect", ins, timeout, group_id)


class ConnectedClientManager(OracleClientManager):
    """Physical availability (Deployment Engine): whoever is connected answers.

    Nothing is emulated. Round r relays every connected client that has not failed, or
    ``clients_per_round`` of them (:func:`connected_sample`). A SuperNode that stops is
    unregistered by Flower once its heartbeats stop (within 60 s in Flower 1.39); one
    whose instruction fails (error reply, or no reply within ``round_timeout`` s) is
    left out of the following rounds: for ``retry_after`` rounds if given (a slow but
    live client is asked again; a dead one is gone by then or fails again), else until
    it reconnects (a restarted SuperNode registers under a new node id). The first round
    waits, at most ``wait_timeout`` s, for ``min_clients`` connections (default: all);
    later rounds never wait for anybody. In the in-process engine every client is
    connected and never fails, so it relays all of them every round.

    Parameters
    ----------
    num_clients : int
        K, the number of partitions, >= 1; partition ids are 0..K-1.
    seed : int
        Seeds the subsample when ``clients_per_round`` is given.
    clients_per_round : int, optional
        Relay at most this many (>= 1) of the connected clients; None: all of them.
    min_clients : int, optional
        Connections the first round waits for, in 0..K; None: K.
    round_timeout : float or None
        Seconds a reply may take before it counts as a failure; None: unbounded.
    retry_after : int, optional
        Rounds (>= 0) a failed client is left out; None: until it reconnects.
    wait_timeout : float
        Seconds, >= 0, the first round waits for ``min_clients``; also how long a
        partition-id question may take.
    """

    def __init__(
        self,
        num_clients: int,
        seed: int,
        *,
        clients_per_round: int | None = None,
        min_clients: int | None = None,
        round_timeout: float | None = 30.0,
        retry_after: int | None = None,
        wait_timeout: float = 120.0,
    ) -> None:
        super().__init__(num_clients, seed, wait_timeout=wait_timeout)
        self.clients_per_round = clients_per_round
        self.min_clients = num_clients if min_clients is None else min_clients
        self.round_timeout = round_timeout
        self.retry_after = retry_after
        self.failed: dict[str, int] = {}  # node (cid) -> the round its instruction failed

    def hidden_law(self) -> HiddenLaw:
        """Return the law assumed before any device says otherwise: everyone available.

        Returns
        -------
        HiddenLaw
            ``pi`` = 1 for every client; no lambda.
        """
        return HiddenLaw(np.ones(self.num_clients))

    def draw(self, server_round: int) -> list[int]:
        """Return the connected, not excluded partition ids relayed in ``server_round``.

        Not a function of (seed, round) alone: the connections decide
        (:func:`~fedram_flwr.availability.laws.connected_sample`).
        """
        return connected_sample(
            self.connected_partitions(), self.clients_per_round, self.seed, server_round
        )

    def _excluded(self, cid: str) -> bool:
        """Whether node ``cid`` failed and is still left out in this round."""
        failed = self.failed.get(cid)
        if failed is None:
            return False
        if self.retry_after is not None and self.round > failed + self.retry_after:
            del self.failed[cid]  # asked again; a new failure excludes it again
            return False
        return True

    def sample(
        self,
        num_clients: int,
        min_num_clients: int | None = None,
        criterion: Criterion | None = None,
    ) -> list[ClientProxy]:
        """Relay the connected clients of this round, each reporting its failures.

        Parameters
        ----------
        num_clients, min_num_clients, criterion
            Flower's sampling request: ignored (the server cannot choose).

        Returns
        -------
        list of ReportingProxy
            The relayed clients, in partition-id order.

        Raises
        ------
        AvailabilityError
            If fewer than ``min_clients`` connect within ``wait_timeout`` s in the first
            round, or a client reports a partition id outside 0..K-1.
        """
        relayed = super().sample(num_clients, min_num_clients, criterion)
        return [ReportingProxy(proxy, self._mark_failed) for proxy in relayed]

    def _mark_failed(self, cid: str) -> None:
        with self._cv:
            self.failed.setdefault(cid, self.round)

    def _resolve_partitions(self) -> None:
        """Learn the partition ids of newly connected clients (no wait after round 1)."""
        if self.round <= 1 and not self.wait_for(self.min_clients, int(self.wait_timeout)):
            raise AvailabilityError(
                f"only {self.num_available()} clients connected within {self.wait_timeout:.0f}"
                f" s; availability.params.min_clients is {self.min_clients}"
            )
        new = [c for c in self._unknown() if not self._excluded(c.cid)]
        for proxy, pid in self._placed(new, strict=False):
            with self._cv:  # a reconnected node replaces its old proxy
                self._by_partition[pid] = proxy

    def connected_partitions(self) -> list[int]:
        """Return the partition ids of the connected clients not left out after a failure."""
        with self._cv:
            return sorted(p for p, c in self._by_partition.items() if not self._excluded(c.cid))
