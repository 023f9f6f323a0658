"""The one Message-API base (fedram_flwr/message_api/strategy.py): ``start`` on a stub grid
against the legacy strategy fed the same client, the empty round, the failure guard,
partition-id order, the grid it is handed, and the contract errors."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MetricRecord, RecordDict
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

from fedram_flwr import message_api, strategies
from fedram_flwr.clients.wire import received
from fedram_flwr.message_api.partitions import PARTITION_QUERY, PARTITION_RECORD
from fedram_flwr.protocol import (
    CVAR_ALPHA,
    LR,
    NUM_EXAMPLES,
    PARTITION_ID,
    THRESHOLD_T,
    join_theta_t,
    split_theta_t,
)
from tests.helpers import StubGrid

NODES = {101: 0, 202: 1, 303: 2}  # node id -> partition id
SIZES = {0: 10, 1: 30, 2: 20}
INITIAL = {"w": np.full((2, 2), 0.5, np.float32), "b": np.zeros(3, np.float32)}


def local_step(arrays: list[np.ndarray], pid: int, rnd: int) -> list[np.ndarray]:
    """A client's deterministic 'training': every array moved by a (round, client) draw."""
    rng = np.random.default_rng([rnd, pid])
    return [(a - 0.1 * rng.random(a.shape)).astype(a.dtype) for a in arrays]


def cvar_step(arrays: list[np.ndarray], pid: int, rnd: int) -> list[np.ndarray]:
    """Fed-CVaR-Avg's client: theta moved, t raised by 0.5 (pid + 1)."""
    theta, t = split_theta_t(arrays)
    return join_theta_t(local_step(theta, pid, rnd), t + 0.5 * (pid + 1))


def node(step, silent_rounds=(), seen=None):
    """A node answering train messages with ``step`` (no reply in ``silent_rounds``) and
    evaluate messages with a loss; ``seen`` collects (type, round, config) it received."""

    def handle(message: Message) -> RecordDict | None:
        pid = NODES[message.metadata.dst_node_id]
        if message.metadata.message_type == PARTITION_QUERY:  # rFedFair asks p_i's m_i
            answer = ConfigRecord({PARTITION_ID: pid, NUM_EXAMPLES: SIZES[pid]})
            return RecordDict({PARTITION_RECORD: answer})
        config = message.content["config"]
        rnd = config["server-round"]
        if seen is not None:
            seen.append((message.metadata.message_type, rnd, dict(config)))
        arrays = received(message, "test")[0]  # the model, then t, eta or c
        if message.metadata.message_type == "evaluate":
            loss = float(sum(a.sum() for a in arrays))
            return RecordDict({"metrics": MetricRecord({NUM_EXAMPLES: SIZES[pid], "loss": loss})})
        if rnd in silent_rounds:
            return None
        metrics = {PARTITION_ID: pid, NUM_EXAMPLES: SIZES[pid]}
        if step is cvar_step:
            metrics[THRESHOLD_T] = float(arrays[-1][0])
        returned = ArrayRecord(step(arrays, pid, rnd))
        return RecordDict({"arrays": returned, "metrics": MetricRecord(metrics)})

    return handle


def legacy_run(legacy, step, rounds: int, silent_rounds=()) -> None:
    """The legacy strategy fed the same clients (every node trains when not silent)."""
    for rnd in range(1, rounds + 1):
        broadcast = legacy.core.arrays(legacy.state)
        results = [
            (
                None,
                FitRes(
                    Status(Code.OK, ""),
                    ndarrays_to_parameters(step(broadcast, p, rnd)),
                    SIZES[p],
                    {PARTITION_ID: p},
                ),
            )
            for p in sorted(SIZES)
            if rnd not in silent_rounds
        ]
        legacy.aggregate_fit(rnd, results, [])


def as_bytes(arrays) -> list[bytes]:
    return [np.asarray(a).tobytes() for a in arrays]


def test_start_runs_fed_cvar_avg_as_the_legacy_strategy_does() -> None:
    params = dict(alpha=0.5, gamma=0.1, lr_t=0.01, t_init=0.25)
    seen: list = []
    grid = StubGrid({n: node(cvar_step, seen=seen) for n in NODES})
    evaluated: list[tuple[int, list[str], list[np.ndarray]]] = []

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        evaluated.append((rnd, list(arrays.keys()), arrays.to_numpy_ndarrays()))
        return MetricRecord({"loss": 1.0})

    strategy = message_api.FedCVaRAvg(**params, min_train_nodes=3, min_available_nodes=3)
    initial = ArrayRecord({k: Array(v) for k, v in INITIAL.items()})
    result = strategy.start(
        grid=grid, initial_arrays=initial, num_rounds=3, evaluate_fn=evaluate_fn
    )

    legacy = strategies.FedCVaRAvg(initial_arrays=list(INITIAL.values()), **params)
    legacy_run(legacy, cvar_step, 3)
    theta, t = split_theta_t(legacy.core.arrays(legacy.state))
    assert list(result.arrays.keys()) == ["w", "b"]  # the model, as the user built it
    assert as_bytes(result.arrays.to_numpy_ndarrays()) == as_bytes(theta)
    assert result.evaluate_metrics_serverapp[3][THRESHOLD_T] == t
    assert result.evaluate_metrics_serverapp[0][THRESHOLD_T] == 0.25  # t_init, before round 1
    assert [(r, keys) for r, keys, _ in evaluated] == [(r, ["w", "b"]) for r in range(4)]
    # every node got (theta, t) and the CVaR keys to train, and theta (as the user's
    # model, a stock @app.evaluate() handler's to_torch_state_dict() works) to evaluate
    trained = [(rnd, c) for kind, rnd, c in seen if kind == "train"]
    assert len(trained) == 9 and all(c[CVAR_ALPHA] == 0.5 for _, c in trained)
    assert len([1 for kind, _, _ in seen if kind == "evaluate"]) == 9
    sent = [m.content["arrays"] for m in grid.sent if m.metadata.message_type == "evaluate"]
    assert all(list(a.keys()) == ["w", "b"] for a in sent)  # not t


def test_start_steps_fedar_from_memory_in_a_round_without_replies() -> None:
    """Round 2: no node answers; Flower's start still calls aggregate_train (no replies),
    and FedAR's eq. (7) moves the model with the stored updates."""
    params = dict(num_clients=3, lr=0.1, rho=0.5, g="convex", t0=10.0, b=4.0)
    grid = StubGrid({n: node(local_step, silent_rounds=(2,)) for n in NODES})
    models: dict[int, list[bytes]] = {}

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        models[rnd] = as_bytes(arrays.to_numpy_ndarrays())
        return MetricRecord({"loss": 0.0})

    strategy = message_api.FedAR(**params, fraction_evaluate=0.0, min_available_nodes=3)
    initial = ArrayRecord(list(INITIAL.values()))
    result = strategy.start(
        grid=grid, initial_arrays=initial, num_rounds=3, evaluate_fn=evaluate_fn
    )

    legacy = strategies.FedAR(initial_arrays=list(INITIAL.values()), **params)
    legacy_run(legacy, local_step, 3, silent_rounds=(2,))
    assert as_bytes(result.arrays.to_numpy_ndarrays()) == as_bytes(legacy.core.arrays(legacy.state))
    assert models[2] != models[1]  # stepped from memory
    assert result.train_metrics_clientapp[2]["seen"] == 3
    assert strategy.state.memory.tau.tolist() == legacy.state.memory.tau.tolist() == [0, 0, 0]
    # eq. (7) by hand for round 2: w2 = w1 - eta * (1/3) sum_i psi_i G_i, tau = 1, psi = 2^rho
    w1 = np.concatenate([np.frombuffer(b, np.float32) for b in models[1]])
    w2 = np.concatenate([np.frombuffer(b, np.float32) for b in models[2]])
    expected = w1.astype(np.float64)
    w0 = np.concatenate([a.ravel() for a in INITIAL.values()])
    updates = [
        (w0 - np.concatenate([a.ravel() for a in local_step(list(INITIAL.values()), p, 1)])) / 0.1
        for p in range(3)
    ]
    expected -= 0.1 * (2**0.5) * np.mean(updates, axis=0)
    np.testing.assert_allclose(w2, expected, rtol=1e-5, atol=1e-6)


def test_start_reports_rfedfairs_eta_and_its_averaged_omega() -> None:
    grid = StubGrid({n: node(local_step) for n in NODES})

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        return MetricRecord({"loss": float(sum(a.sum() for a in arrays.to_numpy_ndarrays()))})

    strategy = message_api.RFedFair(
        alpha=0.5, lr_eta=0.01, min_available_nodes=3, fraction_evaluate=0.0
    )
    initial = ArrayRecord({k: Array(v) for k, v in INITIAL.items()})
    result = strategy.start(
        grid=grid, initial_arrays=initial, num_rounds=2, evaluate_fn=evaluate_fn
    )
    omegas = [
        m.content["arrays"].to_numpy_ndarrays()  # omega alone: eta travels beside it
        for m in grid.sent
        if m.metadata.message_type == "train" and m.metadata.dst_node_id == 101
    ]
    averaged = [np.mean([o[k] for o in omegas], axis=0, dtype=np.float64) for k in range(2)]
    metrics = result.evaluate_metrics_serverapp[2]
    expected = float(sum(a.astype(np.float32).sum() for a in averaged))
    assert metrics["avg-loss"] == pytest.approx(expected, rel=1e-6)
    assert metrics["eta"] == split_theta_t(strategy.broadcast_arrays())[1]
    configs = [m.content["config"] for m in grid.sent if m.metadata.message_type == "train"]
    assert sorted(c["rcfl-p"] for c in configs[:3]) == pytest.approx([1 / 6, 1 / 3, 1 / 2])


def reply(instruction: Message, arrays, metrics) -> Message:
    return Message(
        RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord(metrics)}),
        reply_to=instruction,
    )


def configured(strategy, nodes=NODES, rnd: int = 1) -> dict[int, Message]:
    grid = StubGrid({n: node(local_step) for n in nodes})
    initial = ArrayRecord(list(INITIAL.values()))
    return {
        m.metadata.dst_node_id: m
        for m in strategy.configure_train(rnd, initial, ConfigRecord(), grid)
    }


def test_replies_are_aggregated_in_partition_order() -> None:
    """FedAvg's float sum over three clients in partition order, whatever the arrival."""
    values = {101: 0.1, 202: 0.7, 303: 0.3}
    models = []
    for order in ([101, 202, 303], [303, 202, 101]):
        strategy = message_api.FedAvg(min_available_nodes=3, min_train_nodes=3)
        sent = configured(strategy)
        replies = [
            reply(
                sent[n],
                [np.full_like(a, values[n]) for a in INITIAL.values()],
                {PARTITION_ID: NODES[n], NUM_EXAMPLES: SIZES[NODES[n]]},
            )
            for n in order
        ]
        models.append(as_bytes(strategy.aggregate_train(1, replies)[0].to_numpy_ndarrays()))
    assert models[0] == models[1]


def test_accept_failures_false_aggregates_nothing_and_keeps_the_state() -> None:
    strategy = message_api.FedAR(
        num_clients=3,
        lr=0.1,
        rho=0.1,
        g="convex",
        accept_failures=False,
        min_available_nodes=3,
    )
    sent = configured(strategy)
    state = strategy.state
    good = reply(sent[101], list(INITIAL.values()), {PARTITION_ID: 0, NUM_EXAMPLES: 10})
    failed = Message(Error(code=1, reason="lost"), reply_to=sent[202])
    assert strategy.aggregate_train(1, [good, failed]) == (None, None)
    assert strategy.state is state and strategy.last_round == 0
    arrays, _ = strategy.aggregate_train(1, [good])
    assert arrays is not None and strategy.last_round == 1


def test_accept_failures_true_aggregates_the_replies_it_has() -> None:
    strategy = message_api.FedAvg(min_available_nodes=3)
    sent = configured(strategy)
    good = reply(sent[101], [a + 1 for a in INITIAL.values()], {NUM_EXAMPLES: 10})
    failed = Message(Error(code=1, reason="lost"), reply_to=sent[202])
    arrays, _ = strategy.aggregate_train(1, [failed, good])
    assert as_bytes(arrays.to_numpy_ndarrays()) == as_bytes([a + 1 for a in INITIAL.values()])


def test_the_grid_handed_in_decides_who_trains() -> None:
    """Flower's sampling on the grid (view) it is given: an availability wrapper's."""
    strategy = message_api.FedAR(
        num_clients=3,
        lr=0.1,
        rho=0.1,
        g="convex",
        min_available_nodes=1,
        min_train_nodes=1,
    )
    sent = configured(strategy, nodes={202: 1})
    assert list(sent) == [202]
    assert sent[202].content["config"][LR] == 0.1


def test_a_fed_cvar_avg_reply_without_t_is_named() -> None:
    strategy = message_api.FedCVaRAvg(alpha=0.5, gamma=0.1, lr_t=0.01, min_available_nodes=3)
    sent = configured(strategy)
    theta_only = reply(sent[101], list(INITIAL.values()), {PARTITION_ID: 0, NUM_EXAMPLES: 10})
    with pytest.raises(
        ValueError,
        match=r"FedCVaRAvg: the reply of node 101 \(partition 0\) "
        r"has 2 arrays.*broadcast 3.*\(theta, t\)",
    ):
        strategy.aggregate_train(1, [theta_only])


def test_a_missing_metric_the_strategy_needs_is_named() -> None:
    strategy = message_api.CAFed(alpha=[0.2, 0.3, 0.5], min_available_nodes=3)
    sent = configured(strategy)
    no_loss = reply(sent[202], list(INITIAL.values()), {PARTITION_ID: 1, NUM_EXAMPLES: 30})
    with pytest.raises(ValueError, match="CAFed: the reply of node 202 .*'received-loss'"):
        strategy.aggregate_train(1, [no_loss])


def test_a_reply_without_partition_id_is_named() -> None:
    strategy = message_api.MIFA(num_clients=3, lr=0.1, min_available_nodes=3)
    sent = configured(strategy)
    anonymous = reply(sent[303], list(INITIAL.values()), {NUM_EXAMPLES: 20})
    with pytest.raises(ValueError, match=r"MIFA: .*no 'partition-id'.*node_config.*\(node 303\)"):
        strategy.aggregate_train(1, [anonymous])


def test_construction_names_unknown_and_missing_arguments() -> None:
    with pytest.raises(TypeError, match=r"FedCVaRAvg: unknown argument\(s\) \['beta'\].*'alpha'"):
        message_api.FedCVaRAvg(alpha=0.1, gamma=0.1, lr_t=0.1, beta=1.0)
    with pytest.raises(TypeError, match=r"FedAR: missing required argument\(s\) \['lr'\]"):
        message_api.FedAR(num_clients=3)
    with pytest.raises(ValueError, match="^alpha: "):  # the core's own check
        message_api.FedCVaRAvg(alpha=2.0, gamma=0.1, lr_t=0.1)
