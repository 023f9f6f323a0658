"""Who the nodes are, for the availability wrapper: wait for them, learn their partitions.

:class:`NodeDiscovery` is the mixin of
:class:`~fedram_flwr.message_api.availability.AvailabilityStrategy` that finds the
federation's nodes: it waits, at most ``wait_timeout`` s, for as many nodes as the
oracle needs, and learns each node's partition id once through the run's partition
directory (:mod:`fedram_flwr.availability.partition_directory`) and the partition-id query
(:func:`~fedram_flwr.message_api.partitions.grid_query`): every node at once for a
round-indexed oracle (exactly one node per partition), each newly connected node for
the ``connected`` oracle. Each error says what was expected, what was seen and which
setting to change.
"""

from __future__ import annotations

import time

from flwr.serverapp import Grid

from fedram_flwr.availability.manager import AvailabilityError, OracleClientManager
from fedram_flwr.availability.partition_directory import PartitionDirectory, check_unique
from fedram_flwr.message_api.partitions import HANDLER_HINT, check_federation_size, grid_query


class NodeDiscovery:
    """Mixin of the availability wrapper's node discovery (see the module docstring)."""

    oracle: OracleClientManager
    partitions: PartitionDirectory[int]
    wait_timeout: float
    query_timeout: float
    poll_interval: float

    def _wait_for_nodes(self, grid: Grid, count: int, setting: str) -> list[int]:
        """Return the grid's node ids once at least ``count`` are connected.

        Waits at most ``wait_timeout`` s, then raises naming ``setting`` (what decides
        ``count``).
        """
        start = time.monotonic()
        while True:
            ids = sorted({int(i) for i in grid.get_node_ids()})
            waited = time.monotonic() - start
            if len(ids) >= count:
                return ids
            if waited >= self.wait_timeout:
                raise AvailabilityError(
                    f"expected {count} nodes ({setting}), saw {len(ids)} after waiting "
                    f"{waited:.0f} s; start the missing SuperNodes (flwr run: "
                    f"--federation-config 'num-supernodes={count}') or raise wait_timeout "
                    f"(with_availability(..., wait_timeout=...), now {self.wait_timeout:g} s)"
                )
            time.sleep(min(self.poll_interval, self.wait_timeout - waited))

    def _learn_partitions(self, grid: Grid) -> None:
        """Learn every node's partition id, once.

        Exactly one node per partition the oracle knows.
        """
        n = self.oracle.num_clients
        if len(self.partitions.placements) == n:
            return
        setting = f"one per partition: the oracle knows num_clients = {n}"
        check_federation_size(grid, self.partitions)  # fewer for good: fail at once
        ids = self._wait_for_nodes(grid, n, setting)
        if len(ids) > n:
            raise AvailabilityError(
                f"expected {n} nodes ({setting}), saw {len(ids)}: start exactly one "
                f"SuperNode per partition (flwr run: --federation-config 'num-supernodes={n}')"
                " or give the oracle as many clients as there are nodes"
            )
        unplaced = self.partitions.learn(ids, grid_query(grid, n))
        if unplaced.failed:
            raise next(iter(unplaced.failed.values()))
        check_unique(self.partitions.partition_of(ids), "node {}".format)
        if silent := sorted(unplaced.silent):
            raise AvailabilityError(
                f"expected answers to the partition-id query from {len(ids)} nodes, saw "
                f"{len(ids) - len(silent)} within {self.query_timeout:g} s (silent: {silent}); "
                "raise query_timeout (with_availability(..., query_timeout=...)) or check "
                f"that these SuperNodes run the ClientApp, and {HANDLER_HINT}"
            )

    def _connected_nodes(self, grid: Grid, *, first: bool) -> dict[int, int]:
        """Map partition id -> node id of the connected nodes (``connected`` oracle).

        The first round waits for ``min_clients`` of them; nodes not seen before are asked
        their partition id (one that does not answer in time is asked again next
        round); a partition that reconnected under a new node id is that node.
        """
        ids = (
            self._wait_for_nodes(
                grid,
                self.oracle.min_clients,
                f"availability.params.min_clients = {self.oracle.min_clients}",
            )
            if first
            else sorted({int(i) for i in grid.get_node_ids()})
        )
        unplaced = self.partitions.learn(ids, grid_query(grid, self.oracle.num_clients))
        if unplaced.failed:  # a node that is silent is asked again next round
            raise next(iter(unplaced.failed.values()))
        return {pid: node for node, pid in self.partitions.partition_of(ids).items()}
