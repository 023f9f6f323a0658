"""The partition-id contract of the Message API, server side, written once.

Oracles know clients by partition id; Flower names nodes by random node ids. The node id
-> partition id map is learned once (for the ``connected`` oracle: for each newly
connected node) with a ``"query.partition_id"`` message that :func:`partition_id_query`,
registered in the user's ClientApp, answers from ``context.node_config["partition-id"]``
(with the node's ``num-examples`` when the handler is given it: rFedFair needs m_i).
Every wait is bounded (``wait_timeout``, ``query_timeout``) and its error says what was
expected, what was seen and which setting to change.

The one query the project's Message-API strategies send to learn who a node is (the
node's half, the query's name and
the handler :func:`partition_id_query` that answers it, is
:mod:`fedram_flwr.clients.partition_query`, which a ClientApp imports without the server side).
:func:`grid_query` is the server's side: the transport of the
partition directory (:mod:`fedram_flwr.availability.partition_directory`), which asks each node
once, all new nodes in one ``send_and_receive`` with a timeout; :func:`placement_of`
reads a reply and names what is missing. The availability wrapper
(:mod:`~fedram_flwr.message_api.availability`) keeps one directory for the run; FedAWE
and rFedFair run without the wrapper keep their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedram_flwr.availability.partition_directory import (
    AvailabilityError,
    PartitionDirectory,
    Placement,
    Query,
)
from fedram_flwr.clients.partition_query import (
    NODE_CONFIG_KEYS,
    NUM_PARTITIONS,
    PARTITION_ACTION,
    PARTITION_QUERY,
    PARTITION_RECORD,
    partition_id_query,
)
from fedram_flwr.protocol import NUM_EXAMPLES, PARTITION_ID

__all__ = [
    "NODE_CONFIG_KEYS",
    "NUM_PARTITIONS",
    "PARTITION_ACTION",
    "PARTITION_QUERY",
    "PARTITION_RECORD",
    "ask_partitions",
    "check_federation_size",
    "grid_query",
    "partition_id_query",
    "placement_of",
]

HANDLER_HINT = (
    "register the handler in the ClientApp: "
    f'app.query("{PARTITION_ACTION}")(partition_id_query), with '
    "from fedram_flwr.message_api import partition_id_query"
)


def ask_partitions(grid: Grid, nodes: Iterable[int], timeout: float) -> list[Message]:
    """Send one ``"query.partition_id"`` message to each of ``nodes``, in one call.

    Parameters
    ----------
    grid : Grid
        The run's grid.
    nodes : iterable of int
        Flower node ids.
    timeout : float
        Seconds, > 0: how long ``send_and_receive`` waits for the replies.

    Returns
    -------
    list of Message
        The replies that came within ``timeout``.
    """
    messages = [
        Message(RecordDict(), dst_node_id=node, message_type=PARTITION_QUERY) for node in nodes
    ]
    return list(grid.send_and_receive(messages, timeout=timeout)) if messages else []


def placement_of(reply: Message, num_clients: int | None = None) -> Placement | AvailabilityError:
    """Read a reply to the partition-id query as the node's placement.

    Parameters
    ----------
    reply : Message
        A node's reply to the partition-id query.
    num_clients : int, optional
        The federation's size, when known (the errors name it).

    Returns
    -------
    Placement or AvailabilityError
        The node's :class:`~fedram_flwr.availability.partition_directory.Placement`, or the error
        that says what to add when the node could not answer or has no
        ``partition-id`` (the directory checks the id's range).
    """
    node = int(reply.metadata.src_node_id)
    n = "N" if num_clients is None else num_clients
    last = "N-1" if num_clients is None else num_clients - 1
    if reply.has_error():
        return AvailabilityError(
            f"node {node} could not answer the partition-id query "
            f"({reply.error.reason}); {HANDLER_HINT}"
        )
    record = reply.content.config_records.get(PARTITION_RECORD, ConfigRecord())
    if PARTITION_ID not in record:
        keys = record.get(NODE_CONFIG_KEYS) or "none"
        return AvailabilityError(
            f"node {node} has no '{PARTITION_ID}' in its node_config (its keys: {keys}); "
            f'start it with flower-supernode --node-config "{PARTITION_ID}=K '
            f'num-partitions={n}" (K in 0..{last}, one per node; the Simulation Engine sets '
            "it itself)"
        )
    size, count = record.get(NUM_EXAMPLES), record.get(NUM_PARTITIONS)
    return Placement(
        record[PARTITION_ID],
        None if size is None else int(size),
        count if isinstance(count, int) and not isinstance(count, bool) else None,
    )


def grid_query(grid: Grid, num_clients: int | None = None) -> Query[int]:
    """Return the Message-API transport of the partition directory.

    One query message to each asked node, in one ``send_and_receive`` on ``grid`` with
    the directory's timeout; a node whose reply did not come in time is absent from the
    answers.

    Parameters
    ----------
    grid : Grid
        The run's grid.
    num_clients : int, optional
        The federation's size its errors name, when known.

    Returns
    -------
    Query
        nodes, timeout -> {node: placement or error}.
    """

    def ask(nodes: Sequence[int], timeout: float) -> dict[int, Placement | AvailabilityError]:
        return {
            int(reply.metadata.src_node_id): placement_of(reply, num_clients)
            for reply in ask_partitions(grid, nodes, timeout)
        }

    return ask


def check_federation_size(grid: Grid, directory: PartitionDirectory[int]) -> None:
    """Fail at once when the federation is known to have too few nodes.

    Too few: fewer than the oracle's ``num_clients`` (the directory's); failing at once
    beats waiting ``wait_timeout`` for nodes that cannot come. The count is known to be
    final when every node connected now reports, through the partition-id query (asked
    through ``directory``: a node it places is not asked again), the federation's size in
    its node_config's ``num-partitions`` (the Simulation Engine sets it to
    ``num-supernodes`` and registers every node before the ServerApp starts;
    ``flower-supernode --node-config "... num-partitions=N"`` in deployment): if all say
    N < ``num_clients``, an :class:`AvailabilityError` names both numbers. Otherwise
    (enough nodes, none yet, a node that does not say, or N large enough while SuperNodes
    are still connecting) it returns and the caller waits.

    Parameters
    ----------
    grid : Grid
        The run's grid.
    directory : PartitionDirectory
        The run's partition directory (its ``num_clients`` is the oracle's).

    Raises
    ------
    AvailabilityError
        If every connected node says num-partitions N < ``num_clients``.
    """
    num_clients = directory.num_clients
    nodes = sorted({int(i) for i in grid.get_node_ids()})
    if num_clients is None or not nodes or len(nodes) >= num_clients:
        return
    directory.learn(nodes, grid_query(grid, num_clients))
    sizes = [directory.placements[n].num_partitions for n in nodes if n in directory]
    if len(sizes) < len(nodes) or not all(isinstance(k, int) for k in sizes):
        return
    if (size := max(sizes)) < num_clients:
        raise AvailabilityError(
            f"expected {num_clients} nodes (one per partition: the oracle knows num_clients "
            f"= {num_clients}), but the federation has {size}: every connected node "
            f"({len(nodes)}) says num-partitions = {size}; start {num_clients} SuperNodes "
            f"(flwr run: --federation-config 'num-supernodes={num_clients}') or give the "
            f"oracle {size} clients"
        )
