"""Agreement: every algorithm's Message-API strategy (fedram_flwr/message_api/algorithms.py)
gives the same new state as its legacy strategy from the same replies, bit for bit.

The replies of each round are built twice, as legacy ``FitRes`` and as Message-API reply
``Message``s (the wire contract of docs/API.md), arrive out of partition order, and one
round has none (FedAR and MIFA step from memory)."""

from __future__ import annotations

import dataclasses
import inspect
from functools import partial
from typing import Any

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from fedram_flwr import message_api
from fedram_flwr.availability import NonStationaryLaw
from fedram_flwr.clients.wire import received
from fedram_flwr.message_api.evaluation import metric_values
from fedram_flwr.message_api.partitions import PARTITION_QUERY, PARTITION_RECORD
from fedram_flwr.protocol import (
    LOCAL_OPTIMUM,
    NUM_EXAMPLES,
    PARTITION_ID,
    RCFL_ALPHA,
    RCFL_P,
    RECEIVED_LOSS,
)
from fedram_flwr.registry import ALGORITHMS
from tests.helpers import MODEL, STRATEGIES, StubGrid

NODES = {101: 0, 202: 1}  # node id -> partition id
SIZES = {0: 16, 1: 16}  # partition id -> m_i (equal: rFedFair's alpha = 0.5 needs p_i <= 0.5)
ROUNDS = [[1, 0], [], [0], [1, 0]]  # who replies in each round, in arrival order


# The algorithms given a server learning rate eta_g, each with one != 1.
SERVER_LR = {"fedavg": 0.5, "mifa": 2.0, "fedvarp": 0.5, "fedavg-is": 2.0, "fedau": 0.5}


def message_twin(make: partial) -> message_api.CoreMessageStrategy:
    """The Message-API strategy of the legacy ``make``, same arguments."""
    return getattr(message_api, make.func.__name__)(**make.keywords)


def client_arrays(broadcast: list[np.ndarray], pid: int, rnd: int) -> list[np.ndarray]:
    """A client's return: the broadcast moved by a (round, client) draw, same dtypes."""
    rng = np.random.default_rng([rnd, pid])
    return [(a + rng.normal(size=a.shape)).astype(a.dtype) for a in broadcast]


def client_metrics(pid: int, rnd: int) -> dict[str, Any]:
    return {
        PARTITION_ID: pid,
        NUM_EXAMPLES: SIZES[pid],
        RECEIVED_LOSS: 0.5 + pid + 0.25 * rnd,
        LOCAL_OPTIMUM: 0.1 * pid,
    }


def properties(message):
    """The nodes' answer to the partition-id query (as ``partition_id_query`` given m_i
    answers), and no training (the test builds replies)."""
    assert message.metadata.message_type == PARTITION_QUERY
    pid = NODES[message.metadata.dst_node_id]
    return RecordDict(
        {PARTITION_RECORD: ConfigRecord({PARTITION_ID: pid, NUM_EXAMPLES: SIZES[pid]})}
    )


def assert_same(a: Any, b: Any, where: str = "state") -> None:
    """Equal values, arrays bit for bit (dtype, shape, bytes), recursing into dataclasses."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, np.ndarray | np.generic):
        x, y = np.asarray(a), np.asarray(b)
        assert (x.dtype, x.shape, x.tobytes()) == (y.dtype, y.shape, y.tobytes()), where
    else:
        assert a == b or (a != a and b != b), where  # NaN == NaN here


def test_every_legacy_algorithm_has_a_message_api_namesake() -> None:
    assert set(STRATEGIES) == set(ALGORITHMS)
    for make in STRATEGIES.values():
        assert make.func.__name__ in message_api.__all__


@pytest.mark.parametrize("name", sorted(set(STRATEGIES) - {"qffl"}))
def test_the_signature_shows_the_legacy_hyper_parameters_and_flowers(name: str) -> None:
    make = STRATEGIES[name]
    signature = inspect.signature(getattr(message_api, make.func.__name__))
    signature.bind(**make.keywords)  # the legacy arguments, by the same names
    assert {"accept_failures", "fraction_train", "min_available_nodes"} <= set(signature.parameters)
    assert all(p.kind == p.KEYWORD_ONLY for p in signature.parameters.values())


@pytest.mark.parametrize("name", sorted(set(STRATEGIES) - {"qffl"}))
def test_the_same_replies_give_the_same_state_as_the_legacy_strategy(name: str) -> None:
    assert_agree(name, STRATEGIES[name])


@pytest.mark.parametrize("name", sorted(SERVER_LR))
def test_a_server_learning_rate_gives_the_same_state_in_both_apis(name: str) -> None:
    make = partial(STRATEGIES[name], server_lr=SERVER_LR[name])
    assert message_twin(make).core.server_lr == SERVER_LR[name]
    assert_agree(name, make)


def test_known_p_per_round_gives_the_same_state_in_both_apis() -> None:
    """FedAvg with known p_i^t (FedAWE Table 2): a staircase law whose p^t differs
    between rounds, read by both APIs from the one core."""
    law = NonStationaryLaw(np.array([0.5, 0.25]), "staircase", period=2, low=0.5)
    make = partial(STRATEGIES["fedavg-is"], known_p=law, server_lr=2.0)
    assert message_twin(make).core.known_p is law
    assert_agree("fedavg-is", make)


def assert_agree(name: str, make: partial) -> None:
    """The legacy ``make`` and its Message-API twin, fed the same replies over
    ``ROUNDS``, hold the same state, model, metrics and diagnostics bit for bit."""
    legacy = make(initial_arrays=MODEL)
    strategy = message_twin(make)
    grid = StubGrid({node: properties for node in NODES})
    arrays = ArrayRecord(MODEL)
    for rnd, repliers in enumerate(ROUNDS, start=1):
        broadcast = legacy.core.arrays(legacy.state)
        instructions = {
            m.metadata.dst_node_id: m
            for m in strategy.configure_train(rnd, arrays, ConfigRecord(), grid)
        }
        for node, message in instructions.items():  # FedAWE: each node its own x_i^t
            own = getattr(legacy.core, "client_arrays", None)
            want = broadcast if own is None else own(legacy.state, NODES[node])
            assert_same(received(message, "test")[0], want, "broadcast")  # model, then t...
        for node, message in instructions.items():  # the legacy fit config, and Flower's key
            config = message.content["config"]
            assert config["server-round"] == rnd
            for key, value in legacy.core.fit_config(legacy.state, rnd).items():
                assert config[key] == value, key
        if name == "rfedfair":  # per-node config, as the legacy configure_fit sends
            assert [instructions[n].content["config"][RCFL_P] for n in NODES] == [0.5, 0.5]
            assert instructions[202].content["config"][RCFL_ALPHA] == 0.5
            legacy.state = legacy.core.broadcast(legacy.state, broadcast)
            legacy.state, _ = legacy.core.select(legacy.state, {0: 0.5, 1: 0.5}, [0, 1], rnd)
        node_of = {pid: node for node, pid in NODES.items()}
        fits, messages = [], []
        for pid in repliers:
            returned, metrics = client_arrays(broadcast, pid, rnd), client_metrics(pid, rnd)
            params = ndarrays_to_parameters(returned)
            fits.append((None, FitRes(Status(Code.OK, ""), params, SIZES[pid], metrics)))
            content = RecordDict(
                {"arrays": ArrayRecord(returned), "metrics": MetricRecord(metrics)}
            )
            messages.append(grid_reply(instructions[node_of[pid]], content))
        if name == "fedavg-s":  # the legacy class drops the unselected before training
            ordered = sorted(fits, key=lambda f: f[1].metrics[PARTITION_ID])
            fits = [ordered[k] for k in legacy.core.select(len(ordered), rnd)]
        params, legacy_metrics = legacy.aggregate_fit(rnd, fits, [])
        new, metrics = strategy.aggregate_train(rnd, messages)
        assert_same(strategy.state, legacy.state, f"round {rnd}: state")
        assert strategy.last_round == legacy.last_round == rnd
        if params is None:
            assert new is None
        else:
            model = legacy.core.evaluated(parameters_to_ndarrays(params))[0]
            assert_same(new.to_numpy_ndarrays(), model, f"round {rnd}: model")
            arrays = new
        for key, value in metric_values(legacy_metrics).items():
            assert_same(metrics[key], value, f"round {rnd}: metric {key}")
    assert_same(strategy.diagnostics(), legacy.diagnostics(), "diagnostics")


def grid_reply(instruction, content: RecordDict):
    """A node's reply to ``instruction``."""
    from flwr.app import Message

    return Message(content, reply_to=instruction)


def qffl_round(losses: dict[int, float]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One q-FFL round from MODEL, legacy QFFL and Message-API QFFL (Flower's QFedAvg)."""
    legacy = STRATEGIES["qffl"](initial_arrays=MODEL)
    legacy.pre_weights = MODEL
    strategy = message_api.QFFL(q=1.0, client_learning_rate=0.1)
    grid = StubGrid({node: properties for node in NODES})
    sent = {
        m.metadata.dst_node_id: m
        for m in strategy.configure_train(1, ArrayRecord(MODEL), ConfigRecord(), grid)
    }
    fits, messages = [], []
    for node, pid in NODES.items():
        returned = client_arrays(MODEL, pid, 1)
        metrics = {**client_metrics(pid, 1), RECEIVED_LOSS: losses[pid]}
        params = ndarrays_to_parameters(returned)
        fits.append((None, FitRes(Status(Code.OK, ""), params, SIZES[pid], metrics)))
        content = RecordDict({"arrays": ArrayRecord(returned), "metrics": MetricRecord(metrics)})
        messages.append(grid_reply(sent[node], content))
    legacy_new = parameters_to_ndarrays(legacy.aggregate_fit(1, fits, [])[0])
    return legacy_new, strategy.aggregate_train(1, messages[::-1])[0].to_numpy_ndarrays()


def test_qffl_is_flowers_message_api_qfedavg_with_each_clients_own_loss() -> None:
    """Flower's Message-API QFedAvg reads each client's loss from its reply (the legacy
    QFedAvg fed all clients the server's loss; strategies/qffl.py fixes that): the same
    step as the legacy QFFL, up to float rounding (Flower sums before dividing)."""
    legacy_new, new = qffl_round({0: 0.7, 1: 2.5})
    for a, b in zip(legacy_new, new, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    _, same_loss = qffl_round({0: 1.6, 1: 1.6})
    assert not np.allclose(same_loss[0], new[0])  # the losses weigh the clients


def test_qffl_names_a_missing_loss() -> None:
    strategy = message_api.QFFL(client_learning_rate=0.1)
    grid = StubGrid({node: properties for node in NODES})
    sent = list(strategy.configure_train(1, ArrayRecord(MODEL), ConfigRecord(), grid))
    content = RecordDict(
        {"arrays": ArrayRecord(MODEL), "metrics": MetricRecord({PARTITION_ID: 0, NUM_EXAMPLES: 3})}
    )
    with pytest.raises(ValueError, match=r"QFFL: the reply of node \d+ .*'received-loss'"):
        strategy.aggregate_train(1, [grid_reply(sent[0], content)])


def test_rfedfair_names_a_node_that_does_not_answer_the_properties_query() -> None:
    strategy = message_api.RFedFair(alpha=0.5, lr_eta=0.01, query_timeout=1.0)
    grid = StubGrid({101: properties, 202: lambda message: None})
    with pytest.raises(RuntimeError, match=r"RFedFair: node\(s\) \[202\] gave no 'partition-id'"):
        strategy.configure_train(1, ArrayRecord(MODEL), ConfigRecord(), grid)
