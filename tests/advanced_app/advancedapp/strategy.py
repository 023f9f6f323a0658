"""advancedapp: a strategy with its own round loop, results file and checkpoints."""

import json
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg


class CustomFedAvg(FedAvg):
    """FedAvg with a learning-rate schedule, a results file and the best model saved."""

    def __init__(self, out_dir: str, lr_decay: float, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.out_dir = Path(out_dir)
        self.lr_decay = lr_decay
        self.best_loss = float("inf")

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ):
        """Decay the learning rate every round."""
        config["lr"] = config["lr"] * self.lr_decay ** (server_round - 1)
        return super().configure_train(server_round, arrays, config, grid)

    def start(
        self,
        grid,
        initial_arrays,
        num_rounds=3,
        timeout=3600,
        train_config=None,
        evaluate_config=None,
        evaluate_fn=None,
    ):
        """Run the rounds; write results.json every round and save each new best model."""
        self.summary()
        arrays, results = initial_arrays, []
        for current_round in range(1, num_rounds + 1):
            replies = grid.send_and_receive(
                messages=self.configure_train(
                    current_round, arrays, ConfigRecord(dict(train_config)), grid
                ),
                timeout=timeout,
            )
            agg_arrays, agg_metrics = self.aggregate_train(current_round, replies)
            if agg_arrays is not None:
                arrays = agg_arrays
            res = evaluate_fn(current_round, arrays)
            results.append({"round": current_round, "train": dict(agg_metrics or {}), **res})
            (self.out_dir / "results.json").write_text(json.dumps(results, indent=2))
            if res["loss"] < self.best_loss:
                self.best_loss = res["loss"]
                torch.save(
                    arrays.to_torch_state_dict(),
                    self.out_dir / f"model_state_round_{current_round}.pt",
                )
        return arrays
