"""FedBuff's train messages in flight: push, pull, time out, drain.

:class:`InFlight` is the Message-API half of FedBuff's loop
(:class:`~fedram_flwr.message_api.fedbuff.FedBuff`): each started job
(:class:`~fedram_flwr.strategies.fedbuff_jobs.Job`) becomes one train ``Message`` to its
partition's node, pushed with ``grid.push_messages`` (which returns at once); replies are
collected with ``grid.pull_messages`` (which returns those arrived so far, without
waiting), never with ``send_and_receive``'s blocking round (the bookkeeping is
:class:`~fedram_flwr.message_api.flight.MessageFlight`, which the wall clock's
synchronous rounds share). A reply becomes the job's
returned model, or ``None`` (a failure, which frees the slot) when it carries an error
(the ClientApp raised, the node left: Flower's ``NODE_UNAVAILABLE``, its time to live ran
out: ``MESSAGE_UNAVAILABLE``), has NaN or inf, or when none came within ``ttl`` seconds of
the push (counted here too: an in-process grid makes no expiry replies). A reply that
breaks the wire contract (no arrays, arrays shaped unlike the model sent, another
partition's id) raises, as for the synchronous strategies
(:func:`~fedram_flwr.message_api.round_guard.client_reply`). Two ways to wait:
:meth:`InFlight.reply_of` (one job's reply; the others arriving meanwhile are kept: the
simulated clock) and :meth:`InFlight.pull` (whatever arrived: the wall clock). At the end
:meth:`InFlight.drain` pulls and drops what is still in flight.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from logging import INFO

import numpy as np
from flwr.app import Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from fedram_flwr.message_api.flight import MessageFlight
from fedram_flwr.message_api.round_guard import error_text, warn
from fedram_flwr.protocol import PARTITION_ID, Arrays
from fedram_flwr.strategies.fedbuff_jobs import Job

Arrival = tuple[int, "Arrays | None"]
"""(partition id, the model it returned, ``None`` if its update failed)."""


@dataclass(frozen=True)
class Sent:
    """One train message in flight.

    Parameters
    ----------
    partition_id, node_id : int
        Where it went.
    version : int
        The model version it carries.
    shapes : tuple of tuple of int
        The shapes of the model it carries (a reply's must match).
    """

    partition_id: int
    node_id: int
    version: int
    shapes: tuple[tuple[int, ...], ...]


class InFlight:
    """The train messages in flight on ``grid`` (see the module docstring).

    Parameters
    ----------
    grid : Grid
        Where messages go.
    content : callable
        ``content(job)``: the ``RecordDict`` that trains ``job`` (its model and config).
    ttl : float
        Seconds a message may wait for its reply (also its ``Message`` ttl), > 0.
    poll_interval : float
        Seconds between two empty pulls while waiting, > 0.
    strategy : str
        The strategy's name, for the log and errors.
    """

    def __init__(
        self,
        grid: Grid,
        content: Callable[[Job], RecordDict],
        *,
        ttl: float,
        poll_interval: float,
        strategy: str = "FedBuff",
    ) -> None:
        self.flight: MessageFlight[Sent] = MessageFlight(grid, ttl=ttl)
        self.grid, self.content, self.ttl = grid, content, float(ttl)
        self.poll_interval, self.strategy = poll_interval, strategy
        self.kept: dict[int, Arrays | None] = {}  # arrived, not taken yet (reply_of)
        self.unsent: list[Arrival] = []  # pushes the grid refused: failures to report
        self.pulled = 0  # replies pulled in all

    def push(self, jobs: Sequence[Job], node_of: Mapping[int, int]) -> None:
        """Push one train message per job, to its partition's node (``node_of``)."""
        messages = [
            Message(
                self.content(job),
                dst_node_id=node_of[job.partition_id],
                message_type=MessageType.TRAIN,
                ttl=self.ttl,
                group_id=str(job.version + 1),
            )
            for job in jobs
        ]
        keys = [
            Sent(job.partition_id, node_of[job.partition_id], job.version,
                 tuple(tuple(np.shape(a)) for a in job.arrays))
            for job in jobs
        ]  # fmt: skip
        pushed = {id(key) for key, _ in self.flight.push(messages, keys)}
        for key in keys:
            if id(key) not in pushed:
                warn(f"{self.strategy}: the grid did not push partition {key.partition_id}'s "
                     "message; its update counts as failed")  # fmt: skip
                self.unsent.append((key.partition_id, None))

    def pull(self) -> list[Arrival]:
        """Return what arrived since the last pull, and the messages whose ttl ran out."""
        arrived, self.unsent = self.unsent, []
        replies, expired = self.flight.pull()
        for sent, reply in replies:
            self.pulled += 1
            arrived.append((sent.partition_id, self.returned(reply, sent)))
        for sent in expired:
            warn(f"{self.strategy}: no reply from partition {sent.partition_id} (node "
                 f"{sent.node_id}) within its ttl of {self.ttl:g} s; its update counts "
                 "as failed")  # fmt: skip
            arrived.append((sent.partition_id, None))
        return arrived

    def reply_of(self, partition_id: int) -> Arrays | None:
        """Wait for ``partition_id``'s reply (its model, ``None``: failed), keeping others."""
        while partition_id not in self.kept:
            arrived = self.pull()
            self.kept.update(arrived)
            if not arrived:
                time.sleep(self.poll_interval)
        return self.kept.pop(partition_id)

    def drain(self, timeout: float) -> int:
        """Pull and drop what is still in flight, waiting at most ``timeout`` s.

        Returns the number of updates dropped (arrived or not).
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        dropped = len(self.kept) + len(self.unsent)
        self.kept, self.unsent = {}, []
        while self.flight.sent and time.monotonic() < deadline:
            arrived = self.pull()
            dropped += len(arrived)
            if not arrived:
                time.sleep(self.poll_interval)
        dropped += len(self.flight.sent)
        if self.flight.sent:
            log(INFO, "%s: %d message(s) still in flight at the end: not waited for",
                self.strategy, len(self.flight.sent))  # fmt: skip
        self.flight.forget(list(self.flight.sent))
        return dropped

    def returned(self, reply: Message, sent: Sent) -> Arrays | None:
        """Return the model a reply brings; ``None`` (logged) for an error.

        Raises
        ------
        ValueError
            For a reply that breaks the wire contract: no arrays, arrays shaped unlike
            the model sent, another partition's id in its metrics.
        """
        where = f"partition {sent.partition_id} (node {sent.node_id})"
        if reply.has_error():
            warn(f"{self.strategy}: the update of {where} failed: {error_text(reply)}")
            return None
        content = reply.content
        records = list(content.array_records.values())
        if len(records) != 1:
            raise ValueError(
                f"{self.strategy}: the reply of {where} has {len(records)} ArrayRecords; a "
                "client returns one: the model it received, trained"
            )
        arrays = records[0].to_numpy_ndarrays()
        got = tuple(tuple(a.shape) for a in arrays)
        if got != sent.shapes:
            raise ValueError(
                f"{self.strategy}: the reply of {where} has {len(got)} arrays shaped "
                f"{list(got)}, the model sent {len(sent.shapes)} shaped {list(sent.shapes)}: "
                "a client returns the arrays it received, updated, in order"
            )
        metrics = next(iter(content.metric_records.values()), {})
        if PARTITION_ID in metrics and int(metrics[PARTITION_ID]) != sent.partition_id:
            raise ValueError(
                f"{self.strategy}: the reply of {where} reports {PARTITION_ID} "
                f"{metrics[PARTITION_ID]}: two nodes claim one partition, or the node "
                "config changed"
            )
        return arrays  # NaN or inf: refused by the loop (fedbuff_loop.drive)
