"""Empirical-risk client: plain local mini-batch SGD (FedAvg's client)."""

from __future__ import annotations

import time

import numpy as np
import torch
from flwr.client import NumPyClient
from flwr.common import NDArrays, RecordDict, Scalar
from torch import nn

from fedram_flwr.models import get_weights, set_weights
from fedram_flwr.protocol import (
    BATCH_SIZE,
    LOCAL_EPOCHS,
    LR,
    NUM_EXAMPLES,
    PARTITION_ID,
    SERVER_ROUND,
    TRAIN_LOSS,
    TRAIN_SECONDS,
)
from fedram_flwr.training import client_rng, local_sgd


class ERMClient(NumPyClient):
    """Trains the received model for H local epochs (or ``local_steps`` steps) of SGD
    on its mean loss.

    Fit config: ``server-round`` (seeds the batch order from (seed, round, id)),
    optionally ``lr``, ``local-epochs``, ``batch-size`` overriding the defaults.
    ``drop_last``: ``training.drop_last`` (see ``local_sgd``). ``state`` is the client's
    persistent ``Context.state`` (Flower re-creates client objects; what must survive
    between rounds lives there). ``x``, ``y``: arrays, or tensors already on the model's
    device (:meth:`~fedram_flwr.experiment.Experiment.client_data`); ``model`` may be
    shared by clients that run one at a time (``fit`` loads the received weights first).
    """

    def __init__(
        self,
        *,
        partition_id: int,
        model: nn.Module,
        x: np.ndarray | torch.Tensor,
        y: np.ndarray | torch.Tensor,
        lr: float,
        local_epochs: int,
        batch_size: int,
        seed: int,
        local_steps: int | None = None,
        weight_decay: float = 0.0,
        drop_last: bool = False,
        state: RecordDict | None = None,
    ) -> None:
        self.partition_id = partition_id
        self.model = model
        self.x, self.y = x, y
        self.lr, self.local_epochs, self.batch_size = lr, local_epochs, batch_size
        self.local_steps, self.weight_decay = local_steps, weight_decay
        self.drop_last = drop_last
        self.seed = seed
        self.state = RecordDict() if state is None else state

    def get_properties(self, config: dict[str, Scalar]) -> dict[str, Scalar]:
        return {PARTITION_ID: self.partition_id, NUM_EXAMPLES: len(self.y)}

    def get_parameters(self, config: dict[str, Scalar]) -> NDArrays:
        return get_weights(self.model)

    def train(
        self, theta: NDArrays, config: dict[str, Scalar], batch_weight=None, grad_offset=None
    ) -> dict[str, Scalar]:
        """Load theta, run local SGD (``batch_weight``, ``grad_offset`` as in
        ``local_sgd``); return the fit metrics every client reports: partition id,
        ``train-loss`` and ``train-seconds`` (the local SGD alone, for benchmarks)."""
        set_weights(self.model, theta)
        start = time.perf_counter()
        loss = local_sgd(
            self.model,
            self.x,
            self.y,
            epochs=int(config.get(LOCAL_EPOCHS, self.local_epochs)),
            batch_size=int(config.get(BATCH_SIZE, self.batch_size)),
            lr=float(config.get(LR, self.lr)),
            rng=client_rng(self.seed, int(config.get(SERVER_ROUND, 0)), self.partition_id),
            batch_weight=batch_weight,
            steps=self.local_steps,
            weight_decay=self.weight_decay,
            grad_offset=grad_offset,
            drop_last=self.drop_last,
        )
        return {
            PARTITION_ID: self.partition_id,
            TRAIN_LOSS: loss,
            TRAIN_SECONDS: time.perf_counter() - start,
        }

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]):
        metrics = self.train(parameters, config)
        return get_weights(self.model), len(self.y), metrics
