"""Message-API replies as the round driver takes them, once for every Message-API face.

The round driver is :mod:`fedram_flwr.strategies.round_driver`; the faces are the
project's strategies (:class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy`,
``QFFL``) and ``with_availability`` around any strategy (Flower's own FedAvg included).

:func:`received` is one error-free reply as a
:class:`~fedram_flwr.strategies.round_driver.Received`, :func:`error_text` an error reply
as the failure the guard counts, :func:`client_reply` a taken reply as the cores'
:class:`~fedram_flwr.protocol.ClientReply`, checked against the wire contract;
:func:`take_replies` screens a round (the driver's
:func:`~fedram_flwr.strategies.round_driver.screen_round`: refusals named in the log, the
guard advanced, :class:`~fedram_flwr.strategies.rounds.FailedRoundsError` after
``max_failed_rounds`` failed rounds in a row) for a strategy that aggregates by itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from flwr.app import Message

from fedram_flwr.protocol import PARTITION_ID, Arrays, ClientReply, reply_partition_id
from fedram_flwr.strategies.round_driver import Received, RoundPolicy, screen_round
from fedram_flwr.strategies.rounds import FailedRounds
from fedram_flwr.strategies.wire import warn as warn  # one warning line for both APIs


def error_text(message: Message) -> str:
    """Describe an error reply as the log quotes it: its node and Flower's reason.

    Parameters
    ----------
    message : Message
        A reply with ``has_error()``.

    Returns
    -------
    str
        ``"node <src_node_id>: <error reason>"``.
    """
    return f"node {message.metadata.src_node_id}: {message.error.reason}"


def _metrics(message: Message) -> Any:
    return next(iter(message.content.metric_records.values()), {})


def reported_partition(message: Message) -> Any:
    """Return the partition id a reply's metrics carry, unchecked (``None``: none).

    Parameters
    ----------
    message : Message
        An error-free reply; its first ``MetricRecord`` is read.

    Returns
    -------
    Any
        The value of ``partition-id``, or ``None``.
    """
    return _metrics(message).get(PARTITION_ID)


def _arrays(message: Message) -> Callable[[], list]:
    record = next(iter(message.content.array_records.values()), None)
    return (lambda: []) if record is None else record.to_numpy_ndarrays


def received(
    message: Message, partition_of: Callable[[Message], Any] = reported_partition
) -> Received[Message]:
    """Wrap an error-free reply as the round driver screens it.

    Parameters
    ----------
    message : Message
        An error-free reply.
    partition_of : callable
        Message -> its partition id (default: the one its metrics report,
        :func:`reported_partition`).

    Returns
    -------
    Received
        Its node as sender, the partition id, its only ``MetricRecord`` and its only
        ``ArrayRecord`` (decoded when asked).
    """
    return Received(
        message,
        f"node {message.metadata.src_node_id}",
        partition_of(message),
        _metrics(message),
        _arrays(message),
    )


def client_reply(
    message: Message,
    strategy: str,
    *,
    weighted_by_key: str,
    needs_id: bool = True,
    required_metrics: Iterable[str] = (),
    broadcast: Arrays | None = None,
    layout: str = "the model's arrays",
) -> ClientReply:
    """Convert an error-free reply ``message`` into a :class:`ClientReply`, checked.

    Its only ``MetricRecord`` holds its fit metrics, its only ``ArrayRecord`` its arrays
    (decoded when the core asks).

    Parameters
    ----------
    message : Message
        An error-free reply.
    strategy : str
        The strategy's name, for the error messages.
    weighted_by_key : str
        The metric holding m_i, the client's number of examples (>= 0).
    needs_id : bool
        Whether the metrics must carry a partition id.
    required_metrics : iterable of str
        Metrics the strategy needs besides.
    broadcast : Arrays or None
        The arrays sent this round; the reply's must have their shapes, in order
        (``None``: not checked).
    layout : str
        What the arrays are, for the error message.

    Returns
    -------
    ClientReply
        Partition id, m_i, metrics and a lazy decoder of the arrays.

    Raises
    ------
    ValueError
        Naming the key, the node and ``strategy``: a missing partition id (when
        ``needs_id``), a missing metric of ``required_metrics``, arrays not shaped like
        ``broadcast`` (a client returns what it received, updated: ``layout``).
    """
    content, node = message.content, message.metadata.src_node_id
    metrics = next(iter(content.metric_records.values()))
    record = next(iter(content.array_records.values()))
    try:
        pid = reply_partition_id(metrics, needs_id, strategy)
    except ValueError as err:
        raise ValueError(f"{err} (node {node})") from None
    for key in required_metrics:
        if key not in metrics:
            raise ValueError(
                f"{strategy}: the reply of node {node} (partition {pid}) has no '{key}' "
                f"metric, which {strategy} needs (fedram_flwr.protocol; the project's "
                "Message-API client building blocks report it)"
            )
    if broadcast is not None:
        got = [tuple(a.shape) for a in record.values()]
        want = [tuple(a.shape) for a in broadcast]
        if got != want:
            raise ValueError(
                f"{strategy}: the reply of node {node} (partition {pid}) has {len(got)} "
                f"arrays shaped {got}, the broadcast {len(want)} shaped {want}: a client "
                f"returns the arrays it received, updated, in order: {layout}"
            )
    return ClientReply(pid, int(metrics[weighted_by_key]), metrics, record.to_numpy_ndarrays)


def ordered_replies(
    messages: Iterable[Message], strategy: str, **contract: Any
) -> list[tuple[Message, ClientReply]]:
    """Convert error-free reply ``messages`` into (message, reply) pairs, by partition id.

    Parameters
    ----------
    messages : iterable of Message
        Error-free replies.
    strategy : str
        The strategy's name, for the error messages.
    **contract
        :func:`client_reply`'s keyword arguments (``weighted_by_key`` required).

    Returns
    -------
    list of tuple of (Message, ClientReply)
        Each message beside its :func:`client_reply`, in partition-id order.

    Raises
    ------
    ValueError
        For a reply that breaks the wire contract (:func:`client_reply`).
    """
    pairs = [(m, client_reply(m, strategy, **contract)) for m in messages]
    return sorted(pairs, key=lambda pair: pair[1].partition_id)


def take_replies(
    guard: FailedRounds,
    strategy: str,
    server_round: int,
    valid: Sequence[Message],
    errors: Sequence[Message],
    num_clients: int | None,
    accept_failures: bool = True,
) -> tuple[list[Message] | None, FailedRounds]:
    """Screen one round's replies for a strategy that aggregates by itself.

    The error-free ``valid`` ones are screened
    (:func:`~fedram_flwr.strategies.round_driver.screen_round`), and the guard advanced
    over the error and refused ones.

    Parameters
    ----------
    guard : FailedRounds
        The failed-rounds guard before the round.
    strategy : str
        The strategy's name, for the log.
    server_round : int
        t, >= 1.
    valid : sequence of Message
        The error-free replies.
    errors : sequence of Message
        The error replies.
    num_clients : int or None
        N, >= 1: partition ids must lie in 0..N-1 (``None``: any id >= 0).
    accept_failures : bool
        Whether a round with a failure still aggregates its other replies.

    Returns
    -------
    tuple of (list of Message or None, FailedRounds)
        The replies to aggregate (``None`` when a failure cancels the round:
        ``accept_failures`` off), and the guard after the round.

    Raises
    ------
    FailedRoundsError
        When this round makes ``max_failed_rounds`` failed rounds in a row.
    """
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
