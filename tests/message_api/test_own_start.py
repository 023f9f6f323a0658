"""``with_availability`` around a strategy that overrides ``start``: its own loop runs.

The strategy is the shape of Flower's advanced examples: Flower's FedAvg subclassed, a
learning-rate schedule in ``configure_train`` and its own ``start`` (a round loop that
writes a results file every round and saves each new best model). Wrapped, its loop,
files and schedule stay, and each round trains exactly the oracle's draw, over
``InProcessGrid`` (the Flower Simulation Engine's run is in tests/test_advanced_switch.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg

from fedram_flwr.availability import BernoulliClientManager, MarkovClientManager
from fedram_flwr.clients.wire import received
from fedram_flwr.engines import InProcessGrid
from fedram_flwr.message_api import FedCVaRAvg, partition_id_query, with_availability
from fedram_flwr.message_api.availability import STOOD_IN

K, ROUNDS = 4, 5


def recording_app(trained: list[tuple[int, int, float]]) -> ClientApp:
    """Adds 1 to every array; records (server round, partition id, lr) of each train."""
    app = ClientApp()
    app.query("partition_id")(partition_id_query)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        config = msg.content["config"]
        pid = int(context.node_config["partition-id"])
        trained.append((int(config["server-round"]), pid, float(config["lr"])))
        arrays = [a + 1.0 for a in received(msg, "test")[0]]  # the model, then t
        metrics = MetricRecord({"num-examples": 1, "train_loss": float(pid)})
        content = RecordDict({"arrays": ArrayRecord(arrays), "metrics": metrics})
        return Message(content, reply_to=msg)

    return app


class ScheduledFedAvg(FedAvg):
    """Flower's FedAvg with a halving lr and its own round loop (results file, best model)."""

    def __init__(self, out: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self.out = out

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ):
        config["lr"] = 0.8 * 0.5 ** (server_round - 1)  # the app's schedule
        return super().configure_train(server_round, arrays, config, grid)

    def start(self, grid, initial_arrays, num_rounds=3, timeout=3600):
        arrays, results, best = initial_arrays, [], -np.inf
        for server_round in range(1, num_rounds + 1):
            replies = grid.send_and_receive(
                self.configure_train(server_round, arrays, ConfigRecord(), grid), timeout=timeout
            )
            new, metrics = self.aggregate_train(server_round, replies)
            arrays = arrays if new is None else new
            score = float(arrays.to_numpy_ndarrays()[0].sum())
            results.append({"round": server_round, "score": score, "trained": new is not None})
            (self.out / "results.json").write_text(json.dumps(results))  # every round
            if new is not None and score > best:
                best = score
                np.save(self.out / f"best_model_round_{server_round}.npy", arrays["0"].numpy())
        return arrays


@pytest.mark.parametrize(
    "oracle",
    [
        BernoulliClientManager([0.9, 0.6, 0.3, 0.5], seed=3),
        MarkovClientManager(pi=[0.8, 0.5, 0.4, 0.6], lam=[0.3, 0.2, 0.5, 0.1], seed=1),
    ],
    ids=["bernoulli", "markov"],
)
def test_an_overridden_start_runs_its_own_loop_on_the_oracles_nodes(oracle, tmp_path: Path) -> None:
    trained: list[tuple[int, int, float]] = []
    strategy = with_availability(ScheduledFedAvg(tmp_path, fraction_evaluate=0.0), oracle)
    final = strategy.start(
        InProcessGrid(recording_app(trained), num_partitions=K),
        ArrayRecord([np.zeros(2)]),
        num_rounds=ROUNDS,
    )
    draws = {r: oracle.draw(r) for r in range(1, ROUNDS + 1)}
    assert strategy.relayed == draws
    by_round = {r: sorted(p for s, p, _ in trained if s == r) for r in range(1, ROUNDS + 1)}
    assert by_round == draws  # the nodes trained are the draws, round by round
    assert {lr for s, _, lr in trained if s == 2} == {0.4}  # the app's schedule reached them
    # its own loop's files: a results row per round, a checkpoint per round that trained
    results = json.loads((tmp_path / "results.json").read_text())
    assert [row["round"] for row in results] == list(range(1, ROUNDS + 1))
    with_nodes = [r for r, pids in draws.items() if pids]
    assert sorted(p.name for p in tmp_path.glob("best_model_round_*.npy")) == sorted(
        f"best_model_round_{r}.npy" for r in with_nodes
    )
    assert final.to_numpy_ndarrays()[0].tolist() == [len(with_nodes)] * 2  # +1 a round
    # the strategy is itself again after start: no stand-in left on the instance
    assert not set(STOOD_IN) & set(vars(strategy.strategy))


def test_our_strategy_under_the_wrapper_still_prepares_and_trains_the_draws() -> None:
    """A library strategy (its ``start`` prepares its state, then Flower's loop)."""
    trained: list[tuple[int, int, float]] = []
    app = recording_app(trained)
    oracle = BernoulliClientManager([0.9, 0.6, 0.3, 0.5], seed=3)
    cvar = FedCVaRAvg(alpha=0.5, gamma=0.1, lr_t=0.01, fraction_evaluate=0.0)
    strategy = with_availability(cvar, oracle)
    strategy.start(
        InProcessGrid(app, num_partitions=K),
        ArrayRecord([np.zeros(2)]),
        num_rounds=2,
        train_config=ConfigRecord({"lr": 0.1}),
    )
    assert strategy.relayed == {r: oracle.draw(r) for r in (1, 2)}
    assert sorted((s, p) for s, p, _ in trained) == sorted(
        (r, p) for r in (1, 2) for p in oracle.draw(r)
    )


def test_the_stand_ins_go_also_when_the_loop_raises(tmp_path: Path) -> None:
    class Broken(ScheduledFedAvg):
        def aggregate_train(self, server_round, replies):
            raise RuntimeError("the app's own error")

    oracle = BernoulliClientManager([1.0, 1.0, 1.0, 1.0], seed=0)
    strategy = with_availability(Broken(tmp_path, fraction_evaluate=0.0), oracle)
    with pytest.raises(RuntimeError, match="the app's own error"):
        strategy.start(
            InProcessGrid(recording_app([]), num_partitions=K), ArrayRecord([np.zeros(2)])
        )
    assert not set(STOOD_IN) & set(vars(strategy.strategy))
    assert strategy.own("aggregate_train").__func__ is Broken.aggregate_train
