"""The partition directory: which node is which partition, with how many examples.

The one service every part of the server asks (the oracles of both Flower APIs, and
FedAWE and rFedFair, which address nodes by partition id).

The availability layer owns the run's directory (a legacy oracle's ``partitions``, the
Message-API availability wrapper's); it is written here, below the strategies' layer
(and outside their package, whose import loads every strategy), so that the legacy
FedAWE and rFedFair, which sit below the availability layer, can share the oracle's
directory (handed to them as their ClientManager) and keep one of their own when run
under a plain Flower ClientManager, and a node's oracles
(:mod:`fedram_flwr.clients.node`) load no strategy.

Oracles and the algorithms' per-client state know clients by *partition id*; Flower names
nodes by random ids (a legacy ``ClientProxy.cid``, a Message-API node id). A
:class:`PartitionDirectory` asks each node once, caches the answer (its
:class:`Placement`) and never asks a placed node again. Every question is bounded: the
directory hands its ``timeout`` to the transport (a :data:`Query`), which asks all the
new nodes at once (the Message API: one ``"query.partition_id"`` message each, in one
``send_and_receive``, :func:`~fedram_flwr.message_api.partitions.grid_query`; the legacy
API: ``get_properties`` with that timeout, on a thread pool, :func:`properties_query`).

A node that does not answer within the timeout is not placed and not cached: it is
asked again the next time someone needs it. Whether that is an error is the asker's to
say, because it differs: an oracle that needs every partition, FedAWE and rFedFair stop
with :meth:`PartitionDirectory.require`'s error naming the silent nodes and the timeout
(waiting longer would only hide a node that does not run the handler); the ``connected``
oracle treats it as absent (a device that does not answer is not available: the Message
API asks it again next round, the legacy oracle leaves it out as a client whose
instruction failed). An answer that is wrong (an error reply, no partition id, an id that is not
an integer in 0..N-1) is a configuration error and its message says what to change.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from flwr.common import GetPropertiesIns
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.protocol import NUM_EXAMPLES, PARTITION_ID

K = TypeVar("K", bound=Hashable)  # a node's name: a proxy's cid, a Message-API node id

DEFAULT_QUERY_TIMEOUT = 60.0
"""Seconds a strategy waits for the partition-id answers it asks for itself."""


class AvailabilityError(RuntimeError):
    """The oracle cannot relay: too few clients connected, or unknown partition ids."""


@dataclass(frozen=True)
class Placement:
    """A node's answer to the partition-id question.

    Parameters
    ----------
    partition_id : Any
        Its partition id, checked by the directory (an integer in 0..N-1).
    num_examples : int or None
        m_i, its number of training examples, >= 0 (``None``: not reported).
    num_partitions : int or None
        The federation's size N as its node_config says it (``None``: not said).
    """

    partition_id: Any
    num_examples: int | None = None
    num_partitions: int | None = None


Query = Callable[[Sequence[K], float], Mapping[K, "Placement | AvailabilityError"]]
"""A transport: asks the nodes at once, waiting at most the given seconds; each node that
answered -> its :class:`Placement`, or the :class:`AvailabilityError` its answer is
(an error reply, no partition id: the message says what to add). A node that did not
answer in time is absent."""


@dataclass(frozen=True)
class Unplaced(Generic[K]):
    """The nodes one :meth:`PartitionDirectory.learn` could not place.

    Parameters
    ----------
    failed : dict of K to AvailabilityError
        Those whose answer is an error, with it.
    silent : list of K
        Those that did not answer in time (asked again next time).
    """

    failed: dict[K, AvailabilityError]
    silent: list[K]


def check_timeout(value: Any, name: str = "query_timeout") -> float:
    """Check ``value`` as a timeout: a finite number of seconds > 0.

    Parameters
    ----------
    value : Any
        The timeout given, in seconds (``bool`` is refused).
    name : str
        The argument's name, for the error message.

    Returns
    -------
    float
        ``value`` in seconds, in (0, inf).

    Raises
    ------
    ValueError
        If ``value`` is no finite number > 0.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name}: {value!r} must be a number of seconds > 0")
    if not 0 < value < math.inf:
        raise ValueError(f"{name}: {value!r} must be a number of seconds > 0")
    return float(value)


class PartitionDirectory(Generic[K]):
    """Node -> :class:`Placement`, each node asked once (see the module docstring).

    Parameters
    ----------
    timeout : float, default 60
        Seconds one question waits at most, in (0, inf).
    num_clients : int or None
        N, >= 1: partition ids must lie in 0..N-1 (``None``: any id >= 0).
    label : callable
        A node (K) as errors name it (default ``"node <id>"``).

    Raises
    ------
    ValueError
        If ``timeout`` is no finite number > 0.
    """

    def __init__(
        self,
        timeout: float = DEFAULT_QUERY_TIMEOUT,
        num_clients: int | None = None,
        label: Callable[[K], str] = "node {}".format,
    ) -> None:
        self.timeout = check_timeout(timeout)
        self.num_clients = num_clients
        self.label = label
        self.placements: dict[K, Placement] = {}
        self.asked = 0  # questions sent, one per node asked

    def __contains__(self, node: object) -> bool:
        return node in self.placements

    def partition_of(self, nodes: Iterable[K] | None = None) -> dict[K, int]:
        """Map the placed ones of ``nodes`` to their partition ids.

        Parameters
        ----------
        nodes : iterable of K or None
            The nodes asked about (``None``: every placed node).

        Returns
        -------
        dict of K to int
            Node -> partition id; nodes not placed are left out.
        """
        nodes = self.placements if nodes is None else nodes
        return {n: self.placements[n].partition_id for n in nodes if n in self.placements}

    def num_examples(self, nodes: Iterable[K] | None = None) -> dict[int, int]:
        """Map partition ids to m_i for the placed ``nodes`` that reported it.

        Parameters
        ----------
        nodes : iterable of K or None
            The nodes asked about (``None``: every placed node).

        Returns
        -------
        dict of int to int
            Partition id -> m_i, the number of examples (a partition placed twice, a
            reconnected node, gives its latest m_i).
        """
        nodes = self.placements if nodes is None else nodes
        return {
            p.partition_id: p.num_examples
            for n in nodes
            if (p := self.placements.get(n)) is not None and p.num_examples is not None
        }

    def learn(self, nodes: Iterable[K], ask: Query[K], timeout: float | None = None) -> Unplaced[K]:
        """Ask the ``nodes`` not placed yet, all at once; their answers join the directory.

        Parameters
        ----------
        nodes : iterable of K
            The nodes needed; placed ones are not asked again.
        ask : Query
            The transport (:data:`Query`).
        timeout : float or None
            Seconds to wait at most, > 0 (``None``: the directory's).

        Returns
        -------
        Unplaced
            The nodes it could not place (they are asked again next time).

        Raises
        ------
        AvailabilityError
            For an answer whose partition id is not an integer in 0..N-1.
        ValueError
            If ``timeout`` is no finite number > 0.
        """
        new = list(dict.fromkeys(n for n in nodes if n not in self.placements))
        if not new:
            return Unplaced({}, [])
        self.asked += len(new)
        answers = ask(new, self.timeout if timeout is None else check_timeout(timeout))
        failed: dict[K, AvailabilityError] = {}
        for node in new:
            answer = answers.get(node)
            if isinstance(answer, AvailabilityError):
                failed[node] = answer
            elif answer is not None:
                self.placements[node] = self._checked(node, answer)
        return Unplaced(failed, [n for n in new if n not in answers])

    def require(
        self,
        nodes: Iterable[K],
        ask: Query[K],
        asker: str,
        hint: str,
        *,
        sizes: bool = False,
        timeout: float | None = None,
    ) -> dict[K, Placement]:
        """Return the placement of every one of ``nodes``, asking the new ones.

        Parameters
        ----------
        nodes : iterable of K
            The nodes needed.
        ask : Query
            The transport (:data:`Query`).
        asker : str
            Who needs them (a strategy's or oracle's name), for the error message.
        hint : str
            What to change, for the error message.
        sizes : bool
            Whether m_i is needed too.
        timeout : float or None
            Seconds to wait at most, > 0 (``None``: the directory's).

        Returns
        -------
        dict of K to Placement
            Node -> placement, for every one of ``nodes``.

        Raises
        ------
        AvailabilityError
            The first wrong answer's, else one naming ``asker``, the nodes that gave no
            partition id (or m_i when ``sizes``) in time, and ``hint``.
        """
        nodes = list(nodes)
        timeout = self.timeout if timeout is None else check_timeout(timeout)
        unplaced = self.learn(nodes, ask, timeout)
        if unplaced.failed:
            raise next(iter(unplaced.failed.values()))
        missing = [
            n
            for n in nodes
            if n not in self.placements or (sizes and self.placements[n].num_examples is None)
        ]
        if missing:
            keys = f"'{PARTITION_ID}' and '{NUM_EXAMPLES}'" if sizes else f"'{PARTITION_ID}'"
            raise AvailabilityError(
                f"{asker}: node(s) {sorted(missing)} gave no {keys} within {timeout:g} s "
                f"(query_timeout); {hint}"
            )
        return {n: self.placements[n] for n in nodes}

    def _checked(self, node: K, answer: Placement) -> Placement:
        """Return ``answer`` if its partition id is an integer in 0..N-1, else raise."""
        pid, n = answer.partition_id, self.num_clients
        bound = math.inf if n is None else n
        if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid < bound:
            last = "N-1" if n is None else n - 1
            known = "" if n is None else f" (the oracle knows num_clients = {n})"
            raise AvailabilityError(
                f"{self.label(node)} reports {PARTITION_ID} = {pid!r}: expected an integer "
                f"in 0..{last}{known}"
            )
        return answer


def check_unique(partition_of: Mapping[K, int], label: Callable[[K], str]) -> None:
    """Check that no two nodes report the same partition id.

    Parameters
    ----------
    partition_of : mapping of K to int
        Node -> partition id.
    label : callable
        A node as the error names it.

    Raises
    ------
    AvailabilityError
        Naming the two nodes, when two report the same partition id.
    """
    first: dict[int, K] = {}
    for node, pid in partition_of.items():
        if pid in first:
            raise AvailabilityError(
                f"{label(first[pid])} and {label(node)} both report {PARTITION_ID} = {pid}: "
                "give every SuperNode its own --node-config partition-id"
            )
        first[pid] = node


# ------------------------------------------------------------------ the legacy API
def properties_placement(cid: str, properties: Mapping[str, Any]) -> Placement | AvailabilityError:
    """Read a legacy client's ``get_properties`` answer as its :class:`Placement`.

    Parameters
    ----------
    cid : str
        The client's Flower id, for the error message.
    properties : mapping of str to Any
        Its properties: ``partition-id`` (and ``num-examples``, m_i).

    Returns
    -------
    Placement or AvailabilityError
        The placement (an integral float id becomes an int), or the error, returned not
        raised, when the answer has no partition id.
    """
    if PARTITION_ID not in properties:
        return AvailabilityError(f"client {cid} did not report '{PARTITION_ID}' in get_properties")
    pid = properties[PARTITION_ID]
    pid = int(pid) if isinstance(pid, int | float) and float(pid).is_integer() else pid
    size = properties.get(NUM_EXAMPLES)
    return Placement(pid, None if size is None else int(size))


def properties_query(proxies: Iterable[ClientProxy], max_workers: int = 8) -> Query[str]:
    """Build the legacy transport (a :data:`Query`) over ``proxies``.

    It calls ``get_properties`` of each asked cid with the directory's timeout, on a pool
    of ``max_workers`` threads; a call that raises (no answer in time, an error, a lost
    connection) is that client's failure.

    Parameters
    ----------
    proxies : iterable of ClientProxy
        The clients that may be asked, by cid.
    max_workers : int
        Threads at most, >= 1.

    Returns
    -------
    Query
        cids, timeout in s -> cid -> :class:`Placement` or :class:`AvailabilityError`.
    """
    by_cid = {proxy.cid: proxy for proxy in proxies}

    def ask_one(cid: str, timeout: float) -> Placement | AvailabilityError:
        try:
            res = by_cid[cid].get_properties(
                GetPropertiesIns(config={}), timeout=timeout, group_id=None
            )
        except Exception as err:  # noqa: BLE001 - the client's failure, said below
            return AvailabilityError(
                f"client {cid} did not answer get_properties within {timeout:g} s "
                f"({type(err).__name__}: {err})"
            )
        return properties_placement(cid, res.properties)

    def ask(cids: Sequence[str], timeout: float) -> dict[str, Placement | AvailabilityError]:
        with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(cids)))) as pool:
            return dict(zip(cids, pool.map(lambda cid: ask_one(cid, timeout), cids)))

    return ask


def client_label(cid: str) -> str:
    """Name a legacy client as errors do: ``"client <cid>"``."""
    return f"client {cid}"
