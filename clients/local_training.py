"""A train block's round in the shape of a Flower app's own training.

The ``.local(...)`` form of every block of :mod:`fedram_flwr.clients.train_blocks`: the
handler keeps its own lines (loading the model, restoring what it keeps, its ``train``
call and reply), and the block trains the model as the handler prepared it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from flwr.app import Context, Message, RecordDict
from torch import nn

from fedram_flwr.clients.batches import Batch, LoaderData
from fedram_flwr.clients.erm import FitResult
from fedram_flwr.clients.optimizers import OptimizerSpec
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.clients.wire import partition_id
from fedram_flwr.protocol import TRAIN_LOSS


class RoundFit(Protocol):
    """What :class:`LocalTraining` asks of its objective (a train block)."""

    block: str

    def fit(
        self, msg: Message, context: Context, trainer: LocalTrainer, *, load: bool = True
    ) -> tuple[FitResult, dict[str, Any]]:
        """Check the message and run the local fit with ``trainer``."""

    def answer(
        self,
        msg: Message,
        fit: FitResult,
        config: Any,
        content: RecordDict | None = None,
    ) -> Message:
        """Build the checked reply to ``msg``."""


@dataclass
class LocalTraining:
    """One round of an objective in the shape of a Flower app's own training.

    So a handler keeps its lines: ``train(model, trainloader, epochs, lr, device)`` has
    the signature of Flower's quickstart ``train`` function and returns the train loss;
    ``reply(content)`` answers the message with the app's reply content, the objective's
    arrays (t, eta or the control after the model's) and metrics put in. Made by
    :meth:`~fedram_flwr.clients.train_blocks.Objective.local`, whose arguments its fields are. ::

        local = train_cvar.local(msg, context, optimizer=..., to_xy=...)
        train_loss = local.train(model, trainloader, epochs, lr, device)
        ...  # the app's own reply content
        return local.reply(content)
    """

    objective: RoundFit
    msg: Message
    context: Context
    optimizer: OptimizerSpec | None = None
    to_xy: Callable[[Any], Batch] | None = None
    steps: int | None = None
    weight_decay: float = 0.0
    done: tuple[FitResult, dict[str, Any]] | None = None
    load: bool = False

    def train(
        self,
        model: nn.Module,
        trainloader: Iterable[Any],
        epochs: int = 1,
        lr: float | None = None,
        device: torch.device | str | None = None,
    ) -> float:
        """Train ``model`` on ``trainloader`` as the handler prepared it.

        The block loads nothing into ``model`` (the handler's own
        ``model.load_state_dict(msg.content["arrays"].to_torch_state_dict())`` does, and
        what it restores after, a personal layer from ``context.state``, stays); it takes
        t, eta or the control from the message. Arguments as for calling the block
        (:meth:`~fedram_flwr.clients.train_blocks.Objective.__call__`).

        Returns
        -------
        float
            ``train-loss``: the mean mini-batch loss of the last local epoch.
        """
        device = device or next(model.parameters()).device
        data = LoaderData(trainloader, to_xy=self.to_xy, device=device)
        block, pid = self.objective.block, partition_id(self.context)
        trainer = LocalTrainer(
            model, data, pid, lr, epochs, self.steps, self.weight_decay,
            optimizer=self.optimizer, block=block,
        )  # fmt: skip
        self.done = self.objective.fit(self.msg, self.context, trainer, load=self.load)
        return float(self.done[0][2][TRAIN_LOSS])

    def reply(self, content: RecordDict | None = None) -> Message:
        """Return the reply Message: ``content`` with this round's arrays and metrics.

        Parameters
        ----------
        content : RecordDict, optional
            The app's own reply records, or none.

        Raises
        ------
        ValueError
            Before :meth:`train`.
        """
        if self.done is None:
            raise ValueError(
                f"{self.objective.block}: reply() before train(): call "
                ".train(model, trainloader, epochs, lr, device) first"
            )
        return self.objective.answer(self.msg, *self.done, content)
