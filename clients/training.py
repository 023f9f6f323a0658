"""Local mini-batch SGD shared by every client, legacy NumPyClient and Message-API block
alike (Fed-CVaR-Avg Alg. 1, lines 5-10): one loop (:func:`sgd_passes`) over passes of
mini-batches that come from the project's in-memory arrays or from a user's torch data
loader (:mod:`fedram_flwr.clients.batches`), and one client's training around it
(:class:`LocalTrainer`)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedram_flwr.clients.batched_round import joined_round
from fedram_flwr.clients.batches import (
    ClientData,
    OnePass,
    array_pass,
    batches_per_pass,
)
from fedram_flwr.clients.lr_schedule import scheduled_lr
from fedram_flwr.clients.models import (
    SeededDropout,
    module_list,
    parameter_list,
    seed_dropout,
    set_weights,
    train_mode,
)
from fedram_flwr.clients.optimizers import (
    Optimizer,
    OptimizerSpec,
    fitting,
    require_plain_sgd,
    set_lr,
)
from fedram_flwr.protocol import (
    LOCAL_EPOCHS,
    LR,
    PARTITION_ID,
    SERVER_ROUND,
    TRAIN_LOSS,
    TRAIN_SECONDS,
)
from fedram_flwr.rng import stream


def sgd_passes(
    model: nn.Module,
    one_pass: OnePass,
    *,
    epochs: int,
    lr: float,
    steps: int | None = None,
    batch_weight: Callable[[float], float] | None = None,
    weight_decay: float = 0.0,
    grad_offset: Sequence[torch.Tensor] | None = None,
    losses: list[float] | None = None,
    optimizer: Optimizer | None = None,
) -> tuple[float, int]:
    """``epochs`` passes of mini-batch SGD on the mean cross-entropy f_b of each batch; or,
    when ``steps`` is given, exactly ``steps`` steps (FedAR Sec. 6.1: K local steps),
    starting a new pass whenever one runs out.

    ``batch_weight(f_b)`` scales the gradient of each mini-batch (the CVaR client uses
    it for d G_i / d f_b, eq. 6); ``None`` is plain SGD. ``grad_offset`` (one tensor per
    parameter, moved to the parameters' device once) is added to every gradient before
    the step (SCAFFOLD's c - c_i); ``weight_decay`` is SGD's. The step is
    :func:`sgd_step`, or ``optimizer.step()`` when one is given (the app's,
    :mod:`fedram_flwr.clients.optimizers`; ``lr`` and ``weight_decay`` are its own then). Runs
    where the model and the batches are; the losses stay there until one host copy at
    the end (on a GPU: one sync per fit, not one per step).
    Returns the mean mini-batch loss of the last pass (of all ``steps`` steps) and the
    number of steps taken (K). ``losses``, when given, is extended with every step's
    mini-batch loss in step order (each as ``loss.item()`` gives it, from the same one
    host copy): CA-Fed's first-batch loss without a ``batch_weight`` (whose
    ``loss.item()`` and extra product per step cost ~25 us each).
    In a client call of a :class:`~fedram_flwr.clients.batched_round.BatchedRound`
    (``training.batched``) the steps run stacked with the round's other clients'.
    """
    if steps is None and epochs < 1:
        raise ValueError(f"local-epochs must be >= 1, got {epochs}")
    if (batch := joined_round()) is not None:  # training.batched: the round's clients stacked
        hooks = dict(batch_weight=batch_weight, grad_offset=grad_offset)
        settings = dict(epochs=epochs, lr=lr, steps=steps, weight_decay=weight_decay, **hooks)
        if (stacked := batch.sgd_passes(model, one_pass, optimizer, **settings)) is not None:
            values, last_pass, taken = stacked
            if losses is not None:
                losses += values
            return reported_loss(values, steps, last_pass), taken
    params = parameter_list(model)
    if grad_offset is not None:
        grad_offset = [o.to(p.device) for p, o in zip(params, grad_offset, strict=True)]
    train_mode(model)
    step_losses: list[torch.Tensor] = []
    taken = 0
    for _ in range(epochs) if steps is None else itertools.count():
        pass_losses: list[torch.Tensor] = []
        # With ``steps``, no batch beyond the last step is gathered (or asked of a loader).
        batches = one_pass() if steps is None else itertools.islice(one_pass(), steps - taken)
        for x, y in batches:
            loss = F.cross_entropy(model(x), y)
            pass_losses.append(loss.detach())
            for p in params:
                p.grad = None
            (loss if batch_weight is None else loss * batch_weight(loss.item())).backward()
            if grad_offset is not None:
                for p, offset in zip(params, grad_offset, strict=True):
                    p.grad.add_(offset)
            if optimizer is None:
                sgd_step(params, lr, weight_decay)
            else:
                optimizer.step()
            taken += 1
        if not pass_losses:
            raise ValueError("local training: a pass over the client's data gave no mini-batch")
        step_losses += pass_losses
        if taken == steps:
            break
    # One host copy of the float32 losses, averaged in float64 as each loss.item() was
    # (on the CPU each loss.item() itself: there is nothing to copy, and it costs less).
    on_cpu = step_losses[0].device.type == "cpu"
    values = [v.item() for v in step_losses] if on_cpu else torch.stack(step_losses).tolist()
    if losses is not None:
        losses += values
    return reported_loss(values, steps, len(pass_losses)), taken


def reported_loss(values: Sequence[float], steps: int | None, last_pass: int) -> float:
    """The ``train-loss`` of a round whose steps' losses are ``values``: their mean over
    all ``steps`` steps, or, by epochs (``steps`` None), over the last pass's
    ``last_pass`` steps."""
    return mean_of(values if steps is not None else values[-last_pass:])


def mean_of(values: Sequence[float]) -> float:
    """``float(np.mean(values))`` of a non-empty list of floats, the same float (numpy's
    float64 sum, divided by the count), without ``np.mean``'s ~5 us of checks."""
    return float(np.add.reduce(np.array(values, dtype=np.float64))) / len(values)


def local_sgd(
    model: nn.Module,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    rng: np.random.Generator,
    batch_weight: Callable[[float], float] | None = None,
    steps: int | None = None,
    weight_decay: float = 0.0,
    grad_offset: Sequence[torch.Tensor] | None = None,
    drop_last: bool = False,
) -> float:
    """:func:`sgd_passes` over in-memory (x, y) (arrays, or tensors the caller keeps on
    the model's device; moved there otherwise), batches drawn from ``rng`` only, so a
    client's update is a pure function of its inputs. ``drop_last``
    (``training.drop_last``): the last, smaller mini-batch of each pass is dropped instead
    of taken as a step of its own (:func:`batches_per_pass`). Returns the mean mini-batch
    loss of the last epoch (of all ``steps`` steps).
    """
    device = next(model.parameters()).device
    loss, _ = sgd_passes(
        model,
        array_pass(x, y, batch_size, rng, drop_last, device),
        epochs=epochs,
        lr=lr,
        steps=steps,
        batch_weight=batch_weight,
        weight_decay=weight_decay,
        grad_offset=grad_offset,
    )
    return loss


@torch.no_grad()
def sgd_step(params: Sequence[torch.Tensor], lr: float, weight_decay: float) -> None:
    """p <- p - lr (grad + weight_decay p): torch.optim.SGD's single-tensor update, op for
    op (bit-identical), written out because importing torch.optim pulls in torch._dynamo,
    ~4 s of start-up in every fresh process (the Deployment Engine starts one per message).
    """
    for p in params:
        grad = p.grad if weight_decay == 0 else p.grad.add(p, alpha=weight_decay)
        p.add_(grad, alpha=-lr)


def num_local_steps(
    num_examples: int, batch_size: int, epochs: int, steps: int | None, drop_last: bool = False
) -> int:
    """How many SGD steps ``local_sgd`` takes (SCAFFOLD's K)."""
    if steps is not None:
        return steps
    return epochs * batches_per_pass(num_examples, batch_size, drop_last)


@dataclass(frozen=True)
class LocalRun:
    """What one round of local training did: the fit metrics every client reports
    (partition id, ``train-loss``, ``train-seconds``: the local SGD alone), the number of
    SGD steps K and the step size eta_l it took (SCAFFOLD's option II needs both)."""

    metrics: dict[str, Any]
    steps: int
    lr: float


@dataclass
class LocalTrainer:
    """One client's local training: its torch model, its data, its default step size,
    epochs (or ``local_steps`` steps), weight decay and step-size schedule
    (``training.lr_schedule``, :func:`~fedram_flwr.clients.lr_schedule.scheduled_lr`, on the
    round's ``server-round``). The round's train config may override ``lr`` (FedAR's eta_t,
    or a Flower app's ``lr``) and ``local-epochs``. ``optimizer``: the app's own (an
    instance or a factory, :mod:`fedram_flwr.clients.optimizers`) instead of plain SGD; ``block``
    names the caller in its errors."""

    model: nn.Module
    data: ClientData
    partition_id: int
    lr: float | None
    local_epochs: int = 1
    local_steps: int | None = None
    weight_decay: float = 0.0
    lr_schedule: str = "constant"
    optimizer: OptimizerSpec | None = None
    block: str = "local training"

    @property
    def num_examples(self) -> int:
        return len(self.data)

    def train(
        self,
        theta: Sequence[np.ndarray],
        config: Mapping[str, Any],
        batch_weight: Callable[[float], float] | None = None,
        grad_offset: Sequence[torch.Tensor] | None = None,
        losses: list[float] | None = None,
        extra_groups: Sequence[dict[str, Any]] = (),
        plain_sgd: str | None = None,
    ) -> LocalRun:
        """Load theta into the model and run :func:`sgd_passes` on the round's passes
        (``losses``: extended with every step's loss, see there). With an ``optimizer``,
        ``extra_groups`` (a jointly trained scalar's) join it for this fit, and
        ``plain_sgd`` (what relies on it) refuses any but plain SGD."""
        set_weights(self.model, theta)
        lr = self.round_lr(config)
        hooks = dict(batch_weight=batch_weight, grad_offset=grad_offset, losses=losses)
        if self.optimizer is None:
            return self.passes(config, lr, **hooks)
        with fitting(self.optimizer, self.model, extra_groups, self.block) as optimizer:
            lr = set_lr(optimizer, lr, len(optimizer.param_groups) - len(extra_groups))
            if plain_sgd is not None:
                require_plain_sgd(optimizer, self.block, plain_sgd)
            return self.passes(config, lr, optimizer=optimizer, **hooks)

    def round_lr(self, config: Mapping[str, Any]) -> float | None:
        """This round's step size: the train config's ``lr`` (else the default) under the
        schedule; None when only the app's optimizer has one."""
        given = config.get(LR, self.lr)
        if given is None and self.optimizer is None:
            raise ValueError(
                f"no learning rate: the train config has no '{LR}' and none was given: "
                f"pass lr=... or send '{LR}' in the strategy's train config"
            )
        return None if given is None else scheduled_lr(float(given), self.lr_schedule, config)

    def round_epochs(self, config: Mapping[str, Any]) -> int:
        """This round's H: the train config's ``local-epochs``, else the default."""
        return int(config.get(LOCAL_EPOCHS, self.local_epochs))

    def run_of(self, loss: float, steps: int, lr: float, seconds: float) -> LocalRun:
        """The :class:`LocalRun` of a round that took ``steps`` steps at ``lr`` with mean
        loss ``loss`` in ``seconds``."""
        metrics = {PARTITION_ID: self.partition_id, TRAIN_LOSS: loss, TRAIN_SECONDS: seconds}
        return LocalRun(metrics, steps, lr)

    def passes(self, config: Mapping[str, Any], lr: float, **hooks: Any) -> LocalRun:
        """:func:`sgd_passes` over the round's passes at step size ``lr`` with ``hooks``
        (``batch_weight``, ``grad_offset``, ``losses``, ``optimizer``); its metrics."""
        if any(isinstance(m, SeededDropout) for m in module_list(self.model)):
            # Masks from the (seed, round, client) stream, not from the shared model's past.
            seed = getattr(self.data, "seed", 0)
            rnd = int(config.get(SERVER_ROUND, 0))
            seed_dropout(self.model, stream("dropout-masks", seed, rnd, self.partition_id))
        start = time.perf_counter()
        loss, steps = sgd_passes(
            self.model,
            self.data.passes(config),
            epochs=self.round_epochs(config),
            lr=lr,
            steps=self.local_steps,
            weight_decay=self.weight_decay,
            **hooks,
        )
        return self.run_of(loss, steps, lr, time.perf_counter() - start)
