"""InProcessGrid under Flower's own, unchanged Message-API FedAvg: the final arrays are a
hand-computed weighted average; errors come back as Flower's error replies."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp.strategy import FedAvg as MessageFedAvg
from flwr.serverapp.strategy import strategy_utils

from fedram_flwr.engines.grid import (
    NODE_ID_BASE,
    InProcessGrid,
    node_id_of,
)
from tests.helpers import CALLS, EXAMPLES, counting_app, message_fedavg


def test_flower_fedavg_over_the_grid_gives_the_hand_computed_average() -> None:
    """x_R = x_0 + sum_k k D with D = sum_p n_p d_p / sum_p n_p = 9/4 (every node trains
    every round, its k-th call adds k d_p)."""
    rounds, x0 = 3, np.array([0.5, -1.0])
    grid = InProcessGrid(counting_app(), len(EXAMPLES))
    result = message_fedavg(3).start(
        grid=grid, initial_arrays=ArrayRecord([x0]), num_rounds=rounds, train_config=ConfigRecord()
    )
    (final,) = result.arrays.to_numpy_ndarrays()
    np.testing.assert_array_equal(final, x0 + sum(range(1, rounds + 1)) * 2.25)
    assert [int(c.state[CALLS][CALLS]) for c in grid.contexts.values()] == [rounds] * 3


def test_a_client_error_is_a_flower_error_reply_and_leaves_its_context() -> None:
    """Partition 2 fails in round 2: that round averages partitions 0 and 1 only
    (D' = 3/2), its counter stays at 1, and round 3 is its second call."""
    grid = InProcessGrid(counting_app(fail=(2, 2)), len(EXAMPLES))
    x0 = np.zeros(1)
    result = message_fedavg(3).start(grid=grid, initial_arrays=ArrayRecord([x0]), num_rounds=3)
    (final,) = result.arrays.to_numpy_ndarrays()
    np.testing.assert_array_equal(final, x0 + 2.25 + 2 * 1.5 + (3 * 1 + 3 * 2 + 2 * 2 * 3) / 4)
    assert [int(c.state[CALLS][CALLS]) for c in grid.contexts.values()] == [3, 3, 2]

    grid = InProcessGrid(counting_app(fail=(0, 1)), 1)
    config = ConfigRecord({"server-round": 1})
    msg = Message(
        RecordDict({"arrays": ArrayRecord([x0]), "config": config}), node_id_of(0), "train"
    )
    (reply,) = grid.send_and_receive([msg])
    assert reply.has_error() and not reply.has_content()
    assert reply.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert "ClientAppException" in reply.error.reason
    assert "partition 0 fails in round 1" in reply.error.reason
    assert reply.metadata.reply_to_message_id == msg.metadata.message_id
    assert reply.metadata.src_node_id == node_id_of(0)
    assert CALLS not in grid.contexts[node_id_of(0)].state


def test_nodes_ids_replies_in_push_order_once() -> None:
    grid = InProcessGrid(counting_app(), 3, run_config={"seed": 4}, run_id=7)
    assert grid.get_node_ids() == [NODE_ID_BASE, NODE_ID_BASE + 1, NODE_ID_BASE + 2]
    assert [grid.partition_of(n) for n in grid.get_node_ids()] == [0, 1, 2]
    ctx = grid.contexts[node_id_of(1)]
    assert (ctx.node_config, ctx.run_config, ctx.run_id) == (
        {"partition-id": 1, "num-partitions": 3},
        {"seed": 4},
        7,
    )
    content = RecordDict(
        {"arrays": ArrayRecord([np.zeros(1)]), "config": ConfigRecord({"server-round": 1})}
    )
    msgs = [Message(content, node_id_of(p), "train") for p in (2, 0, 1)]
    ids = grid.push_messages(msgs)
    assert len(set(ids)) == 3
    replies = grid.pull_messages(reversed(ids))
    assert [r.metadata.src_node_id for r in replies] == [node_id_of(p) for p in (2, 0, 1)]
    assert [r.metadata.reply_to_message_id for r in replies] == ids
    assert all(r.metadata.run_id == 7 for r in replies)
    assert grid.pull_messages(ids) == []
    # every node got the same content, unchanged by the previous node's handler
    assert [r.content["arrays"].to_numpy_ndarrays()[0][0] for r in replies] == [3.0, 1.0, 2.0]


def test_bad_messages_are_refused_with_what_to_do() -> None:
    grid = InProcessGrid(counting_app(), 2)
    with pytest.raises(
        ValueError, match=r"node 5, which this grid does not have.*1000000\.\.1000001"
    ):
        grid.push_messages([Message(RecordDict(), 5, "train")])
    with pytest.raises(ValueError, match="num_partitions must be at least 1"):
        InProcessGrid(counting_app(), 0)


def test_a_strategy_waiting_for_more_nodes_is_stopped_with_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flower's FedAvg polls for nodes once a second for ever; the grid stops it (the
    sleep is skipped here)."""
    monkeypatch.setattr(strategy_utils, "sleep", lambda seconds: None)
    grid = InProcessGrid(counting_app(), 1)
    with pytest.raises(
        RuntimeError, match=r"more nodes than this in-process grid has \(1,.*at most 1"
    ):
        MessageFedAvg().start(grid=grid, initial_arrays=ArrayRecord([np.zeros(1)]), num_rounds=1)
