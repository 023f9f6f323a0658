"""Messages in flight on a grid: push, pull what arrived, expire what waited too long.

:class:`MessageFlight` is the push-and-pull bookkeeping both wall-clock users share:
FedBuff's messages (:class:`~fedram_flwr.message_api.fedbuff_flight.InFlight`) and the
synchronous rounds on the wall clock
(:class:`~fedram_flwr.message_api.wall.WallClockAvailability`). Messages go out with
``grid.push_messages`` (which returns at once) and replies come back with
``grid.pull_messages`` (which returns those arrived so far, without waiting), never
with ``send_and_receive``'s blocking round. Each message is pushed beside the caller's
key (what it stands for); a pull gives the replies arrived beside their keys, and the
keys of the messages whose ``ttl`` ran out since their push (counted here: an in-process
grid makes no expiry replies). A reply to a message not in flight (not ours, pulled
before, forgotten) is ignored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

from flwr.app import Message
from flwr.serverapp import Grid

K = TypeVar("K")  # what a message stands for, to its caller


class MessageFlight(Generic[K]):
    """The messages in flight on ``grid`` (see the module docstring).

    Parameters
    ----------
    grid : Grid
        Where messages go.
    ttl : float
        Seconds a message is waited for after its push, > 0.
    now : callable
        The clock read (``time.monotonic``; tests give their own).

    Attributes
    ----------
    sent : dict of str to (K, float)
        Message id -> (its key, its push time), for those in flight.
    """

    def __init__(
        self, grid: Grid, *, ttl: float, now: Callable[[], float] = time.monotonic
    ) -> None:
        if not ttl > 0:
            raise ValueError(f"ttl: {ttl!r} must be a number of seconds > 0")
        self.grid, self.ttl, self.now = grid, float(ttl), now
        self.sent: dict[str, tuple[K, float]] = {}

    def push(self, messages: Sequence[Message], keys: Sequence[K]) -> list[tuple[K, str]]:
        """Push ``messages``, each beside its key.

        Returns
        -------
        list of (K, str)
            Each key pushed beside its message id; the keys the grid refused (no id)
            are left out.
        """
        ids = list(self.grid.push_messages(list(messages))) if messages else []
        pushed = self.now()
        out = []
        for i, key in enumerate(keys):
            message_id = ids[i] if i < len(ids) else None
            if message_id:
                self.sent[message_id] = (key, pushed)
                out.append((key, message_id))
        return out

    def pull(self) -> tuple[list[tuple[K, Message]], list[K]]:
        """Pull what arrived since the last pull.

        Returns
        -------
        tuple of (list of (K, Message), list of K)
            The replies arrived, beside their keys, in the grid's order; the keys whose
            ``ttl`` ran out (no longer in flight).
        """
        replies = []
        if self.sent:
            for reply in self.grid.pull_messages(list(self.sent)):
                entry = self.sent.pop(reply.metadata.reply_to_message_id, None)
                if entry is not None:
                    replies.append((entry[0], reply))
        now, expired = self.now(), []
        for message_id, (key, pushed) in list(self.sent.items()):
            if now - pushed > self.ttl:
                del self.sent[message_id]
                expired.append(key)
        return replies, expired

    def forget(self, message_ids: Iterable[str]) -> None:
        """Stop waiting for ``message_ids`` (a reply that still comes is ignored)."""
        for message_id in message_ids:
            self.sent.pop(message_id, None)
