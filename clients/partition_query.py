"""The node's half of the partition-id contract: the query, its reply and its handler.

The query's name, its reply's record, and the one client handler that answers it; the
server's half, which sends the query and reads the replies, is
:mod:`fedram_flwr.message_api.partitions`.

Oracles and the algorithms' per-client state know clients by partition id; Flower names
nodes by random node ids. The server sends a ``"query.partition_id"`` message
(:data:`PARTITION_QUERY`, with no content) to a node; the node's ClientApp answers it with
:func:`partition_id_query`, registered as ``app.query("partition_id")(partition_id_query)``:
a ``ConfigRecord`` named ``"partition"`` holding ``partition-id`` (the node's
``context.node_config["partition-id"]``, which the Simulation Engine and ``flower-supernode
--node-config`` set) and, where the handler is given it, ``num-examples`` (m_i: rFedFair's
p_i = m_i / m). Flower's app types only: a ClientApp imports it without the server side.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

from fedram_flwr.protocol import NUM_EXAMPLES, PARTITION_ID

PARTITION_ACTION = "partition_id"
PARTITION_QUERY = f"{MessageType.QUERY}.{PARTITION_ACTION}"  # the query's message type
PARTITION_RECORD = "partition"  # the reply's ConfigRecord
NODE_CONFIG_KEYS = "node-config-keys"  # in the reply when partition-id is missing
NUM_PARTITIONS = "num-partitions"  # node_config: the federation's node count, where set


def partition_id_query(
    msg: Message, context: Context, *, num_examples: int | None = None
) -> Message:
    """Answer the server's ``"query.partition_id"`` message (the client side of the contract).

    The reply is ``ConfigRecord({"partition-id": K})`` from ``context.node_config`` (set by
    the Simulation Engine, and by ``flower-supernode --node-config "partition-id=K
    num-partitions=N"``), with its ``num-partitions`` where set
    (:func:`~fedram_flwr.message_api.partitions.check_federation_size` reads it), and
    ``"num-examples"`` (m_i, the training-set size) when given: strategies that weigh nodes
    before training (rFedFair's p_i = m_i / m) need it; register then a handler that passes
    it, e.g. ``partition_id_query(msg, context, num_examples=len(trainset))``. A node
    without ``partition-id`` answers with the keys it has, and the server stops with an
    error that says what to add.

    Parameters
    ----------
    msg : Message
        The server's query.
    context : Context
        The node's context (its ``node_config``).
    num_examples : int, optional
        m_i, the node's number of training examples.

    Returns
    -------
    Message
        The reply, a ``ConfigRecord`` named ``"partition"``.
    """
    config = context.node_config
    if PARTITION_ID in config:
        record = ConfigRecord({PARTITION_ID: config[PARTITION_ID]})
        if isinstance(config.get(NUM_PARTITIONS), int):
            record[NUM_PARTITIONS] = config[NUM_PARTITIONS]
        if num_examples is not None:
            record[NUM_EXAMPLES] = int(num_examples)
    else:
        record = ConfigRecord({NODE_CONFIG_KEYS: ", ".join(sorted(config))})
    return Message(RecordDict({PARTITION_RECORD: record}), reply_to=msg)
