"""The legacy Flower ClientManager base of every availability oracle.

The server cannot choose its clients: ``sample()`` ignores how many the strategy asks
for and relays whoever the oracle's law yields in that round (``draw``, a pure function
of (seed, round) for every oracle but ``connected``). Oracles know clients by
*partition id*, asked once per client through ``get_properties`` (Flower's engines
name nodes by random node ids) by the oracle's partition directory
(:mod:`~fedram_flwr.availability.partition_directory`), which the strategies that address
clients by partition id (FedAWE, rFedFair) ask too. Strategies never see the oracle's
parameters (e.g. rho, p_k, pi_k, lambda_k): only ``hidden_law()`` gives them, to plots,
the recorder and scenarios that run a strategy "oracle-informed".

Keyed on the server round: ``sample()`` relays the draw of the round the asking strategy
call is for. Flower's legacy ``Server`` (the stock one and the engines'
``StrategyEveryRound`` alike) calls ``strategy.configure_fit(server_round=...)`` and
``strategy.configure_evaluate(server_round=...)`` by keyword, so every legacy strategy's
call that reaches ``sample()`` has a ``server_round`` argument: :func:`asking_round`
reads it from the calling frames. Fit and federated evaluation of one round therefore
see the same draw, and a Markov chain steps once per round, whatever the strategy's
``fraction_evaluate`` (Flower's default is 1.0) and with no change to the user's server
or strategy. Only a call made outside any strategy method (a test, a script) advances a
counter instead, one round per call.
"""

from __future__ import annotations

import sys
import threading
import time
from abc import abstractmethod
from logging import WARNING

import numpy as np
from flwr.common.logger import log
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.criterion import Criterion

from fedram_flwr.availability.laws import HiddenLaw
from fedram_flwr.availability.partition_directory import (
    AvailabilityError,
    PartitionDirectory,
    check_unique,
    client_label,
    properties_query,
)

__all__ = ["AvailabilityError", "OracleClientManager", "asking_round"]


def asking_round(max_depth: int = 64) -> int | None:
    """Find the server round the current strategy call is for.

    Reads the ``server_round`` argument of the nearest caller that has one (the
    strategy's ``configure_fit`` / ``configure_evaluate``, or a helper it passes the
    round to).

    Parameters
    ----------
    max_depth : int
        How many calling frames to look through, >= 1.

    Returns
    -------
    int or None
        That round, or None when no caller within ``max_depth`` frames has such an
        (int) argument.
    """
    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        code = frame.f_code
        if "server_round" in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            value = frame.f_locals.get("server_round")
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        frame = frame.f_back
    return None


class OracleClientManager(ClientManager):
    """Base of every oracle: a legacy Flower ClientManager that relays a law's draws.

    Keeps the registry of proxies by partition id, bounds its waits, and knows the round
    ``sample`` relays for (the asking strategy call's ``server_round``). A subclass
    defines ``draw`` (its law) and ``hidden_law`` (that law's parameters).

    Parameters
    ----------
    num_clients : int
        K, the number of partitions (clients), >= 1; partition ids are 0..K-1.
    seed : int
        The scenario seed the law draws with.
    wait_timeout : float
        Seconds, >= 0: the longest any wait for clients to connect lasts.

    Attributes
    ----------
    round : int
        The round of the last ``sample`` call (0 before any).
    last_active : list of int
        Partition ids drawn in ``round``.
    round_timeout : float or None
        Seconds a relayed client's reply may take (None: unbounded); only the
        ``connected`` oracle sets it.
    """

    round_timeout: float | None = None

    def __init__(self, num_clients: int, seed: int, *, wait_timeout: float = 120.0) -> None:
        self.num_clients = num_clients
        self.seed = seed
        self.wait_timeout = wait_timeout
        self.round = 0  # the round of the last ``sample`` call
        self.last_active: list[int] = []  # partition ids drawn in ``self.round``
        self._clients: dict[str, ClientProxy] = {}
        self._by_partition: dict[int, ClientProxy] = {}
        self._cv = threading.Condition()
        self.partitions: PartitionDirectory[str] = PartitionDirectory(
            num_clients=num_clients, label=client_label
        )  # cid -> partition id and m_i, each client asked once

    # ------------------------------------------------------------- the oracle's law
    @abstractmethod
    def draw(self, server_round: int) -> list[int]:
        """Return the partition ids relayed in ``server_round``.

        A pure function of (seed, round) for every oracle but ``connected``.

        Parameters
        ----------
        server_round : int
            Server round, >= 1.

        Returns
        -------
        list of int
            Partition ids in 0..K-1, ascending; empty when nobody is available.
        """

    @abstractmethod
    def hidden_law(self) -> HiddenLaw:
        """Return the law's parameters, hidden from strategies.

        Returns
        -------
        HiddenLaw
            Each client's long-run availability ``pi`` and, for Markov chains, ``lam``.
        """

    @property
    def pi(self) -> np.ndarray:
        """Shorthand for ``hidden_law().pi``."""
        return self.hidden_law().pi

    def availability_matrix(self, num_rounds: int) -> np.ndarray:
        """Tabulate ``draw`` over rounds 1..num_rounds.

        Parameters
        ----------
        num_rounds : int
            Rounds to draw, >= 0.

        Returns
        -------
        np.ndarray
            Rounds x clients, bool: True where ``draw`` relays the client (row r - 1 is
            round r; for the RAM, the relayed one-hot rows).
        """
        out = np.zeros((num_rounds, self.num_clients), dtype=bool)
        for r in range(1, num_rounds + 1):
            out[r - 1, self.draw(r)] = True
        return out

    # ---------------------------------------------------------- ClientManager API
    def num_available(self) -> int:
        """Return the number of connected clients (Flower's ``ClientManager`` API)."""
        with self._cv:
            return len(self._clients)

    def register(self, client: ClientProxy) -> bool:
        """Register a connected client; False if its ``cid`` is already registered."""
        with self._cv:
            if client.cid in self._clients:
                return False
            self._clients[client.cid] = client
            self._cv.notify_all()
            return True

    def unregister(self, client: ClientProxy) -> None:
        """Forget a client that disconnected, and its partition id."""
        with self._cv:
            self._clients.pop(client.cid, None)
            self._by_partition = {
                p: c for p, c in self._by_partition.items() if c.cid != client.cid
            }
            self._cv.notify_all()

    def all(self) -> dict[str, ClientProxy]:
        """Return the connected clients by ``cid`` (a copy)."""
        with self._cv:
            return dict(self._clients)

    def by_partition(self) -> dict[int, ClientProxy]:
        """Return every client's proxy by partition id (a copy).

        The partition ids are learnt once, waiting (bounded by ``wait_timeout``) for all
        ``num_clients``; else ``AvailabilityError``, as :meth:`sample`.
        """
        self._resolve_partitions()
        with self._cv:
            return dict(self._by_partition)

    def wait_for(self, num_clients: int, timeout: int = 86400) -> bool:
        """Wait until ``num_clients`` are connected, at most min(timeout, wait_timeout) s.

        Parameters
        ----------
        num_clients : int
            Connections to wait for, >= 0.
        timeout : int
            Seconds, >= 0 (Flower's default is a day; ``wait_timeout`` caps it).

        Returns
        -------
        bool
            Whether that many were connected in time.
        """
        with self._cv:
            return self._cv.wait_for(
                lambda: len(self._clients) >= num_clients, timeout=min(timeout, self.wait_timeout)
            )

    def sample(
        self,
        num_clients: int,
        min_num_clients: int | None = None,
        criterion: Criterion | None = None,
    ) -> list[ClientProxy]:
        """Relay the oracle's clients of the asking call's round, whatever was asked.

        Training and evaluation of round r both get ``draw(r)``; called outside a
        strategy method, the next round after the last one. In round 0 (Flower's
        ``Server`` asking one client for the initial parameters, when the strategy has
        none) every client is relayed, in partition-id order, and no law is drawn. A
        round in which no client is available relays nobody, and says so: the engines'
        server then aggregates no replies (FedAR and MIFA step from memory, the other
        algorithms keep the model).

        Parameters
        ----------
        num_clients, min_num_clients, criterion
            Flower's sampling request: ignored (the server cannot choose).

        Returns
        -------
        list of ClientProxy
            The proxies of ``draw(round)``, in partition-id order.

        Raises
        ------
        AvailabilityError
            If not every client connects within ``wait_timeout`` s, or a client reports
            a missing, out-of-range or duplicate partition id.
        """
        asked = asking_round()
        if asked is not None and asked < 1:  # Flower's Server asks for initial parameters
            self._resolve_partitions()
            return [self._by_partition[p] for p in sorted(self._by_partition)]
        self.round = self.round + 1 if asked is None else asked
        self._resolve_partitions()
        self.last_active = self.draw(self.round)
        if not self.last_active:
            log(
                WARNING,
                "round %d: no client is available (%s oracle); the round trains nobody",
                self.round,
                type(self).__name__,
            )
        return [self._by_partition[p] for p in self.last_active]

    # ---------------------------------------------------------------- internals
    def _resolve_partitions(self) -> None:
        """Learn every proxy's partition id once (waits, bounded, for all clients)."""
        if len(self._by_partition) == self.num_clients:
            return
        start = time.monotonic()
        if not self.wait_for(self.num_clients, timeout=int(self.wait_timeout)):
            raise AvailabilityError(
                f"only {self.num_available()} of data.num_clients={self.num_clients} clients "
                f"connected within {time.monotonic() - start:.0f} s; start one SuperNode per "
                f"client (flwr run: --federation-config 'num-supernodes={self.num_clients}')"
            )
        for proxy, pid in self._placed(self._unknown(), strict=True):
            check_unique(
                {**{c.cid: p for p, c in self._by_partition.items()}, proxy.cid: pid},
                client_label,
            )
            self._by_partition[pid] = proxy
        if len(self._by_partition) != self.num_clients:
            raise AvailabilityError(
                f"partition ids {sorted(set(range(self.num_clients)) - set(self._by_partition))}"
                " are missing among the connected clients"
            )

    def _unknown(self) -> list[ClientProxy]:
        """Return the connected proxies whose partition id is not known yet."""
        known = {c.cid for c in self._by_partition.values()}
        return [c for cid, c in self.all().items() if cid not in known]

    def _placed(self, proxies: list[ClientProxy], *, strict: bool) -> list[tuple[ClientProxy, int]]:
        """Return (proxy, partition id) of those of ``proxies`` the directory places.

        The new ones are asked once, concurrently, waiting at most ``wait_timeout`` s. A
        client that could not answer raises its error when ``strict``, else is marked
        failed (:meth:`_mark_failed`).
        """
        unplaced = self.partitions.learn(
            [p.cid for p in proxies], properties_query(proxies), self.wait_timeout
        )
        if strict and unplaced.failed:
            raise next(iter(unplaced.failed.values()))
        placed = self.partitions.partition_of(p.cid for p in proxies)
        for proxy in proxies:
            if proxy.cid not in placed:
                self._mark_failed(proxy.cid)
        return [(p, placed[p.cid]) for p in proxies if p.cid in placed]

    def _mark_failed(self, cid: str) -> None:
        """Note a client whose instruction failed (the ``connected`` oracle leaves it out)."""
