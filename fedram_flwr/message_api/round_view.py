"""What a wrapped Message-API strategy sees of the grid in one round.

:class:`RoundView` is that grid; :func:`readdress` sends its messages to the round's
available nodes instead; used by :mod:`fedram_flwr.message_api.availability`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedram_flwr.availability.manager import AvailabilityError

MAX_POLLS = 16  # get_node_ids() calls one configure call may make on the round's view


class RoundView(Grid):
    """The grid as a wrapped strategy sees it in one configure call.

    ``get_node_ids()`` are the given ids; everything else is the real grid's. More than
    :data:`MAX_POLLS` ``get_node_ids()`` calls (a strategy waiting for more nodes than
    it is shown) raise :class:`AvailabilityError`.

    Parameters
    ----------
    grid : Grid
        The real grid.
    node_ids : list of int
        The ids shown: the round's available nodes, then stand-ins.
    strategy_name : str
        The wrapped strategy's name, for the error.
    partition_of : dict of int to int
        Node id -> partition id (0..K-1), for the available nodes only.
    num_examples : dict of int to int, optional
        Partition id -> m_i (>= 0), for every partition whose node reported it
        (:func:`~fedram_flwr.message_api.partitions.partition_id_query`).
    """

    def __init__(
        self,
        grid: Grid,
        node_ids: list[int],
        strategy_name: str,
        partition_of: dict[int, int],
        num_examples: dict[int, int] | None = None,
    ) -> None:
        self.grid, self.node_ids, self.strategy_name = grid, node_ids, strategy_name
        self.partition_of = partition_of  # node id -> partition id, available nodes only
        self.num_examples = dict(num_examples or {})  # partition id -> m_i, all reported
        self.polls = 0

    def get_node_ids(self) -> Iterable[int]:
        """Return the ids shown to the strategy (a new list each call).

        Raises
        ------
        AvailabilityError
            On the call after :data:`MAX_POLLS` in one configure call.
        """
        self.polls += 1
        if self.polls > MAX_POLLS:
            raise AvailabilityError(
                f"{self.strategy_name} polled get_node_ids() {self.polls} times in one "
                f"configure call: it waits for more than the {len(self.node_ids)} nodes it "
                "is shown; lower its min_available_nodes / min_train_nodes / "
                "min_evaluate_nodes or fractions (fractions above 1 never suffice)"
            )
        return list(self.node_ids)

    def set_run(self, run: Any) -> None:
        """Set the real grid's run."""
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        """The real grid's run."""
        return self.grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        """Create a message on the real grid."""
        return self.grid.create_message(*args, **kwargs)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Push messages through the real grid."""
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Pull messages through the real grid."""
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], **kwargs: Any) -> Iterable[Message]:
        """Send and receive through the real grid."""
        return self.grid.send_and_receive(messages, **kwargs)


def minimum_sizes(strategy: Strategy) -> list[int]:
    """Collect the minimum node counts a strategy waits for.

    Its own and those of the strategies it wraps, through their ``strategy`` attribute,
    as Flower's DP wrappers do.

    Parameters
    ----------
    strategy : Strategy
        Any Message-API strategy.

    Returns
    -------
    list of int
        Its ``min_available_nodes``, ``min_train_nodes`` and ``min_evaluate_nodes``,
        where set (integers only), outermost strategy first.
    """
    sizes, seen = [], set()
    while strategy is not None and id(strategy) not in seen:
        seen.add(id(strategy))
        for name in ("min_available_nodes", "min_train_nodes", "min_evaluate_nodes"):
            value = getattr(strategy, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                sizes.append(value)
        strategy = getattr(strategy, "strategy", None)
    return sizes


def check_addressed(
    messages: list[Message], nodes: list[int], name: str, server_round: int
) -> None:
    """Check that a strategy that picks among the available nodes addressed only them.

    Raises
    ------
    AvailabilityError
        Naming the strategy ``name``, the stray node ids and the round's ``nodes``.
    """
    stray = sorted({m.metadata.dst_node_id for m in messages} - set(nodes))
    if stray:
        raise AvailabilityError(
            f"{name} addressed nodes {stray}, not available in round {server_round} "
            f"(available: {nodes}); a strategy with picks_among_available picks "
            "among grid.get_node_ids() only"
        )


def readdress(messages: list[Message], nodes: list[int]) -> list[Message]:
    """Readdress the strategy's messages to ``nodes``.

    Each node gets the content and type the strategy addressed to it, or else those of
    its first message.

    Parameters
    ----------
    messages : list of Message
        The strategy's messages.
    nodes : list of int
        The node ids to send to.

    Returns
    -------
    list of Message
        One new message per node; none when ``messages`` is empty (the strategy skips
        the phase).
    """
    if not messages:
        return []
    by_node = {m.metadata.dst_node_id: m for m in messages}
    metas = [(node, by_node.get(node, messages[0])) for node in nodes]
    return [
        Message(
            m.content,
            dst_node_id=node,
            message_type=m.metadata.message_type,
            ttl=m.metadata.ttl,
            group_id=m.metadata.group_id or None,
        )
        for node, m in metas
    ]


@contextmanager
def standing_in(
    inner: Strategy, wrapper: Strategy, names: Iterable[str]
) -> Iterator[dict[str, Callable[..., Any]]]:
    """Route ``inner``'s calls on itself to ``wrapper``'s methods ``names``, meanwhile.

    Inside the block, ``inner.<name>`` is ``wrapper.<name>`` (set on the instance, so an
    override of ``start`` reaches it like Flower's loop does); the block gets ``inner``'s
    own methods (its class's, its overrides included), which the wrapper calls in turn.
    They are removed when the block ends, also on an error (an instance attribute
    ``inner`` had is put back).

    Parameters
    ----------
    inner : Strategy
        The wrapped strategy.
    wrapper : Strategy
        The wrapper standing in.
    names : iterable of str
        The methods it stands in for.

    Yields
    ------
    dict of str to callable
        ``inner``'s own methods by name.
    """
    names = list(names)
    own = {name: getattr(inner, name) for name in names}
    shadowed = {name: vars(inner)[name] for name in names if name in vars(inner)}
    for name in names:
        setattr(inner, name, getattr(wrapper, name))
    try:
        yield own
    finally:
        for name in names:
            delattr(inner, name)
            if name in shadowed:
                setattr(inner, name, shadowed[name])
