"""A node's side of a scenario: its data, its model and its client (the algorithm's local
objective), without the server side (no strategy, no algorithm registry): what the
project's ClientApp (:mod:`fedram_flwr.clients.app`) builds in every fresh process.
:class:`fedram_flwr.engines.experiment.Experiment` adds the server side to it.

The data depends on the oracle (the least available clients hold the rare patterns),
so a node reads the oracle specs (:mod:`fedram_flwr.availability.specs`), nothing of the
registry; its client's objective comes from the client side
(:func:`fedram_flwr.clients.train_blocks.objective_of`).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import torch
from flwr.client import NumPyClient
from flwr.common import RecordDict
from torch import nn

from fedram_flwr.availability.specs import oracle_params, oracle_spec
from fedram_flwr.clients.batches import ArrayData
from fedram_flwr.clients.models import build_model, fix_tensors, on_device, resolve_device
from fedram_flwr.clients.train_blocks import objective_of
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.data import FederatedData, load_federated_data
from fedram_flwr.data.federated import row_views
from fedram_flwr.scenario.config import Scenario


def rare_clients(scenario: Scenario, seed: int) -> tuple[int, ...]:
    """The (100 - M)% least available clients, who hold the rare patterns (Sec. 4)."""
    return oracle_spec(scenario).rare_clients(oracle_params(scenario), scenario, seed)


class NodeExperiment:
    """Data, model and clients of ``scenario`` with ``seed``: a node's side of it."""

    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.scenario = scenario
        self.seed = seed

    @cached_property
    def rare_clients(self) -> tuple[int, ...]:
        return rare_clients(self.scenario, self.seed)

    @cached_property
    def data(self) -> FederatedData:
        return load_federated_data(self.scenario.data, self.rare_clients, self.seed)

    @cached_property
    def device(self) -> torch.device:
        """Where clients train and the server evaluates (``training.device``)."""
        return resolve_device(self.scenario.training.device)

    def new_model(self) -> nn.Module:
        """A fresh model with the seeded initial weights, on :attr:`device`."""
        d = self.data
        model = build_model(self.scenario.model.name, d.input_shape, d.num_classes, self.seed)
        return model.to(self.device)

    @cached_property
    def _shared_model(self) -> tuple[nn.Module, list[torch.Tensor], list[torch.Tensor]]:
        """(the model, its state tensors, copies of their initial values): the state
        tensors stay the model's (everything writes them in place), so they are
        listed once instead of by a ``state_dict()`` traversal per client
        (:func:`~fedram_flwr.clients.models.fix_tensors`, which local training reads too)."""
        model = self.new_model()
        state = fix_tensors(model).state
        return model, state, [v.clone() for v in state]

    def client_model(self) -> nn.Module:
        """The one model object the clients built here share (a process runs one client
        at a time; each loads the received weights before it trains), reset to the
        seeded initial weights, as :meth:`new_model` would build it, at a copy's cost
        (into the detached state tensors: no autograd history, no ``no_grad`` needed)."""
        model, state, initial = self._shared_model
        for v, w in zip(state, initial):
            v.copy_(w)
        return model

    def client_data(self, partition_id: int) -> tuple[np.ndarray | torch.Tensor, ...]:
        """Client ``partition_id``'s (x, y): row views of one tensor per set
        (:attr:`_row_tensors`: on the CPU they share the arrays' memory; on a GPU the
        set is copied there once), or, for data not packed in one array, the arrays on
        the CPU and tensors copied once to the device."""
        if (rows := self._row_tensors) is not None:
            if partition_id not in self._device_data:  # the views, made once
                (x, y), (start, stop) = rows[0], rows[1][partition_id]
                self._device_data[partition_id] = (x[start:stop], y[start:stop])
            return self._device_data[partition_id]
        d = self.data
        if self.device.type == "cpu":
            return d.client_x[partition_id], d.client_y[partition_id]
        if partition_id not in self._device_data:
            self._device_data[partition_id] = tuple(
                on_device(a, self.device)
                for a in (d.client_x[partition_id], d.client_y[partition_id])
            )
        return self._device_data[partition_id]

    @cached_property
    def _device_data(self) -> dict[int, tuple[torch.Tensor, ...]]:
        return {}

    @cached_property
    def _row_tensors(self) -> tuple[tuple[torch.Tensor, ...], list[tuple[int, int]]] | None:
        """(x, y of all clients as tensors on :attr:`device`, each client's rows there)
        when the data keep every client's rows in one array per set
        (:func:`~fedram_flwr.data.federated.packed_rows`); None otherwise. Every client's
        batches are then rows of one tensor, which stacked local SGD gathers with one call
        for a whole round (:mod:`fedram_flwr.clients.batched`)."""
        d = self.data
        xs, ys = row_views(d.client_x), row_views(d.client_y)
        if xs is None or ys is None or xs[1] != ys[1]:
            return None
        spans = [(at, at + len(y)) for at, y in zip(xs[1], d.client_y)]
        return (on_device(xs[0], self.device), on_device(ys[0], self.device)), spans

    def trainer(self, partition_id: int, model: nn.Module | None = None) -> LocalTrainer:
        """Client ``partition_id``'s local training on ``model`` (default:
        :meth:`client_model`): what its client's (:meth:`client`) ``trainer`` is, its
        data and training settings, without building the client."""
        t, rows = self.scenario.training, self._row_tensors
        x, y = self.client_data(partition_id)
        data = ArrayData(
            x,
            y,
            batch_size=t.batch_size,
            seed=self.seed,
            partition_id=partition_id,
            drop_last=t.drop_last,
            device=self.device,
            rows_of=None if rows is None else (*rows[0], rows[1][partition_id][0]),
        )
        return LocalTrainer(
            self.client_model() if model is None else model,
            data,
            partition_id,
            t.lr,
            t.local_epochs,
            t.local_steps,
            t.weight_decay,
            t.lr_schedule,
        )

    def client(self, partition_id: int, state: RecordDict | None = None) -> NumPyClient:
        """Client ``partition_id``; ``state`` is its ``Context.state`` (kept across rounds)."""
        d, t = self.data, self.scenario.training
        if not 0 <= partition_id < len(d.client_y):
            raise ValueError(
                f"partition id {partition_id} is outside 0..{len(d.client_y) - 1} "
                f"(data.num_clients = {len(d.client_y)})"
            )
        x, y = self.client_data(partition_id)
        return objective_of(self.scenario.algorithm.name).client(
            partition_id=partition_id,
            model=self.client_model(),
            x=x,
            y=y,
            lr=t.lr,
            local_epochs=t.local_epochs,
            batch_size=t.batch_size,
            seed=self.seed,
            local_steps=t.local_steps,
            weight_decay=t.weight_decay,
            drop_last=t.drop_last,
            state=state,
            lr_schedule=t.lr_schedule,
        )
