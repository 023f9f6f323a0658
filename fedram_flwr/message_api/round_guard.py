"""Message-API replies as the round driver (:mod:`fedram_flwr.strategies.round_driver`)
takes them, written once for every Message-API face: the project's strategies
(:class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy`, ``QFFL``) and
``with_availability`` around any strategy (Flower's own FedAvg included).

:func:`received` is one error-free reply as a
:class:`~fedram_flwr.strategies.round_driver.Received`, :func:`error_text` an error reply
as the failure the guard counts; :func:`take_replies` screens a round (the driver's
:func:`~fedram_flwr.strategies.round_driver.screen_round`: refusals named in the log, the
guard advanced, :class:`~fedram_flwr.strategies.rounds.FailedRoundsError` after
``max_failed_rounds`` failed rounds in a row) for a strategy that aggregates by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from logging import WARNING
from typing import Any

from flwr.app import Message
from flwr.common.logger import log

from fedram_flwr.protocol import PARTITION_ID
from fedram_flwr.strategies.round_driver import Received, RoundPolicy, screen_round
from fedram_flwr.strategies.rounds import FailedRounds


def error_text(message: Message) -> str:
    """An error reply as the log quotes it: its node and Flower's reason."""
    return f"node {message.metadata.src_node_id}: {message.error.reason}"


def _metrics(message: Message) -> Any:
    return next(iter(message.content.metric_records.values()), {})


def reported_partition(message: Message) -> Any:
    """The partition id a reply's metrics carry (``None``: none)."""
    return _metrics(message).get(PARTITION_ID)


def _arrays(message: Message) -> Callable[[], list]:
    record = next(iter(message.content.array_records.values()), None)
    return (lambda: []) if record is None else record.to_numpy_ndarrays


def received(
    message: Message, partition_of: Callable[[Message], Any] = reported_partition
) -> Received[Message]:
    """An error-free reply as the round driver screens it: its node, the partition id
    ``partition_of(message)`` (default: the one its metrics report), its only
    ``MetricRecord`` and its only ``ArrayRecord`` (decoded when asked)."""
    return Received(
        message,
        f"node {message.metadata.src_node_id}",
        partition_of(message),
        _metrics(message),
        _arrays(message),
    )


def warn(line: str) -> None:
    """A round's warning in Flower's log."""
    log(WARNING, "%s", line)


def take_replies(
    guard: FailedRounds,
    strategy: str,
    server_round: int,
    valid: Sequence[Message],
    errors: Sequence[Message],
    num_clients: int | None,
    accept_failures: bool = True,
) -> tuple[list[Message] | None, FailedRounds]:
    """One round's replies as a strategy that aggregates by itself takes them: the
    error-free ``valid`` ones screened (partition ids checked against
    0..``num_clients``-1, None: not checked), the guard advanced over the error and
    refused ones. Returns (the replies to aggregate, or ``None`` when a failure cancels
    the round: ``accept_failures`` False; the guard after the round)."""
    policy = RoundPolicy(accept_failures)
    screened = screen_round(
        [received(m) for m in valid],
        [error_text(m) for m in errors],
        guard,
        server_round,
        num_clients=num_clients,
        policy=policy,
        strategy=strategy,
        warn=warn,
    )
    taken = None if screened.cancelled(policy) else [r.source for r in screened.taken]
    return taken, screened.guard
