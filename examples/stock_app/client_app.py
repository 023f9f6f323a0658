"""ClientApp: local mini-batch SGD on the client's own data."""

from __future__ import annotations

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.common import Context
from task import accuracy, load_data, loss_and_grad


class FlowerClient(NumPyClient):
    def __init__(self, partition_id: int, lr: float, epochs: int) -> None:
        self.partition_id = partition_id
        self.x, self.y = load_data(partition_id)
        self.lr, self.epochs = lr, epochs

    def fit(self, parameters, config):
        w = parameters[0].copy()
        rng = np.random.default_rng(self.partition_id)
        for _ in range(self.epochs):
            for batch in np.array_split(rng.permutation(len(self.y)), 10):
                loss, grad = loss_and_grad(w, self.x[batch], self.y[batch])
                w -= self.lr * grad
        return [w], len(self.y), {"train-loss": loss}

    def evaluate(self, parameters, config):
        loss, _ = loss_and_grad(parameters[0], self.x, self.y)
        return loss, len(self.y), {"accuracy": accuracy(parameters[0], self.x, self.y)}


def client_fn(context: Context):
    return FlowerClient(
        partition_id=int(context.node_config["partition-id"]),
        lr=float(context.run_config["lr"]),
        epochs=int(context.run_config["local-epochs"]),
    ).to_client()


app = ClientApp(client_fn=client_fn)
