"""The partition directory (fedram_flwr/availability/partition_directory.py): each node asked once,
all new nodes in one question, every question bounded by a finite timeout, and a node
that does not answer in time named, not waited for. The fakes answer at once or not at
all: nothing here waits."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.common import Code, GetPropertiesRes, Status, ndarrays_to_parameters
from flwr.server.client_proxy import ClientProxy

from fedram_flwr import message_api
from fedram_flwr.availability import RandomAccessClientManager
from fedram_flwr.availability.partition_directory import (
    AvailabilityError,
    PartitionDirectory,
    Placement,
    properties_query,
)
from fedram_flwr.message_api.partitions import PARTITION_QUERY, PARTITION_RECORD
from fedram_flwr.protocol import NUM_EXAMPLES, PARTITION_ID
from fedram_flwr.strategies import FedAWE, RFedFair
from tests.helpers import StubGrid, server_identity


class FakeQuery:
    """A transport whose nodes answer at once (``silent`` ones never): node k is
    partition ``pids[k]`` with m_i = 10 (k + 1). Records every question."""

    def __init__(self, pids: dict[int, object], silent: set[int] = frozenset()) -> None:
        self.pids, self.silent = pids, set(silent)
        self.questions: list[tuple[list[int], float]] = []

    def __call__(self, nodes, timeout):
        self.questions.append((list(nodes), timeout))
        return {n: Placement(self.pids[n], 10 * (n + 1)) for n in nodes if n not in self.silent}


def test_each_node_is_asked_once_and_all_new_nodes_in_one_question() -> None:
    ask = FakeQuery({1: 0, 2: 1, 3: 2, 4: 3})
    directory = PartitionDirectory(timeout=7, num_clients=4)
    directory.learn([3, 1, 2], ask)
    directory.learn([2, 3, 4, 4], ask)
    directory.learn([1, 4], ask)
    assert ask.questions == [([3, 1, 2], 7.0), ([4], 7.0)]
    assert directory.asked == 4
    assert directory.partition_of() == {3: 2, 1: 0, 2: 1, 4: 3}
    assert directory.num_examples([1, 2]) == {0: 20, 1: 30}


def test_a_silent_node_is_named_within_the_timeout_and_asked_again_later() -> None:
    """A node that does not answer in time is not placed (the caller decides: here
    ``require`` raises, naming it and the timeout); the next question asks it again."""
    ask = FakeQuery({1: 0, 2: 1}, silent={2})
    directory = PartitionDirectory(timeout=0.5)
    unplaced = directory.learn([1, 2], ask)
    assert unplaced.silent == [2] and unplaced.failed == {} and 2 not in directory
    with pytest.raises(AvailabilityError, match=r"FedX: node\(s\) \[2\] gave no 'partition-id' "):
        directory.require([1, 2], ask, "FedX", "add the handler")
    assert ask.questions == [([1, 2], 0.5), ([2], 0.5)]  # node 1 not asked again
    ask.silent = set()
    assert directory.require([1, 2], ask, "FedX", "add the handler", sizes=True)[2] == Placement(
        1, 30
    )


def test_wrong_answers_and_timeouts_are_checked() -> None:
    directory = PartitionDirectory(timeout=1, num_clients=2)
    with pytest.raises(AvailabilityError, match=r"node 1 reports partition-id = 2: expected"):
        directory.learn([1], FakeQuery({1: 2}))
    with pytest.raises(AvailabilityError, match="partition-id = True"):
        directory.learn([1], FakeQuery({1: True}))
    failed = AvailabilityError("node 3 has no 'partition-id'")
    with pytest.raises(AvailabilityError, match="node 3 has no"):
        directory.require([3], lambda nodes, timeout: {3: failed}, "FedX", "")
    for bad in (0, -1, float("inf"), None):
        with pytest.raises(ValueError, match="must be a number of seconds > 0"):
            PartitionDirectory(timeout=bad)


# ----------------------------------------------------------------- the legacy API
class CountingProxy(ClientProxy):
    """A legacy client that answers ``get_properties`` at once (``fails``: raises as a
    proxy whose client missed the timeout), counting the calls and their timeouts."""

    def __init__(self, cid: str, pid: int, fails: bool = False) -> None:
        super().__init__(cid)
        self.pid, self.fails, self.timeouts = pid, fails, []

    def get_properties(self, ins, timeout, group_id):
        self.timeouts.append(timeout)
        if self.fails:
            raise TimeoutError("no reply")
        return GetPropertiesRes(
            Status(Code.OK, ""), {PARTITION_ID: self.pid, NUM_EXAMPLES: 4 * (self.pid + 1)}
        )

    get_parameters = fit = evaluate = reconnect = None  # type: ignore[assignment]


def test_the_legacy_question_is_bounded_and_a_client_that_misses_it_is_named() -> None:
    proxies = [CountingProxy("a", 0), CountingProxy("b", 1, fails=True)]
    directory = PartitionDirectory(timeout=5, label="client {}".format)
    with pytest.raises(AvailabilityError) as err:
        directory.require(["a", "b"], properties_query(proxies), "FedAWE", "")
    assert "client b did not answer get_properties within 5 s (TimeoutError: no reply)" in str(
        err.value
    )
    assert [p.timeouts for p in proxies] == [[5.0], [5.0]]  # finite, never None
    assert directory.partition_of() == {"a": 0}


def test_an_oracle_and_the_strategies_on_it_ask_each_client_once() -> None:
    """The oracle places every client once; legacy FedAWE and rFedFair then address
    them through its directory without asking again."""
    proxies = [CountingProxy(f"n{k}", pid) for k, pid in enumerate([2, 0, 1])]
    oracle = RandomAccessClientManager([0.2, 0.3, 0.5], seed=0)
    for proxy in proxies:
        oracle.register(proxy)
    model = [np.zeros(2, np.float32)]
    fedawe = FedAWE(initial_arrays=model, num_clients=3, lr=0.1)
    rfedfair = RFedFair(initial_arrays=model, alpha=0.5, lr_eta=0.01)
    params = ndarrays_to_parameters(model)
    for server_round in (1, 2):
        assert len(fedawe.configure_fit(server_round, params, oracle)) == 1
        rfedfair.configure_fit(server_round, params, oracle)
    assert [len(p.timeouts) for p in proxies] == [1, 1, 1]
    assert fedawe.own_partitions is None and rfedfair.own_partitions is None
    assert dict(rfedfair.known.values()) == {2: 12, 0: 4, 1: 8}


# ----------------------------------------------------------------- the Message API
def partition_answer(pid: int):
    def answer(message):
        assert message.metadata.message_type == PARTITION_QUERY
        return RecordDict({PARTITION_RECORD: ConfigRecord({PARTITION_ID: pid, NUM_EXAMPLES: 8})})

    return answer


def test_a_message_api_strategy_asks_each_node_once_in_one_batch() -> None:
    with server_identity():
        grid = StubGrid({101: partition_answer(0), 202: partition_answer(1)})
        strategy = message_api.FedAWE(num_clients=2, lr=0.1)
        for server_round in (1, 2, 3):
            strategy.configure_train(server_round, ArrayRecord([np.zeros(2)]), ConfigRecord(), grid)
    queries = [m for m in grid.sent if m.metadata.message_type == PARTITION_QUERY]
    assert sorted(m.metadata.dst_node_id for m in queries) == [101, 202]
    assert strategy.own_partitions.partition_of() == {101: 0, 202: 1}


def test_a_node_that_never_answers_stops_fedawe_naming_it() -> None:
    with server_identity():
        grid = StubGrid({101: partition_answer(0), 202: lambda message: None})
        strategy = message_api.FedAWE(num_clients=2, lr=0.1, query_timeout=3)
        with pytest.raises(AvailabilityError, match=r"FedAWE: node\(s\) \[202\] .* within 3 s"):
            strategy.configure_train(1, ArrayRecord([np.zeros(2)]), ConfigRecord(), grid)
