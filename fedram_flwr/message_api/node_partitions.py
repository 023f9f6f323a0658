"""Node id -> partition id in the Message-API base, without an availability wrapper.

:class:`PartitionLookup` is the mixin of
:class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy` that keeps the
strategy's own :class:`~fedram_flwr.availability.partition_directory.PartitionDirectory` (made on
first use) and asks each new node once, through the partition-id query
(:func:`~fedram_flwr.message_api.partitions.grid_query`), waiting at most
``query_timeout`` s. Under an availability wrapper the wrapper's grid view says who is
who instead. FedAWE and rFedFair (:mod:`~fedram_flwr.message_api.algorithms_per_node`)
use it.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.serverapp import Grid

from fedram_flwr.availability.partition_directory import DEFAULT_QUERY_TIMEOUT, PartitionDirectory
from fedram_flwr.message_api.partitions import grid_query


class PartitionLookup:
    """Mixin of a Message-API core strategy's partition-id lookup (see the module docstring)."""

    query_timeout: float = DEFAULT_QUERY_TIMEOUT  # s: a partition-id question waits at most
    own_partitions: PartitionDirectory[int] | None = None  # without an availability wrapper

    def partition_directory(self) -> PartitionDirectory[int]:
        """Return the strategy's own partition directory, made on first use.

        For when no availability wrapper says who is who; a question waits at most
        ``query_timeout`` s.
        """
        if self.own_partitions is None:
            self.own_partitions = PartitionDirectory(self.query_timeout)
        return self.own_partitions

    def partition_ids(self, grid: Grid, nodes: Iterable[int], hint: str) -> dict[int, int]:
        """Map ``nodes`` to their partition ids, each new one asked once.

        Parameters
        ----------
        grid : Grid
            Where the ``"query.partition_id"`` messages go.
        nodes : iterable of int
            Flower node ids.
        hint : str
            What to change, ending the error message.

        Returns
        -------
        dict of int to int
            Node id -> partition id (through :meth:`partition_directory`).

        Raises
        ------
        AvailabilityError
            If a node answers wrongly or not within ``query_timeout`` s
            (:class:`~fedram_flwr.availability.partition_directory.AvailabilityError`).
        """
        placed = self.partition_directory().require(
            nodes, grid_query(grid), type(self).__name__, hint
        )
        return {node: p.partition_id for node, p in placed.items()}
