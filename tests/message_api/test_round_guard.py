"""Replies that are no update, and failed rounds, in every Message-API strategy
(fedram_flwr/message_api/round_guard.py over strategies/rounds.py): a duplicated reply,
a partition id out of range, NaN or inf are refused as failures of their node, never
aggregated; failed rounds in a row stop the run quoting the first error."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict

from fedram_flwr import message_api
from fedram_flwr.message_api.partitions import PARTITION_QUERY, PARTITION_RECORD
from fedram_flwr.protocol import NUM_EXAMPLES, PARTITION_ID, RECEIVED_LOSS
from fedram_flwr.strategies.rounds import FailedRoundsError
from tests.helpers import MODEL, STRATEGIES, N, StubGrid, instruction_message

NODES = {101: 0, 202: 1}  # node id -> partition id
NAMES = sorted(STRATEGIES)


def properties(message: Message) -> RecordDict:
    assert message.metadata.message_type == PARTITION_QUERY
    pid = NODES[message.metadata.dst_node_id]
    return RecordDict({PARTITION_RECORD: ConfigRecord({PARTITION_ID: pid, NUM_EXAMPLES: 16})})


def started(name: str, **kwargs) -> message_api.CoreMessageStrategy:
    """The Message-API twin of ``STRATEGIES[name]``, its round 1 configured."""
    make = STRATEGIES[name]
    if name == "qffl":
        strategy = message_api.QFFL(client_learning_rate=0.1, **kwargs)
    else:
        strategy = getattr(message_api, make.func.__name__)(**make.keywords, **kwargs)
    grid = StubGrid({node: properties for node in NODES})
    list(strategy.configure_train(1, ArrayRecord(MODEL), ConfigRecord(), grid))
    return strategy


Reply = Callable[[list[np.ndarray]], Message]


def reply(node: int, pid, value: float = 1.0, **metrics) -> Reply:
    """Node ``node``'s reply carrying partition id ``pid``, every entry ``value``."""

    def make(like: list[np.ndarray]) -> Message:
        arrays = ArrayRecord([np.full_like(a, value) for a in like])
        record = MetricRecord({PARTITION_ID: pid, NUM_EXAMPLES: 16, RECEIVED_LOSS: 1.0, **metrics})
        instruction = instruction_message(RecordDict(), dst_node_id=node)
        return Message(RecordDict({"arrays": arrays, "metrics": record}), reply_to=instruction)

    return make


def error_reply(node: int, reason: str) -> Reply:
    def make(like: list[np.ndarray]) -> Message:
        instruction = instruction_message(RecordDict(), dst_node_id=node)
        return Message(Error(code=0, reason=reason), reply_to=instruction)

    return make


def round_of(name: str, replies: list[Reply]) -> tuple[list[np.ndarray] | None, str]:
    """(new model or None, the state's repr) of a fresh strategy after one round."""
    strategy = started(name)
    like = strategy.broadcast_arrays() if hasattr(strategy, "broadcast_arrays") else MODEL
    new, _ = strategy.aggregate_train(1, [r(like) for r in replies])
    return (None if new is None else new.to_numpy_ndarrays()), repr(getattr(strategy, "state", 0))


def assert_same_round(name: str, replies: list[Reply], expected: list[Reply]) -> None:
    got, state = round_of(name, replies)
    want, want_state = round_of(name, expected)
    assert (got is None) == (want is None), name
    for a, b in zip(got or [], want or []):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert state == want_state, name


@pytest.mark.parametrize("name", NAMES)
def test_a_duplicated_reply_is_refused_not_counted_twice(name: str) -> None:
    dup = reply(202, 1, 3.0)
    assert_same_round(name, [reply(101, 0), dup, dup], [reply(101, 0)])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad_id", [-1, N])
def test_a_partition_id_out_of_range_is_refused(name: str, bad_id: int) -> None:
    if bad_id == N and name in {"fedavg", "fed-cvar-avg", "qffl", "rfedfair"}:
        pytest.skip("keeps nothing per client: any id >= 0 is taken")
    assert_same_round(name, [reply(101, 0), reply(202, bad_id, 3.0)], [reply(101, 0)])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "bad",
    [
        reply(202, 1, np.nan),
        reply(202, 1, -np.inf),
        reply(202, 1, 3.0, **{RECEIVED_LOSS: float("inf")}),
        reply(202, 1, 3.0, **{NUM_EXAMPLES: float("nan")}),  # was a ValueError from int()
    ],
    ids=["nan-update", "inf-update", "inf-received-loss", "nan-num-examples"],
)
def test_a_non_finite_reply_is_refused(name: str, bad: Reply) -> None:
    assert_same_round(name, [reply(101, 0), bad], [reply(101, 0)])


def test_a_refusal_is_named_in_the_log(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="flwr"):
        round_of("mifa", [reply(101, 0), reply(202, -1)])
    assert "round 1: MIFA refused node 202: partition id -1 is outside 0..1" in caplog.text


@pytest.mark.parametrize("name", NAMES)
def test_failed_rounds_in_a_row_stop_with_the_first_error(name: str, caplog) -> None:
    """Round 1: an error reply; round 2: nobody (no count); round 3: a NaN update;
    round 4: an error again, the third failed round: the run stops."""
    strategy = started(name)
    like = strategy.broadcast_arrays() if hasattr(strategy, "broadcast_arrays") else MODEL
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.aggregate_train(1, [error_reply(101, "ClientAppException: no to_xy")(like)])
        strategy.aggregate_train(2, [])
        strategy.aggregate_train(3, [reply(202, 1, np.nan)(like)])
        with pytest.raises(FailedRoundsError) as err:
            strategy.aggregate_train(4, [error_reply(202, "again")(like)])
    assert "3 rounds in a row (1..4) trained nothing" in str(err.value)
    assert "first error (round 1): 'node 101: ClientAppException: no to_xy'" in str(err.value)
    assert (
        "round 1: no update aggregated: 1 of 1 selected clients failed; first error: "
        "'node 101: ClientAppException: no to_xy'" in caplog.text
    )
    assert "round 3: no update aggregated: 1 of 1 selected clients failed" in caplog.text


def test_max_failed_rounds_is_an_argument_shown_in_the_signature() -> None:
    import inspect

    for name in set(NAMES) - {"qffl"}:
        cls = getattr(message_api, STRATEGIES[name].func.__name__)
        assert inspect.signature(cls).parameters["max_failed_rounds"].default == 3, name
    strategy = started("fedavg", max_failed_rounds=1)
    with pytest.raises(FailedRoundsError, match=r"1 rounds in a row \(1..1\)"):
        strategy.aggregate_train(1, [error_reply(101, "x")(MODEL)])
    with pytest.raises(ValueError, match="max_failed_rounds: 0 is not allowed"):
        partial(message_api.FedAvg, max_failed_rounds=0)()
