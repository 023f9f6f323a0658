"""Availability for any Message-API strategy: Flower's own strategies, unchanged, train
and evaluate round r on exactly the oracle's nodes of round r (same set both phases),
the partition-id contract, bounded waits with errors that say what to change, empty
rounds, and replay after a restart.

The grid here is a small stub that calls a ClientApp in this process (node ids unrelated
to partition ids, as Flower's engines give them)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial

import numpy as np
import pytest
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (
    DifferentialPrivacyServerSideFixedClipping,
    FedAdam,
    FedAvg,
    FedProx,
    QFedAvg,
)
from flwr.supercore.task_identity import TaskIdentity

from fedram_flwr import message_api
from fedram_flwr.availability import (
    AvailabilityError,
    BernoulliClientManager,
    ConnectedClientManager,
    CyclicClientManager,
    MarkovClientManager,
    OracleClientManager,
    RandomAccessClientManager,
    TraceClientManager,
)
from fedram_flwr.clients.wire import received
from fedram_flwr.message_api import FedCVaRAvg
from fedram_flwr.message_api.availability import MAX_POLLS, RoundView, with_availability
from fedram_flwr.message_api.partitions import PARTITION_ACTION, PARTITION_QUERY, partition_id_query
from fedram_flwr.strategies.rounds import FailedRoundsError

K = 5


def client_app(*, with_query: bool = True) -> ClientApp:
    """Trains by adding 1 to every array (FedAvg's average then moves the model by
    exactly 1 per round with replies); evaluates to loss 0."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = [a + 1 for a in received(msg, "test")[0]]  # the model, then t
        metrics = MetricRecord({"num-examples": 1, "train_loss": 1.0})
        return Message(
            RecordDict({"arrays": ArrayRecord(arrays), "metrics": metrics}), reply_to=msg
        )

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        metrics = MetricRecord({"num-examples": 1, "loss": 0.0})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    if with_query:
        app.query(PARTITION_ACTION)(partition_id_query)
    return app


class StubGrid(Grid):
    """Calls ``app`` for each message with the destination node's Context; records
    (message type, server round, node id) of every message sent."""

    def __init__(self, app: ClientApp, node_configs: dict[int, dict]) -> None:
        self.app = app
        self.contexts = {
            n: Context(run_id=1, node_id=n, node_config=cfg, state=RecordDict(), run_config={})
            for n, cfg in node_configs.items()
        }
        self.sent: list[tuple[str, int | None, int]] = []
        self.silent: set[int] = set()  # nodes whose replies never come (timeout)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        replies = []
        for msg in messages:
            config = msg.content.config_records.get("config", ConfigRecord())
            node = msg.metadata.dst_node_id
            self.sent.append((msg.metadata.message_type, config.get("server-round"), node))
            if node in self.silent:
                continue
            try:
                replies.append(self.app(msg, self.contexts[node]))
            except Exception as err:  # noqa: BLE001 - as Flower's engines: an error reply
                replies.append(Message(Error(code=0, reason=repr(err)), reply_to=msg))
        return replies

    def nodes_of(self, message_type: str, server_round: int) -> list[int]:
        return [n for t, r, n in self.sent if t == message_type and r == server_round]

    def set_run(self, run) -> None:
        raise NotImplementedError

    @property
    def run(self):
        raise NotImplementedError

    def create_message(self, *args, **kwargs) -> Message:
        raise NotImplementedError

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError


def node_id(pid: int, salt: int = 0) -> int:
    """A node id unrelated to the partition id (as Flower's random ones)."""
    return (1_000_003 * (pid + 7) + 7919 * salt) % 99_991 + 1


def grid_of(k: int, salt: int = 0, **app_kwargs) -> StubGrid:
    return StubGrid(
        client_app(**app_kwargs),
        {node_id(p, salt): {"partition-id": p, "num-partitions": k} for p in reversed(range(k))},
    )


@pytest.fixture(autouse=True)
def server_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ServerApp process's identity, which Flower sets before ``@app.main()``."""
    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)


def run(strategy, oracle: OracleClientManager, grid: StubGrid, rounds: int, **settings):
    wrapped = with_availability(strategy, oracle, **settings)
    result = wrapped.start(
        grid=grid, initial_arrays=ArrayRecord([np.zeros(2)]), num_rounds=rounds, timeout=5
    )
    return wrapped, result


def oracles() -> dict[str, OracleClientManager]:
    return {
        "ram": RandomAccessClientManager([0.4, 0.3, 0.2, 0.05, 0.05], seed=4),
        "ram-m2": RandomAccessClientManager([0.4, 0.3, 0.2, 0.05, 0.05], 4, clients_per_round=2),
        "bernoulli": BernoulliClientManager([0.9, 0.7, 0.5, 0.3, 0.1], seed=4),
        "markov": MarkovClientManager([0.8, 0.6, 0.5, 0.4, 0.2], [0.6, 0.3, 0.0, 0.5, 0.8], 4),
        "clustered": MarkovClientManager([0.7, 0.3], [0.5, 0.5], 4, cluster_of=[0, 0, 1, 1, 1]),
        "cyclic": CyclicClientManager([0, 1, 2, 3, 4], period=5, window=2, seed=4),
        "trace": TraceClientManager(np.random.default_rng(0).random((8, K)) < 0.5, seed=4),
    }


@pytest.mark.parametrize("name", list(oracles()))
def test_flower_fedavg_trains_and_evaluates_exactly_the_oracles_nodes(name: str) -> None:
    """Flower's FedAvg with its default minimum sizes (2 nodes: the RAM's 1 relayed node
    would make Flower wait forever) and the template's fraction_evaluate = 0.5: each
    round the oracle's draw trains, the same set evaluates, in partition-id order; the
    model moves by one exactly in the rounds with someone available."""
    oracle, grid, rounds = oracles()[name], grid_of(K), 8
    wrapped, result = run(FedAvg(fraction_evaluate=0.5), oracle, grid, rounds)
    pid_of = {node_id(p): p for p in range(K)}
    draws = {r: oracles()[name].draw(r) for r in range(1, rounds + 1)}
    for r, draw in draws.items():
        for phase in (MessageType.TRAIN, MessageType.EVALUATE):
            assert [pid_of[n] for n in grid.nodes_of(phase, r)] == draw, (phase, r)
    assert wrapped.relayed == draws
    queries = [s for s in grid.sent if s[0] == f"query.{PARTITION_ACTION}"]
    assert sorted(n for _, _, n in queries) == sorted(pid_of)  # asked once, each node
    moved = sum(1 for d in draws.values() if d)
    np.testing.assert_allclose(result.arrays.to_numpy_ndarrays()[0], np.full(2, moved), rtol=1e-12)


def test_a_restarted_run_replays_the_same_draws() -> None:
    """A new process (new wrapper, new oracle object, new node ids) relays the same
    partitions in every round: the law is keyed on the round only."""
    first, _ = run(FedAvg(), oracles()["markov"], grid_of(K, salt=0), 6)
    again, _ = run(FedAvg(), oracles()["markov"], grid_of(K, salt=1), 6)
    assert first.relayed == again.relayed and first.partition_of != again.partition_of


@pytest.mark.parametrize("make", [FedProx, FedAdam, partial(QFedAvg, client_learning_rate=0.1)])
def test_other_flower_strategies_unchanged_and_empty_rounds(make) -> None:
    """FedProx, FedAdam and QFedAvg as Flower ships them: round 2 of the trace has nobody,
    it sends nothing, the loop goes on, and rounds 1 and 3 train their nodes."""
    trace = np.array([[1, 1, 0, 0, 0], [0] * K, [0, 0, 1, 0, 1]], dtype=bool)
    grid = grid_of(K)
    wrapped, result = run(make(), TraceClientManager(trace, seed=0), grid, 3)
    assert wrapped.relayed == {1: [0, 1], 2: [], 3: [2, 4]}
    assert [r for _, r, _ in grid.sent if r is not None] == [1, 1, 1, 1, 3, 3, 3, 3]
    assert 3 in result.train_metrics_clientapp and 2 not in result.train_metrics_clientapp


def test_a_wrapped_strategy_of_ours_keeps_its_start_preparation() -> None:
    """Fed-CVaR-Avg wrapped: its state is reset before round 0's evaluation and t joins
    evaluate_fn's metrics, as under its own start. Each round one node adds 1 to every
    array it gets, t included, so the global t is t_init + r."""
    oracle = RandomAccessClientManager([0.4, 0.3, 0.2, 0.05, 0.05], seed=4)
    wrapped = with_availability(FedCVaRAvg(alpha=0.5, gamma=0.1, lr_t=0.01, t_init=0.25), oracle)
    result = wrapped.start(
        grid=grid_of(K),
        initial_arrays=ArrayRecord([np.zeros(2)]),
        num_rounds=3,
        evaluate_fn=lambda r, arrays: MetricRecord({"loss": 0.0}),
    )
    metrics = result.evaluate_metrics_serverapp
    assert [metrics[r]["t"] for r in range(4)] == [0.25, 1.25, 2.25, 3.25]


def test_connected_oracle_relays_the_grids_connected_nodes() -> None:
    """``connected``: round r relays the nodes connected when its training is configured
    (here 2 of them, drawn by (seed, r)); a node that joins later is asked its partition
    id once, then takes part."""
    grid = grid_of(4)
    late = grid.contexts.pop(node_id(3))
    oracle = ConnectedClientManager(4, seed=2, clients_per_round=2, min_clients=3)
    wrapped = with_availability(FedAvg(), oracle, wait_timeout=0)
    arrays = ArrayRecord([np.zeros(1)])
    for r in (1, 2):
        wrapped.configure_train(r, arrays, ConfigRecord(), grid)
    grid.contexts[node_id(3)] = late
    for r in (3, 4, 5, 6):
        wrapped.configure_train(r, arrays, ConfigRecord(), grid)
        wrapped.configure_evaluate(r, arrays, ConfigRecord(), grid)
    assert all(len(ids) == 2 for ids in wrapped.relayed.values())
    assert all(3 not in wrapped.relayed[r] for r in (1, 2))
    assert 3 in {p for r in (3, 4, 5, 6) for p in wrapped.relayed[r]}
    queried = [n for t, _, n in grid.sent if t.startswith("query")]
    assert sorted(queried) == sorted(node_id(p) for p in range(4))


def test_a_node_without_partition_id_is_told_what_to_add() -> None:
    grid = grid_of(3)
    del grid.contexts[node_id(1)].node_config["partition-id"]
    with pytest.raises(AvailabilityError) as err:
        run(FedAvg(), RandomAccessClientManager([0.5, 0.3, 0.2], seed=0), grid, 1)
    message = str(err.value)
    assert f"node {node_id(1)} has no 'partition-id'" in message
    assert "(its keys: num-partitions)" in message
    assert '--node-config "partition-id=K num-partitions=3" (K in 0..2' in message


def test_a_client_app_without_the_query_handler_is_told_to_register_it() -> None:
    grid = grid_of(2, with_query=False)
    with pytest.raises(AvailabilityError, match=r'app.query\("partition_id"\)\(partition_id_query'):
        run(FedAvg(), RandomAccessClientManager([0.5, 0.5], seed=0), grid, 1)


@pytest.mark.parametrize(("nodes", "seen"), [(4, "saw 4 after waiting 0 s"), (6, "saw 6:")])
def test_too_few_or_too_many_nodes_is_a_bounded_clear_error(nodes: int, seen: str) -> None:
    """The RAM knows 5 partitions: 4 nodes of a federation still connecting (they say
    num-partitions = 5; after the bounded wait, here 0 s) or 6 nodes stop the run, saying
    what was expected, what was seen and which setting to change."""
    grid = grid_of(nodes)
    for context in grid.contexts.values():
        context.node_config["num-partitions"] = max(nodes, 5)
    with pytest.raises(AvailabilityError) as err:
        run(FedAvg(), oracles()["ram"], grid, 1, wait_timeout=0)
    message = str(err.value)
    assert "expected 5 nodes (one per partition: the oracle knows num_clients = 5)" in message
    assert seen in message and "num-supernodes=5" in message
    if nodes < 5:
        assert "raise wait_timeout (with_availability(..., wait_timeout=...), now 0 s)" in message


def test_a_federation_known_to_be_smaller_than_the_oracle_fails_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An oracle of 3 clients in Flower's default 2-SuperNode simulation (every node's
    num-partitions = 2) stops before any wait (sleeping is an error here), naming 3 and 2;
    a node that does not say its num-partitions leaves the count open: the bounded wait."""

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"waited {seconds} s")

    monkeypatch.setattr("time.sleep", no_sleep)
    oracle = RandomAccessClientManager([0.5, 0.3, 0.2], seed=0)  # wait_timeout 120 s
    with pytest.raises(AvailabilityError) as err:
        run(FedAvg(), oracle, grid_of(2), 1)
    message = str(err.value)
    assert "the oracle knows num_clients = 3), but the federation has 2" in message
    assert "every connected node (2) says num-partitions = 2" in message
    assert "'num-supernodes=3') or give the oracle 2 clients" in message
    grid = grid_of(2)
    del grid.contexts[node_id(0)].node_config["num-partitions"]
    with pytest.raises(AssertionError, match="waited"):
        run(FedAvg(), oracle, grid, 1)


def test_duplicate_or_out_of_range_partition_ids_are_errors() -> None:
    grid = grid_of(3)
    grid.contexts[node_id(2)].node_config["partition-id"] = 0
    with pytest.raises(AvailabilityError, match="both report partition-id = 0"):
        run(FedAvg(), RandomAccessClientManager([0.5, 0.3, 0.2], seed=0), grid, 1)
    grid.contexts[node_id(2)].node_config["partition-id"] = 3
    with pytest.raises(AvailabilityError, match=r"partition-id = 3: expected an integer in 0..2"):
        run(FedAvg(), RandomAccessClientManager([0.5, 0.3, 0.2], seed=0), grid, 1)


def test_the_round_view_stops_a_strategy_that_keeps_polling() -> None:
    """A strategy waiting for more nodes than the round has (e.g. fraction_train > 1)
    polls get_node_ids(): the view raises instead of letting it wait forever."""
    view = RoundView(grid_of(2), [5, 6], "Greedy", {5: 0})
    for _ in range(MAX_POLLS):
        assert list(view.get_node_ids()) == [5, 6]
    with pytest.raises(AvailabilityError, match="Greedy polled get_node_ids.. 17 times"):
        view.get_node_ids()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="query_timeout: 0 must be a number of seconds > 0"):
        with_availability(FedAvg(), oracles()["ram"], query_timeout=0)
    with pytest.raises(ValueError, match="wait_timeout: -1 must be a number of seconds >= 0"):
        with_availability(FedAvg(), oracles()["ram"], wait_timeout=-1)


class EvenPartitions(FedAvg):
    """A strategy that picks among the available nodes itself (as the project's
    CA-Fed does): the even partition ids, read from the round view."""

    picks_among_available = True

    def configure_train(self, server_round, arrays, config, grid):
        nodes = [n for n in grid.get_node_ids() if grid.partition_of[n] % 2 == 0]
        record = RecordDict(
            {"arrays": arrays, "config": ConfigRecord({"server-round": server_round})}
        )
        return [Message(record, dst_node_id=n, message_type=MessageType.TRAIN) for n in nodes]


def test_a_strategy_that_picks_among_available_nodes_keeps_its_choice() -> None:
    oracle, grid = oracles()["bernoulli"], grid_of(K)
    wrapped, _ = run(EvenPartitions(fraction_evaluate=0.0), oracle, grid, 6)
    pid_of = {node_id(p): p for p in range(K)}
    for r in range(1, 7):
        sent = [pid_of[n] for n in grid.nodes_of(MessageType.TRAIN, r)]
        assert sent == [p for p in oracles()["bernoulli"].draw(r) if p % 2 == 0]
    assert any(p % 2 for ids in wrapped.relayed.values() for p in ids)


def test_a_strategy_that_picks_unavailable_nodes_is_an_error() -> None:
    class Everyone(EvenPartitions):
        def configure_train(self, server_round, arrays, config, grid):
            return [
                Message(RecordDict(), dst_node_id=n, message_type=MessageType.TRAIN)
                for n in grid.grid.get_node_ids()
            ]

    trace = np.array([[1, 0, 0, 0, 0]], dtype=bool)
    with pytest.raises(
        AvailabilityError, match=r"Everyone addressed nodes .* not available in round 1"
    ):
        run(Everyone(), TraceClientManager(trace, seed=0), grid_of(K), 1)


def test_silent_nodes_stop_the_first_round_or_are_asked_again_when_connected() -> None:
    grid = grid_of(3)
    grid.silent = {node_id(2)}
    with pytest.raises(AvailabilityError) as err:
        run(FedAvg(), RandomAccessClientManager([0.5, 0.3, 0.2], seed=0), grid, 1, query_timeout=2)
    assert (
        f"expected answers to the partition-id query from 3 nodes, saw 2 within 2 s "
        f"(silent: [{node_id(2)}]); raise query_timeout"
    ) in str(err.value)
    wrapped = with_availability(FedAvg(), ConnectedClientManager(3, seed=0, min_clients=3))
    arrays = ArrayRecord([np.zeros(1)])
    wrapped.configure_train(1, arrays, ConfigRecord(), grid)
    grid.silent = set()
    wrapped.configure_train(2, arrays, ConfigRecord(), grid)
    assert wrapped.relayed == {1: [0, 1], 2: [0, 1, 2]}


def test_the_projects_strategies_send_only_to_the_nodes_they_select() -> None:
    """FedAvg(S) and rFedFair pick among the available nodes before training (as their
    legacy classes do): exactly the seeded subset / the draws by p_i get a train message;
    rFedFair takes m_i from the wrapper's one partition-id query (no query of its own)."""
    sized = client_app(with_query=False)
    sized.query(PARTITION_ACTION)(
        lambda msg, context: partition_id_query(msg, context, num_examples=8)
    )
    strategies = {
        "fedavg-s": message_api.FedAvgSampled(num_clients=K, lr=0.1, max_clients=2, seed=3),
        "rfedfair": message_api.RFedFair(alpha=0.5, clients_per_round=2, seed=3, lr_eta=0.01),
    }
    for name, strategy in strategies.items():
        grid = StubGrid(
            sized, {node_id(p): {"partition-id": p, "num-partitions": K} for p in range(K)}
        )
        oracle = BernoulliClientManager([1.0, 0.9, 0.8, 0.7, 0.6], seed=4)
        wrapped = with_availability(strategy, oracle)
        pid_of, left_out = {node_id(p): p for p in range(K)}, 0
        for r in range(1, 5):
            messages = wrapped.configure_train(r, ArrayRecord([np.zeros(2)]), ConfigRecord(), grid)
            trained = sorted(pid_of[m.metadata.dst_node_id] for m in messages)
            drawn = wrapped.relayed[r]
            if name == "fedavg-s":
                want = [drawn[k] for k in strategy.core.select(len(drawn), r)]
            else:
                want = sorted(strategy.state.multiplicity)
            assert trained == want, (name, r, trained, drawn)
            left_out += len(drawn) - len(trained)
        assert left_out > 0, f"{name} selected every available node"
        queries = [(t, n) for t, _, n in grid.sent if t != MessageType.TRAIN]
        assert sorted(queries) == sorted((PARTITION_QUERY, n) for n in pid_of), name


# --------------------------------------- failed rounds and NaN updates, any strategy (26)
def failing_app(*, nan_from: Iterable[int] = (), raise_from: Iterable[int] = ()) -> ClientApp:
    """Trains as :func:`client_app` (every array + 1), except that the partitions in
    ``nan_from`` return NaN arrays and those in ``raise_from`` raise (as a ClientApp whose
    ``to_xy`` was left out does)."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        pid = context.node_config["partition-id"]
        if pid in raise_from:
            raise AttributeError("module 'task' has no attribute 'to_xy'")
        arrays = msg.content["arrays"].to_numpy_ndarrays()
        arrays = [np.full_like(a, np.nan) if pid in nan_from else a + 1 for a in arrays]
        metrics = MetricRecord({"num-examples": 1, "train_loss": 1.0})
        return Message(
            RecordDict({"arrays": ArrayRecord(arrays), "metrics": metrics}), reply_to=msg
        )

    app.query(PARTITION_ACTION)(partition_id_query)
    return app


def grid_with(app: ClientApp, k: int = K) -> StubGrid:
    return StubGrid(app, {node_id(p): {"partition-id": p, "num-partitions": k} for p in range(k)})


ALWAYS = [1.0] * K  # every partition available in every round


def test_flowers_fedavg_with_a_client_error_every_round_stops_the_run(caplog) -> None:
    """Was: "Received 0 results and 5 failures" each round, an untrained model, success."""
    grid = grid_with(failing_app(raise_from=range(K)))
    with caplog.at_level(logging.WARNING, logger="flwr"), pytest.raises(FailedRoundsError) as err:
        run(FedAvg(fraction_evaluate=0.0), BernoulliClientManager(ALWAYS, seed=0), grid, 6)
    assert str(err.value).startswith("3 rounds in a row (1..3) trained nothing")
    first = f"first error (round 1): 'node {node_id(0)}: AttributeError(\"module"
    assert first in str(err.value) and "has no attribute" in str(err.value)
    for r in (1, 2):
        assert f"round {r}: no update aggregated: 5 of 5 selected clients failed" in caplog.text
    assert grid.nodes_of(MessageType.TRAIN, 4) == []  # stopped: round 4 never ran


def test_a_nan_update_is_refused_under_any_strategy(caplog) -> None:
    """Flower's FedAvg would average partition 0's NaN into the model."""
    grid = grid_with(failing_app(nan_from={0}))
    with caplog.at_level(logging.WARNING, logger="flwr"):
        _, result = run(FedAvg(fraction_evaluate=0.0), BernoulliClientManager(ALWAYS, 0), grid, 2)
    assert result.arrays.to_numpy_ndarrays()[0].tolist() == [2.0, 2.0]  # +1 a round
    assert (
        f"round 1: FedAvg refused node {node_id(0)}: non-finite update: array 0 (shape (2,)) "
        "holds 2 NaN or inf" in caplog.text
    )


def test_nan_from_every_node_stops_the_run_at_max_failed_rounds() -> None:
    grid = grid_with(failing_app(nan_from=range(K)))
    oracle = BernoulliClientManager(ALWAYS, seed=0)
    with pytest.raises(FailedRoundsError, match=r"1 rounds in a row \(1..1\).*non-finite update"):
        run(FedAvg(fraction_evaluate=0.0), oracle, grid, 4, max_failed_rounds=1)
    with pytest.raises(ValueError, match="max_failed_rounds: 0 is not allowed"):
        with_availability(FedAvg(), oracle, max_failed_rounds=0)


def test_a_strategy_with_its_own_guard_counts_its_rounds_itself() -> None:
    """The project's strategies screen and count their replies: their max_failed_rounds
    holds, not the wrapper's, and a round is counted once."""
    grid = grid_with(failing_app(raise_from=range(K)))
    strategy = message_api.FedAvg(fraction_evaluate=0.0, max_failed_rounds=2)
    oracle = BernoulliClientManager(ALWAYS, seed=0)
    with pytest.raises(FailedRoundsError, match=r"2 rounds in a row \(1..2\)"):
        run(strategy, oracle, grid, 6, max_failed_rounds=5)


def test_a_dp_wrapper_around_a_guarded_strategy_is_guarded_by_with_availability() -> None:
    """Flower's DP wrapper skips a round with an error reply before the project's
    strategy inside it sees the round: the availability wrapper counts it."""
    grid = grid_with(failing_app(raise_from=range(K)))
    inner = message_api.FedAvg(fraction_evaluate=0.0, max_failed_rounds=1)
    strategy = DifferentialPrivacyServerSideFixedClipping(inner, 0.0, 10.0, K)
    with pytest.raises(FailedRoundsError, match=r"2 rounds in a row \(1..2\).*to_xy"):
        run(strategy, BernoulliClientManager(ALWAYS, seed=0), grid, 6, max_failed_rounds=2)
