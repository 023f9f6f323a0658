"""advancedapp: a Flower / PyTorch app."""

from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from advancedapp.strategy import CustomFedAvg
from advancedapp.task import Net, load_data, test

# Create ServerApp
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Main entry point for the ServerApp."""
    num_rounds = context.run_config["num-server-rounds"]
    out_dir = Path(context.run_config["out-dir"])
    out_dir.mkdir(parents=True, exist_ok=True)

    # Initialize the strategy
    strategy = CustomFedAvg(
        out_dir=str(out_dir),
        lr_decay=context.run_config["lr-decay"],
        fraction_train=context.run_config["fraction-train"],
        fraction_evaluate=context.run_config["fraction-evaluate"],
    )

    # Start the strategy's own loop
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        train_config=ConfigRecord({"lr": context.run_config["lr"]}),
        num_rounds=num_rounds,
        evaluate_fn=global_evaluate,
    )


def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Evaluate the global model on central data."""
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    loss, accuracy = test(model, load_data(99, 1, 16)[1], "cpu")
    return MetricRecord({"loss": loss, "accuracy": accuracy})
