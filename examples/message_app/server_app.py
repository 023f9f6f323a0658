"""ServerApp: Flower's FedAvg, evaluated on the server's test set and by the nodes."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from task import Net, load_data
from task import test as test_fn

app = ServerApp()


def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Centralised evaluation on the test set."""
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    loss, accuracy = test_fn(model, load_data(None, 0))
    return MetricRecord({"accuracy": accuracy, "loss": loss})


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""
    fraction_train: float = context.run_config["fraction-train"]
    fraction_evaluate: float = context.run_config["fraction-evaluate"]
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["lr"]

    torch.manual_seed(0)
    arrays = ArrayRecord(Net().state_dict())
    strategy = FedAvg(fraction_train=fraction_train, fraction_evaluate=fraction_evaluate)
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=global_evaluate,
    )
    torch.save(result.arrays.to_torch_state_dict(), "final_model.pt")
