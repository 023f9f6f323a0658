"""The round policy's checks (:mod:`fedram_flwr.strategies.rounds`) on Message-API
replies, written once for every Message-API face: the project's strategies
(:class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy`, ``QFFL``) and
``with_availability`` around any strategy (Flower's own FedAvg included).

:func:`screen` refuses the error-free replies that are no update (a bad or duplicated
partition id, NaN or inf in the metrics or the arrays), naming each in the log;
:func:`guard_round` counts the round's failures (error replies and refusals) with
:func:`~fedram_flwr.strategies.rounds.after_round`, logs a round that aggregated nothing
because clients failed, and lets
:class:`~fedram_flwr.strategies.rounds.FailedRoundsError` stop the run after
``max_failed_rounds`` such rounds in a row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from logging import WARNING
from typing import Any

from flwr.app import Message
from flwr.common.logger import log

from fedram_flwr.protocol import PARTITION_ID
from fedram_flwr.strategies.rounds import FailedRounds, after_round, refusals


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


def screen(
    messages: Sequence[Message],
    partition_of: Callable[[Message], Any],
    num_clients: int | None,
    strategy: str,
    server_round: int,
) -> tuple[list[Message], list[str]]:
    """(the error-free ``messages`` an algorithm may aggregate, one description per
    refused one): :func:`~fedram_flwr.strategies.rounds.refusals` with each reply's
    partition id ``partition_of(message)`` (``None``: none) checked against 0..N-1
    (``num_clients``); each refusal logged, naming the node."""
    why = refusals(
        [partition_of(m) for m in messages],
        [_metrics(m) for m in messages],
        [_arrays(m) for m in messages],
        num_clients,
    )
    taken, refused = [], []
    for message, reason in zip(messages, why):
        if reason is None:
            taken.append(message)
            continue
        refused.append(f"node {message.metadata.src_node_id}: {reason}")
        log(WARNING, "round %d: %s refused %s", server_round, strategy, refused[-1])
    return taken, refused


def guard_round(
    guard: FailedRounds,
    strategy: str,
    server_round: int,
    failures: Sequence[str],
    taken: int,
    accept_failures: bool = True,
) -> FailedRounds:
    """The guard after the round (:func:`~fedram_flwr.strategies.rounds.after_round`);
    a round that aggregated nothing because clients failed is logged."""
    guard, line = after_round(guard, server_round, failures, taken, accept_failures)
    if line:
        log(WARNING, "%s: %s", strategy, line)
    return guard


def take_replies(
    guard: FailedRounds,
    strategy: str,
    server_round: int,
    valid: Sequence[Message],
    errors: Sequence[Message],
    num_clients: int | None,
    accept_failures: bool = True,
) -> tuple[list[Message] | None, FailedRounds]:
    """One round's replies as a strategy takes them: the error-free ``valid`` ones
    screened (:func:`screen`, partition ids checked against 0..``num_clients``-1, None:
    not checked), the guard advanced over the error and refused ones
    (:func:`guard_round`). Returns (the replies to aggregate, or ``None`` when a failure
    cancels the round: ``accept_failures`` False; the guard after the round)."""
    taken, refused = screen(valid, reported_partition, num_clients, strategy, server_round)
    failed = [error_text(m) for m in errors] + refused
    guard = guard_round(guard, strategy, server_round, failed, len(taken), accept_failures)
    return (None if failed and not accept_failures else taken), guard
