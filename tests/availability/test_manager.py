"""The ClientManager base every oracle shares: partition ids learned through
``get_properties`` whatever the node ids, bounded waits that say how many clients came,
registration, and a round that relays nobody saying why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fedram_flwr.availability import (
    AvailabilityError,
    RandomAccessClientManager,
    TraceClientManager,
    read_trace,
)
from fedram_flwr.engines import InProcessClientProxy, node_context
from tests.helpers import client_fn, register_clients


def test_manager_times_out_when_clients_are_missing() -> None:
    manager = RandomAccessClientManager([0.25] * 4, seed=0, wait_timeout=0.05)
    register_clients(manager, 3)  # partition ids 0..2 of a 3-client federation
    with pytest.raises(AvailabilityError, match="only 3 of data.num_clients=4"):
        manager.sample(1)


def test_manager_rejects_duplicate_partition_ids() -> None:
    manager = RandomAccessClientManager([0.5, 0.5], seed=0, wait_timeout=5)
    for cid in ("a", "b"):
        manager.register(InProcessClientProxy(cid, client_fn, node_context(0, 2, {})))
    with pytest.raises(AvailabilityError, match="partition id 0"):
        manager.sample(1)


def test_manager_register_unregister() -> None:
    manager = RandomAccessClientManager([0.5, 0.5], seed=0, wait_timeout=5)
    register_clients(manager, 2)
    proxies = manager.all()
    first = next(iter(proxies.values()))
    assert manager.register(first) is False  # already known
    manager.sample(1)
    manager.unregister(first)
    assert manager.num_available() == 1
    assert first.cid not in manager.all()


def test_empty_round_relays_nobody_and_says_why(tmp_path: Path, caplog) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([[0], [], [1, 2]]))
    oracle = TraceClientManager(read_trace(path, 3), seed=0, wait_timeout=5)
    for pid in range(3):
        oracle.register(InProcessClientProxy(str(pid), client_fn, node_context(pid, 3, {})))
    assert len(oracle.sample(1)) == 1
    with caplog.at_level(logging.WARNING, logger="flwr"):
        assert oracle.sample(1) == []
    assert "round 2: no client is available" in caplog.text
    assert len(oracle.sample(1)) == 2
