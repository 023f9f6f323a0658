"""What a wrapped Message-API strategy sees of the grid in one round
(:class:`RoundView`) and how its messages are readdressed to the round's available
nodes; used by :mod:`fedram_flwr.message_api.availability`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Message
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedram_flwr.availability.manager import AvailabilityError

MAX_POLLS = 16  # get_node_ids() calls one configure call may make on the round's view


class RoundView(Grid):
    """The grid as a wrapped strategy sees it in one configure call: ``get_node_ids()``
    are the given ids (the round's available nodes, then stand-ins), ``partition_of``
    maps the available ones to partition ids, ``num_examples`` every partition's m_i
    that its node reported (:func:`partition_id_query`), the rest is the real grid's. More than
    :data:`MAX_POLLS` ``get_node_ids()`` calls (a strategy waiting for more nodes than
    it is shown) raise :class:`AvailabilityError`."""

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
        self.grid.set_run(run)

    @property
    def run(self) -> Any:
        return self.grid.run

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        return self.grid.create_message(*args, **kwargs)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], **kwargs: Any) -> Iterable[Message]:
        return self.grid.send_and_receive(messages, **kwargs)


def minimum_sizes(strategy: Strategy) -> list[int]:
    """The minimum node counts a strategy (or the strategies it wraps, through their
    ``strategy`` attribute, as Flower's DP wrappers do) waits for."""
    sizes, seen = [], set()
    while strategy is not None and id(strategy) not in seen:
        seen.add(id(strategy))
        for name in ("min_available_nodes", "min_train_nodes", "min_evaluate_nodes"):
            value = getattr(strategy, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                sizes.append(value)
        strategy = getattr(strategy, "strategy", None)
    return sizes


def readdress(messages: list[Message], nodes: list[int]) -> list[Message]:
    """The strategy's messages sent to ``nodes`` instead: each node gets the content and
    type the strategy addressed to it, or else those of its first message. No
    messages (the strategy skips the phase): nothing is sent."""
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
