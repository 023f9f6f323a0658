"""Empirical-risk client: plain local mini-batch SGD (FedAvg's client).

Every client of this package is a legacy NumPyClient over one shared local fit: a
function ``fit_*(trainer, parameters, config, state)`` that returns Flower's fit triple
(arrays, num-examples, metrics). The Message-API building blocks
(:mod:`fedram_flwr.clients.message`) call the same functions with a
:class:`~fedram_flwr.clients.training.LocalTrainer` over the user's own model and data loader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from flwr.client import NumPyClient
from flwr.common import (
    ArrayRecord,
    Code,
    FitRes,
    NDArrays,
    Parameters,
    RecordDict,
    Scalar,
    Status,
)
from torch import nn

from fedram_flwr.clients.batches import ArrayData
from fedram_flwr.clients.models import get_weights, parameter_list
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.protocol import NUM_EXAMPLES, PARTITION_ID, npy_bytes

PERSONAL = "personal-layers"
"""``Context.state`` record (never on the wire): a client's own values of its ``personal``
state_dict keys."""

FitResult = tuple[NDArrays, int, dict[str, Scalar]]
"""Flower's fit triple: the arrays sent back, m_i and the fit metrics."""

LocalFit = Callable[[LocalTrainer, NDArrays, Mapping[str, Any], RecordDict], FitResult]
"""One local objective: (trainer, received arrays, train config, Context.state) -> fit."""


class ArrayParameters(Parameters):
    """Flower ``Parameters`` whose arrays are still in this process.

    An in-process engine's replies: the server reads the arrays themselves
    (:func:`~fedram_flwr.protocol.parameter_arrays` copies them), and the ``.npy`` bytes
    (``tensors``, the protocol's codec) are made only when something reads them, once.

    Parameters
    ----------
    arrays : list of np.ndarray
        The arrays, in order; not copied (the owner does not write them again).
    """

    def __init__(self, arrays: NDArrays) -> None:
        self.arrays = list(arrays)
        self.tensor_type = "numpy.ndarray"
        self._tensors: list[bytes] | None = None

    @property
    def tensors(self) -> list[bytes]:  # type: ignore[override]
        """The arrays' ``.npy`` bytes, made at the first read."""
        if self._tensors is None:
            self._tensors = [npy_bytes(a) for a in self.arrays]
        return self._tensors

    @tensors.setter
    def tensors(self, value: list[bytes]) -> None:
        raise AttributeError("ArrayParameters are read-only: build Parameters(...) instead")


def fit_res(result: FitResult, encode: bool = True) -> FitRes:
    """Return Flower's ``FitRes`` of a fit triple, as ``NumPyClient.to_client()`` makes it.

    The same ``.npy`` bytes, by the protocol's codec (~10x cheaper for a small model).

    Parameters
    ----------
    result : FitResult
        The arrays, m_i and the fit metrics.
    encode : bool
        Encode the arrays now; False: keep them (:class:`ArrayParameters`, for a server
        in this process: arrays the caller does not write again).

    Returns
    -------
    flwr.common.FitRes
        Status OK, the arrays as ``Parameters``, ``num_examples`` and ``metrics``.
    """
    arrays, num_examples, metrics = result
    return FitRes(
        status=Status(code=Code.OK, message="Success"),
        parameters=(
            Parameters([npy_bytes(a) for a in arrays], "numpy.ndarray")
            if encode
            else ArrayParameters(arrays)
        ),
        num_examples=num_examples,
        metrics=metrics,
    )


def fit_erm(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Train the received model by local SGD on the mean loss (CA-Fed eq. 2).

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings.
    parameters : NDArrays
        The received model's arrays.
    config : Mapping[str, Any]
        The round's train config (``server-round``, optional ``lr``, ``local-epochs``).
    state : RecordDict
        The client's persistent ``Context.state`` (unused).

    Returns
    -------
    FitResult
        Flower's fit triple: the trained model's arrays, m_i (the client's number of examples) and
        the fit metrics (``train-loss``).
    """
    run = trainer.train(parameters, config)
    return get_weights(trainer.model), trainer.num_examples, run.metrics


class ERMClient(NumPyClient):
    """FedAvg's legacy NumPyClient: local SGD on the client's mean loss.

    Trains the received model for H local epochs (or ``local_steps`` steps) of SGD on
    its mean loss (:func:`fit_erm`). Fit config: ``server-round`` (seeds the batch order
    from (seed, round, id)), optionally ``lr``, ``local-epochs``, ``batch-size``
    overriding the defaults. Subclasses set ``local_fit``, their local objective.

    Parameters
    ----------
    partition_id : int
        The client's partition id, in 0..K-1.
    model : nn.Module
        The torch model; may be shared by clients that run one at a time (``fit`` loads
        the received weights first).
    x, y : np.ndarray or torch.Tensor
        The client's inputs and labels: arrays, or tensors already on the model's device
        (:meth:`~fedram_flwr.clients.node.NodeExperiment.client_data`).
    lr : float
        Default step size, > 0.
    local_epochs : int
        Default H, passes over the data per round, >= 1.
    batch_size : int
        Examples per mini-batch, >= 1.
    seed : int
        The scenario seed the batch order is drawn with.
    local_steps : int, optional
        Exactly this many SGD steps per round (>= 1) instead of ``local_epochs``.
    weight_decay : float
        SGD's L2 weight decay, >= 0.
    drop_last : bool
        ``training.drop_last``: floor(n / B) full batches per pass, not ceil(n / B) (see
        ``local_sgd``, :func:`~fedram_flwr.clients.batches.batches_per_pass`).
    state : RecordDict, optional
        The client's persistent ``Context.state`` (Flower re-creates client objects;
        what must survive between rounds lives there); None: a fresh one.
    lr_schedule : str
        ``training.lr_schedule`` (see :mod:`fedram_flwr.clients.lr_schedule`).
    personal : tuple of str
        state_dict keys the client keeps its own (a personal head): ``fit`` puts the
        values it kept in ``state`` (record :data:`PERSONAL`) over the received ones
        before training, and keeps the trained ones there after; the reply still carries
        every array, in order (the legacy wire is positional). Default: none.
    """

    local_fit: LocalFit = staticmethod(fit_erm)

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
        lr_schedule: str = "constant",
        personal: tuple[str, ...] = (),
    ) -> None:
        self.partition_id = partition_id
        self.model = model
        self.x, self.y = x, y
        self.lr, self.local_epochs, self.batch_size = lr, local_epochs, batch_size
        self.local_steps, self.weight_decay = local_steps, weight_decay
        self.drop_last, self.lr_schedule = drop_last, lr_schedule
        self.seed = seed
        self.state = RecordDict() if state is None else state
        names = list(model.state_dict()) if personal else []  # a client is built per call:
        if unknown := [k for k in personal if k not in names]:  # no traversal without keys
            raise ValueError(f"personal: {unknown} are not keys of the model's state_dict {names}")
        self.personal = tuple(personal)

    @property
    def trainer(self) -> LocalTrainer:
        """The client's local training, on its arrays in the seeded batch order."""
        data = ArrayData(
            self.x,
            self.y,
            batch_size=self.batch_size,
            seed=self.seed,
            partition_id=self.partition_id,
            drop_last=self.drop_last,
            device=parameter_list(self.model)[0].device,
        )
        return LocalTrainer(
            self.model,
            data,
            self.partition_id,
            self.lr,
            self.local_epochs,
            self.local_steps,
            self.weight_decay,
            self.lr_schedule,
        )

    def get_properties(self, config: dict[str, Scalar]) -> dict[str, Scalar]:
        """Return ``partition-id`` and ``num-examples`` (m_i); ``config`` is unused."""
        return {PARTITION_ID: self.partition_id, NUM_EXAMPLES: len(self.y)}

    def get_parameters(self, config: dict[str, Scalar]) -> NDArrays:
        """Return the model's current arrays; ``config`` is unused."""
        return get_weights(self.model)

    def fit(self, parameters: NDArrays, config: dict[str, Scalar]) -> FitResult:
        """Run this client's ``local_fit`` on the received arrays and train config.

        Returns
        -------
        FitResult
            Flower's fit triple: the arrays sent back, m_i and the fit metrics.
        """
        if not self.personal:
            return self.local_fit(self.trainer, parameters, config, self.state)
        names, kept = list(self.model.state_dict()), self.state.get(PERSONAL)
        parameters = list(parameters)
        for key in self.personal if kept is not None else ():
            parameters[names.index(key)] = kept[key].numpy()
        fit = self.local_fit(self.trainer, parameters, config, self.state)
        state = self.model.state_dict()
        self.state[PERSONAL] = ArrayRecord({k: state[k].detach().cpu() for k in self.personal})
        return fit
