"""A Flower Message-API ``Grid`` whose nodes are a ``ClientApp`` called in this process.

:class:`InProcessGrid` is what Flower's Simulation Engine does for a ``ServerApp``'s
messages, without Ray, a SuperLink or threads: each message pushed is handed at once to
``client_app(message=..., context=...)`` (as Flower's Ray actor calls it), with the
destination node's one persistent ``Context`` (``node_config`` ``partition-id`` and
``num-partitions``, as the Simulation Engine sets them; ``state`` kept across rounds).
A client that raises gives an error reply built as the Simulation Engine builds it
(``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``, the exception wrapped in Flower's
``ClientAppException``; Ray's wrapper and traceback are not in the reason) and its
``Context`` stays as it was before the call, as in both of Flower's engines; so a
strategy sees a failure as under the Simulation Engine. Checked once against Flower
1.39's ``run_simulation`` with Flower's FedAvg and a client failing in round 2: same
final arrays, same train metrics per round, same error code.

Determinism: node ids are ``NODE_ID_BASE + partition id`` (never equal to a partition id,
so a server that mixes the two fails here too), message ids count up from the grid's
creation, replies come back in the order the messages were pushed.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from logging import ERROR

from flwr.app import Context, Message, RecordDict
from flwr.app.error import Error
from flwr.clientapp.client_app import ClientAppException, LoadClientAppError
from flwr.common.constant import (
    NUM_PARTITIONS_KEY,
    PARTITION_ID_KEY,
    SUPERLINK_NODE_ID,
    ErrorCode,
)
from flwr.common.logger import log
from flwr.serverapp.grid import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from fedram_flwr.engines.batching import RoundBatch

NODE_ID_BASE = 1_000_000
"""Node id of partition p: ``NODE_ID_BASE + p``."""

MAX_POLLS_WITHOUT_SENDING = 10
"""``get_node_ids`` calls in a row without a message pushed after which the grid raises:
a strategy waiting for more nodes (Flower's ``sample_nodes`` polls once a second, with
no time limit) would wait for ever, as no node ever joins an in-process grid."""

ClientAppFn = Callable[..., Message]
"""A ``ClientApp`` (or anything called as ``app(message=..., context=...)``)."""


def node_id_of(partition_id: int) -> int:
    """The in-process node id of ``partition_id``."""
    return NODE_ID_BASE + partition_id


def error_reply(message: Message, err: Exception) -> Message:
    """The reply Flower's Simulation Engine sends when the ClientApp raised ``err``
    (``flwr.server.superlink.fleet.vce.vce_api.worker`` over the Ray actor's
    ``ClientAppException``)."""
    if isinstance(err, LoadClientAppError):
        code, raised = ErrorCode.LOAD_CLIENT_APP_EXCEPTION, err
    else:
        code, raised = ErrorCode.CLIENT_APP_RAISED_EXCEPTION, ClientAppException(str(err))
    reason = str(type(raised)) + ":<'" + str(raised) + "'>"
    return Message(Error(code=code, reason=reason), reply_to=message)


class InProcessGrid(Grid):
    """A ``Grid`` of ``num_partitions`` nodes, partition ids 0..n-1, all running
    ``client_app`` in this process (see the module docstring).

    ``run_config``: every node's ``context.run_config``. ``batch``: delivers each push's
    messages together (:meth:`push_messages`). ``run_id``: the run's id in the
    contexts and messages. Creating the grid sets Flower's process-wide ``TaskIdentity``
    to the server's (``SUPERLINK_NODE_ID``, ``run_id``), as Flower's ServerApp runtime
    does, so that ``Message(content, dst_node_id=..., message_type=...)`` works."""

    delivers_in_process = True  # FedBuff's clock ``auto``: simulated here (replies are instant)

    def __init__(
        self,
        client_app: ClientAppFn,
        num_partitions: int,
        *,
        run_config: Mapping[str, bool | int | float | str] | None = None,
        run_id: int = 0,
        batch: RoundBatch | None = None,
    ) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
        self.client_app = client_app
        self.batch = batch
        self._run = Run.create_empty(run_id)
        self.contexts: dict[int, Context] = {
            node_id_of(pid): Context(
                run_id=run_id,
                node_id=node_id_of(pid),
                node_config={PARTITION_ID_KEY: pid, NUM_PARTITIONS_KEY: num_partitions},
                state=RecordDict(),
                run_config=dict(run_config or {}),
            )
            for pid in range(num_partitions)
        }
        self._replies: dict[str, Message] = {}
        self._sent = 0
        self._polls = 0  # get_node_ids calls since the last push
        TaskIdentity.task_id = 0
        TaskIdentity.run_id = run_id
        TaskIdentity.node_id = SUPERLINK_NODE_ID

    def set_run(self, run: Run) -> None:
        if not isinstance(run, Run):
            raise TypeError(f"`run` must be an instance of Run, got {type(run).__name__}")
        self._run = run
        TaskIdentity.run_id = run.run_id

    @property
    def run(self) -> Run:
        return Run(**vars(self._run))

    def partition_of(self, node_id: int) -> int:
        """The partition id of ``node_id`` (its ``node_config["partition-id"]``)."""
        return int(self.contexts[node_id].node_config[PARTITION_ID_KEY])

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        """Every node, in partition order (all of them are always connected). Raises
        after :data:`MAX_POLLS_WITHOUT_SENDING` calls with no message sent in between:
        the strategy waits for nodes that will never come."""
        self._polls += 1
        if self._polls > MAX_POLLS_WITHOUT_SENDING:
            k = len(self.contexts)
            raise RuntimeError(
                f"the strategy asked for the node ids {self._polls} times without sending "
                f"a message: it waits for more nodes than this in-process grid has ({k}, "
                "all connected from the start; no more will come). Set the strategy's "
                f"min_available_nodes (Flower's FedAvg: 2 by default), min_train_nodes and "
                f"min_evaluate_nodes to at most {k}"
            )
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Delivers each message to its node now, in order; the ids to pull replies.
        With ``batch`` (``training.batched``) the messages are delivered together, their
        ClientApps' local SGD stacked (the same replies)."""
        ids = []
        self._polls = 0
        if self.batch is not None:
            messages = list(messages)
            for msg in messages:
                self._check(msg)
            delivered = self.batch.run([partial(self._deliver, msg) for msg in messages])
            replies = iter(d.get() for d in delivered)
        for msg in messages:
            self._check(msg)
            msg_id = f"in-process-{self._sent}"
            self._sent += 1
            msg.metadata.__dict__["_message_id"] = msg_id
            reply = self._deliver(msg) if self.batch is None else next(replies)
            reply.metadata.__dict__["_message_id"] = f"{msg_id}-reply"
            self._replies[msg_id] = reply
            ids.append(msg_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """The replies to ``message_ids`` not pulled yet, in the order they were pushed."""
        wanted = set(message_ids)
        ready = [i for i in self._replies if i in wanted]
        return [self._replies.pop(i) for i in ready]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        """Every reply, in the order of ``messages``. ``timeout`` is not applied: each
        client runs to its end before the next starts."""
        return self.pull_messages(self.push_messages(messages))

    def _check(self, msg: Message) -> None:
        meta = msg.metadata
        if meta.dst_node_id not in self.contexts:
            first, last = node_id_of(0), node_id_of(len(self.contexts) - 1)
            raise ValueError(
                f"message to node {meta.dst_node_id}, which this grid does not have "
                f"(its node ids are {first}..{last}: grid.get_node_ids())"
            )
        if meta.reply_to_message_id or not msg.has_content() or meta.message_id:
            raise ValueError(
                "push_messages takes new instruction messages with content, made with "
                f"Message(content, dst_node_id=..., message_type=...); got {msg!r}"
            )

    def _deliver(self, msg: Message) -> Message:
        """``client_app(message, context)`` on a copy of the message, as the engines
        deliver a deserialised one (a strategy sends one ``RecordDict`` to every node);
        the node's ``Context`` is restored if the ClientApp raises."""
        context = self.contexts[msg.metadata.dst_node_id]
        before = copy.deepcopy(context.state)
        try:
            reply = self.client_app(message=copy.deepcopy(msg), context=context)
            if not isinstance(reply, Message):
                raise TypeError(f"the ClientApp returned {type(reply).__name__}, not a Message")
        except Exception as err:  # reported to the server, as Flower's engines do
            log(ERROR, "ClientApp of node %s raised", msg.metadata.dst_node_id, exc_info=err)
            context.state = before
            return error_reply(msg, err)
        return reply
