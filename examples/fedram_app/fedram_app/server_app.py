"""ServerApp: Fed-CVaR-Avg (a fedram-flwr Message-API strategy) under Bernoulli
availability (``with_availability``): each round trains exactly the nodes the oracle
makes available, a pure function of (seed, round)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from fedram_app.task import Net, accuracy, server_testset
from fedram_flwr.availability import BernoulliClientManager
from fedram_flwr.message_api import FedCVaRAvg, with_availability

app = ServerApp()


def availability(config: dict) -> list[float]:
    """p_k of each client: from ``availability-max`` (client 0) down to
    ``availability-min`` (the last), evenly spaced."""
    n = int(config["num-clients"])
    return np.linspace(config["availability-max"], config["availability-min"], n).tolist()


def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Centralised evaluation on the server's test set."""
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    loss, acc = accuracy(model, server_testset())
    return MetricRecord({"loss": loss, "accuracy": acc})


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run Fed-CVaR-Avg for ``num-server-rounds`` rounds under the oracle."""
    config = context.run_config
    oracle = BernoulliClientManager(availability(config), seed=int(config["seed"]))
    cvar = FedCVaRAvg(
        alpha=config["cvar-alpha"],
        gamma=config["cvar-gamma"],
        lr_t=config["lr-t"],
        fraction_evaluate=config["fraction-evaluate"],
    )
    strategy = with_availability(cvar, oracle)
    if config["track"]:  # each round to TensorBoard / MLflow / W&B (the `tracking` extra)
        from fedram_flwr.tracking.app import with_tracking

        strategy = with_tracking(
            strategy,
            str(config["track"]).split(","),
            name=f"fedram-app-seed{config['seed']}",
            group="fedram-app",
            params=dict(config),
            root=str(config["track-dir"]),
        )
    torch.manual_seed(int(config["seed"]))
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        num_rounds=int(config["num-server-rounds"]),
        evaluate_fn=global_evaluate,
    )
    evaluated = {r: dict(m) for r, m in result.evaluate_metrics_serverapp.items()}
    print(f"fedram-app: nodes per round {strategy.relayed}")
    print(f"fedram-app: last evaluation {evaluated[max(evaluated)]}")
    if config["result-file"]:
        summary = {
            "relayed": strategy.relayed,
            "evaluate": evaluated,
            "final": [a.tolist() for a in result.arrays.to_numpy_ndarrays()],
        }
        Path(str(config["result-file"])).write_text(json.dumps(summary, indent=1))
