"""Physical availability (Deployment Engine): the connected oracle relays whoever is
connected and has not failed, asks a failed client again only after ``retry_after``
rounds or a reconnection, and trains everybody in the in-process engine."""

from __future__ import annotations

from flwr.common import FitIns, Parameters

from fedram_flwr.availability import ConnectedClientManager
from fedram_flwr.engines import InProcessClientProxy, node_context, run_in_process
from fedram_flwr.registry import with_overrides
from fedram_flwr.scenario.config import Scenario
from tests.helpers import client_fn, partition_of


class DeadProxy(InProcessClientProxy):
    """A client whose node is gone: every instruction times out."""

    def fit(self, ins, timeout, group_id):
        raise TimeoutError(f"no reply within {timeout} s")


def connected_oracle(**kwargs) -> ConnectedClientManager:
    oracle = ConnectedClientManager(3, seed=0, wait_timeout=5, **kwargs)
    for pid in range(3):
        cls = DeadProxy if pid == 2 else InProcessClientProxy
        oracle.register(cls(f"node{pid}", client_fn, node_context(pid, 3, {})))
    return oracle


def fit_all(proxies) -> list[int]:
    """Partition ids of the relayed proxies whose fit succeeded."""
    ok = []
    for proxy in proxies:
        try:
            proxy.fit(FitIns(parameters=Parameters([], ""), config={}), 1.0, None)
        except TimeoutError:
            continue
        ok.append(partition_of(proxy))
    return sorted(ok)


def test_connected_oracle_leaves_out_failed_clients_until_they_reconnect() -> None:
    oracle = connected_oracle(round_timeout=1.0)
    assert oracle.round_timeout == 1.0
    first = oracle.sample(num_clients=1)  # the number asked for is ignored
    assert oracle.last_active == [0, 1, 2]
    assert fit_all(first) == [0, 1]  # node 2 timed out: recorded by the oracle
    assert oracle.failed == {"node2": 1}
    for _ in range(3):
        assert sorted(partition_of(p) for p in oracle.sample(1)) == [0, 1]
        assert oracle.connected_partitions() == [0, 1]
    # Partition 2 reconnects (a restarted SuperNode: a new node id) and is relayed again.
    oracle.register(InProcessClientProxy("node2-restarted", client_fn, node_context(2, 3, {})))
    assert fit_all(oracle.sample(1)) == [0, 1, 2]
    # A node that leaves (Flower unregisters it) is not waited for.
    oracle.unregister(first[0])
    assert oracle.sample(1) and oracle.last_active == [1, 2]


def test_connected_oracle_asks_a_failed_client_again_after_retry_after_rounds() -> None:
    oracle = connected_oracle(retry_after=2)
    assert fit_all(oracle.sample(1)) == [0, 1]
    assert [oracle.sample(1) and oracle.last_active for _ in range(2)] == [[0, 1]] * 2
    assert fit_all(oracle.sample(1)) == [0, 1]  # round 4: asked again, fails again
    assert oracle.last_active == [0, 1, 2] and oracle.failed == {"node2": 4}


def test_connected_in_process_run_trains_everybody(tiny_scenario: Scenario, tmp_path) -> None:
    s = with_overrides(
        tiny_scenario, {"availability.oracle": "connected", "availability.params": {}, "rounds": 2}
    )
    rows = run_in_process(s, 0, tmp_path).read_metrics()
    assert [r["relayed"] for r in rows if r["round"]] == [[0, 1, 2]] * 2
    assert [r["failed"] for r in rows if r["round"]] == [[]] * 2
