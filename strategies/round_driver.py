"""One round of every strategy, Flower-free: the round policy both Flower faces call.

The legacy adapters (:class:`~fedram_flwr.strategies.reply_aggregation.ReplyAggregation`), the
Message-API ones (:class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy`,
``QFFL``) and ``with_availability`` only turn their wire types into :class:`Received`
replies and failure texts, call this module, and turn its :class:`RoundResult` back into
Flower's. What a round does, in this order:

1. :func:`screen_round`: the replies that are no update are refused
   (:func:`~fedram_flwr.strategies.rounds.refusals`: a bad or duplicated partition id,
   NaN or inf), each named in the log and counted as a failure of its sender; the
   failure guard (:func:`~fedram_flwr.strategies.rounds.after_round`) counts the round;
2. :func:`drive_round`, after the screen: a round with a failure under
   ``accept_failures=False`` aggregates nothing and leaves every state as it was (the
   round counts as skipped); otherwise the replies, as the cores'
   :class:`~fedram_flwr.protocol.ClientReply`, in partition-id order (sums are the same
   in every engine, whatever order they arrived in), the kept subset
   (:meth:`~fedram_flwr.strategies.core.Core.kept`, unless the trainers were chosen
   before training), the rounds elapsed since the last aggregation (a round nobody was
   available in still counts), and ``core.aggregate``.

Round policies on a simulated clock (wait for all, a deadline, over-selection, late
updates) decide which replies reach a round before it is driven here: the
Flower-free timed round :mod:`fedram_flwr.clock.rounds` (the pure
:func:`fedram_flwr.clock.policy.apply_policy` over the clients' finish times, the late
updates, the clock), called by the legacy API's timed server
(:mod:`fedram_flwr.engines.timed`) and the Message API's
:class:`~fedram_flwr.message_api.timed.TimedAvailability`, which hand the adapters the
replies it keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from fedram_flwr.protocol import ClientReply
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.rounds import FailedRounds, after_round, refusals

T = TypeVar("T")  # the adapter's own reply object (a FitRes, a Message), handed back
S = TypeVar("S")  # the core's state

Warn = Callable[[str], None]
"""Where the round's warnings go (the adapters log them with Flower's logger)."""


def _quiet(line: str) -> None:
    """Drop the line (the default :data:`Warn`)."""


@dataclass(frozen=True)
class RoundPolicy:
    """How a round treats its replies.

    Parameters
    ----------
    accept_failures : bool
        Whether a round with a failure still aggregates its other replies (``False``: it
        aggregates nothing and every state stays as it was).
    """

    accept_failures: bool = True


@dataclass(frozen=True)
class RoundState:
    """What the round policy carries from one round to the next.

    Parameters
    ----------
    guard : FailedRounds
        The failed-rounds guard (:class:`~fedram_flwr.strategies.rounds.FailedRounds`).
    last_round : int
        The last round that aggregated, >= 0 (0: none yet); the core is told the rounds
        elapsed since.
    """

    guard: FailedRounds = field(default_factory=FailedRounds)
    last_round: int = 0


@dataclass(frozen=True)
class Received(Generic[T]):
    """One error-free reply as it arrived, before the screen.

    Parameters
    ----------
    source : T
        The adapter's own object (a ``FitRes``, a ``Message``), handed back in
        :attr:`RoundResult.kept`.
    sender : str
        Who sent it, as the log names it ("client 7", "node 12").
    partition_id : Any
        The partition id it reports, unchecked (``None``: none).
    metrics : mapping of str to Any
        Its fit metrics.
    decode : callable
        Returns its arrays (a sequence of np.ndarray), decoded when asked.
    """

    source: T
    sender: str
    partition_id: Any
    metrics: Mapping[str, Any]
    decode: Callable[[], Sequence[np.ndarray]]


@dataclass(frozen=True)
class Screened(Generic[T]):
    """A round's replies after :func:`screen_round`.

    Parameters
    ----------
    taken : list of Received
        The replies an algorithm may aggregate, in arrival order.
    failures : list of str
        One description per failure: the failures given, then the refusals.
    guard : FailedRounds
        The failed-rounds guard after the round.
    """

    taken: list[Received[T]]
    failures: list[str]
    guard: FailedRounds

    def cancelled(self, policy: RoundPolicy) -> bool:
        """Tell whether a failure cancels the round (``accept_failures`` off).

        Parameters
        ----------
        policy : RoundPolicy
            The round policy.

        Returns
        -------
        bool
            ``True`` if there was a failure and ``policy.accept_failures`` is off.
        """
        return bool(self.failures) and not policy.accept_failures


@dataclass(frozen=True)
class RoundResult(Generic[T, S]):
    """What one round gives.

    Parameters
    ----------
    rounds : RoundState
        The round policy's state after the round.
    outcome : Outcome or None
        The core's :class:`~fedram_flwr.strategies.core.Outcome` (``None``: the round
        was cancelled and the core's state stays as it was).
    kept : list of tuple of (T, ClientReply)
        The replies aggregated, in partition-id order, each beside its ``source`` (for
        Flower's metric aggregation).
    """

    rounds: RoundState
    outcome: Outcome[S] | None
    kept: list[tuple[T, ClientReply]]

    @property
    def moved(self) -> bool:
        """Whether the global model moved (the core aggregated)."""
        return self.outcome is not None and self.outcome.aggregated


def screen_round(
    received: Sequence[Received[T]],
    failures: Sequence[str],
    guard: FailedRounds,
    server_round: int,
    *,
    num_clients: int | None,
    policy: RoundPolicy,
    strategy: str,
    warn: Warn = _quiet,
) -> Screened[T]:
    """Refuse the replies that are no update, and advance the failure guard.

    Each refusal (:func:`~fedram_flwr.strategies.rounds.refusals`) is warned as
    ``round r: <strategy> refused <sender>: <why>`` and counted as a failure of its
    sender; the guard's line (a round that aggregated nothing because clients failed) is
    warned too.

    Parameters
    ----------
    received : sequence of Received
        The round's error-free replies.
    failures : sequence of str
        One description per failed client.
    guard : FailedRounds
        The failed-rounds guard before the round.
    server_round : int
        t, >= 1.
    num_clients : int or None
        N, >= 1: partition ids must lie in 0..N-1 (``None``: any id >= 0).
    policy : RoundPolicy
        The round policy.
    strategy : str
        The strategy's name, for the log.
    warn : callable
        Where the warnings go (default: dropped).

    Returns
    -------
    Screened
        The replies taken, every failure, and the guard after the round.

    Raises
    ------
    FailedRoundsError
        When this round makes ``max_failed_rounds`` such rounds in a row
        (:class:`~fedram_flwr.strategies.rounds.FailedRoundsError`).
    """
    why = refusals(
        [r.partition_id for r in received],
        [r.metrics for r in received],
        [r.decode for r in received],
        num_clients,
    )
    failed = list(failures)
    taken = []
    for reply, reason in zip(received, why):
        if reason is None:
            taken.append(reply)
            continue
        failed.append(f"{reply.sender}: {reason}")
        warn(f"round {server_round}: {strategy} refused {failed[-1]}")
    guard, line = after_round(guard, server_round, failed, len(taken), policy.accept_failures)
    if line:
        warn(f"{strategy}: {line}")
    return Screened(taken, failed, guard)


def drive_round(
    core: Core[S],
    core_state: S,
    server_round: int,
    received: Sequence[Received[T]],
    failures: Sequence[str],
    rounds: RoundState,
    policy: RoundPolicy,
    *,
    reply_of: Callable[[Received[T]], ClientReply],
    strategy: str,
    chosen_before_training: bool = True,
    warn: Warn = _quiet,
) -> RoundResult[T, S]:
    """Run one round of ``core`` (see the module docstring).

    :func:`screen_round`; then, unless a failure cancels the round, the taken replies in
    partition-id order (the kept subset of them when the trainers were not chosen before
    training) go to ``core.aggregate`` with the rounds elapsed since the last
    aggregation.

    Parameters
    ----------
    core : Core
        The algorithm's core.
    core_state : S
        Its state before the round.
    server_round : int
        t, >= 1.
    received : sequence of Received
        The round's error-free replies.
    failures : sequence of str
        One description per failed client.
    rounds : RoundState
        The round policy's state before the round.
    policy : RoundPolicy
        The round policy.
    reply_of : callable
        Turns a taken reply into a :class:`~fedram_flwr.protocol.ClientReply` (and
        raises, naming what is missing, for one that breaks the wire contract).
    strategy : str
        The strategy's name, for the log.
    chosen_before_training : bool
        Whether the adapter chose who trains this round (every reply is kept); otherwise
        the core's :meth:`~fedram_flwr.strategies.core.Core.kept` subset of the replies
        is aggregated.
    warn : callable
        Where the warnings go (default: dropped).

    Returns
    -------
    RoundResult
        The round policy's state after the round, the core's outcome (``None``:
        cancelled) and the replies aggregated.

    Raises
    ------
    FailedRoundsError
        When this round makes ``max_failed_rounds`` failed rounds in a row.
    """
    screened = screen_round(
        received,
        failures,
        rounds.guard,
        server_round,
        num_clients=core.client_count(),
        policy=policy,
        strategy=strategy,
        warn=warn,
    )
    if screened.cancelled(policy):
        return RoundResult(RoundState(screened.guard, rounds.last_round), None, [])
    pairs = sorted(((r.source, reply_of(r)) for r in screened.taken), key=_partition_id)
    if not chosen_before_training:
        pairs = [pairs[k] for k in core.kept(server_round, [r for _, r in pairs])]
    outcome = core.aggregate(
        core_state, server_round, [r for _, r in pairs], server_round - rounds.last_round
    )
    return RoundResult(RoundState(screened.guard, server_round), outcome, pairs)


def _partition_id(pair: tuple[Any, ClientReply]) -> int:
    """Return the sort key of partition-id order (stable: replies without an id, -1, first)."""
    return pair[1].partition_id
