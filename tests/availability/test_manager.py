"""The ClientManager base every oracle shares: partition ids learned through
``get_properties`` whatever the node ids, bounded waits that say how many clients came,
registration, and a round that relays nobody saying why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from flwr.common import (
    Code,
    EvaluateRes,
    FitRes,
    GetParametersRes,
    GetPropertiesRes,
    Status,
    ndarrays_to_parameters,
)
from flwr.server import Server
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg

from fedram_flwr.availability import (
    PARTITION_ID,
    AvailabilityError,
    MarkovClientManager,
    RandomAccessClientManager,
    TraceClientManager,
    read_trace,
)
from fedram_flwr.engines import InProcessClientProxy, node_context
from fedram_flwr.engines.server import StrategyEveryRound
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
    with pytest.raises(
        AvailabilityError, match="client a and client b both report partition-id = 0"
    ):
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


class RecordingProxy(ClientProxy):
    """A legacy client that echoes the model and records (phase, round, partition id)
    of every instruction (Flower's Server passes the round as ``group_id``)."""

    def __init__(self, cid: str, partition_id: int, calls: list) -> None:
        super().__init__(cid)
        self.partition_id, self.calls = partition_id, calls

    def get_properties(self, ins, timeout, group_id):
        return GetPropertiesRes(Status(Code.OK, ""), {PARTITION_ID: self.partition_id})

    def get_parameters(self, ins, timeout, group_id):
        self.calls.append(("init", group_id, self.partition_id))
        return GetParametersRes(Status(Code.OK, ""), ndarrays_to_parameters([np.zeros(1)]))

    def fit(self, ins, timeout, group_id):
        self.calls.append(("fit", group_id, self.partition_id))
        return FitRes(Status(Code.OK, ""), ins.parameters, 1, {})

    def evaluate(self, ins, timeout, group_id):
        self.calls.append(("evaluate", group_id, self.partition_id))
        return EvaluateRes(Status(Code.OK, ""), 0.0, 1, {})

    def reconnect(self, ins, timeout, group_id):
        raise NotImplementedError


@pytest.mark.parametrize("server", [Server, StrategyEveryRound])
def test_flower_servers_and_default_fedavg_see_one_markov_draw_per_round(server) -> None:
    """Flower's own Server (and the engines' one) and FedAvg with its defaults
    (fraction_evaluate = 1.0: federated evaluation samples the oracle a second time per
    round; no initial parameters: round 0 samples once more): fit and evaluate of round
    r both reach exactly draw(r) of an independent replica of the chain, which steps
    once per round."""
    pi, lam, rounds = [0.9, 0.6, 0.5, 0.3], [0.5, 0.2, 0.0, 0.7], 12
    oracle = MarkovClientManager(pi, lam, seed=3, wait_timeout=5)
    calls: list = []
    for pid in reversed(range(4)):
        oracle.register(RecordingProxy(f"node{97 * pid + 5}", pid, calls))
    server(client_manager=oracle, strategy=FedAvg()).fit(num_rounds=rounds, timeout=None)
    replica = MarkovClientManager(pi, lam, seed=3)  # a fresh chain: the law, asked in order
    expected = {r: replica.draw(r) for r in range(1, rounds + 1)}
    assert [c for c in calls if c[0] == "init"] == [("init", 0, 0)]
    for phase in ("fit", "evaluate"):
        seen = {r: sorted(p for ph, g, p in calls if ph == phase and g == r) for r in expected}
        assert seen == expected, phase
    assert oracle.round == rounds and len({tuple(ids) for ids in expected.values()}) > 3
