"""Local mini-batch SGD shared by every client, legacy NumPyClient and Message-API block
alike (Fed-CVaR-Avg Alg. 1, lines 5-10): one loop (:func:`sgd_passes`) over passes of
mini-batches that come from the project's in-memory arrays (:class:`ArrayData`, batch order
seeded from (seed, round, id)) or from a user's torch data loader (:class:`LoaderData`),
and one client's training around it (:class:`LocalTrainer`)."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedram_flwr.lr_schedule import scheduled_lr
from fedram_flwr.models import SeededDropout, on_device, seed_dropout, set_weights
from fedram_flwr.optimizers import Optimizer, OptimizerSpec, fitting, require_plain_sgd, set_lr
from fedram_flwr.protocol import (
    BATCH_SIZE,
    LOCAL_EPOCHS,
    LR,
    PARTITION_ID,
    SERVER_ROUND,
    TRAIN_LOSS,
    TRAIN_SECONDS,
)
from fedram_flwr.rng import stream

Batch = tuple[torch.Tensor, torch.Tensor]
"""One mini-batch: (inputs, integer labels)."""

OnePass = Callable[[], Iterable[Batch]]
"""Each call starts one pass (epoch) over a client's data."""


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
    :mod:`fedram_flwr.optimizers`; ``lr`` and ``weight_decay`` are its own then). Runs
    where the model and the batches are; the losses stay there until one host copy at
    the end (on a GPU: one sync per fit, not one per step).
    Returns the mean mini-batch loss of the last pass (of all ``steps`` steps) and the
    number of steps taken (K). ``losses``, when given, is extended with every step's
    mini-batch loss in step order (each as ``loss.item()`` gives it, from the same one
    host copy): CA-Fed's first-batch loss without a ``batch_weight`` (whose
    ``loss.item()`` and extra product per step cost ~25 us each).
    """
    if steps is None and epochs < 1:
        raise ValueError(f"local-epochs must be >= 1, got {epochs}")
    params = list(model.parameters())
    if grad_offset is not None:
        grad_offset = [o.to(p.device) for p, o in zip(params, grad_offset, strict=True)]
    model.train()
    step_losses: list[torch.Tensor] = []
    taken = 0
    for _ in range(epochs) if steps is None else itertools.count():
        pass_losses: list[torch.Tensor] = []
        for x, y in one_pass():
            if taken == steps:
                break
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
    # One host copy of the float32 losses, averaged in float64 as each loss.item() was.
    values = torch.stack(step_losses).cpu().tolist()
    if losses is not None:
        losses += values
    return float(np.mean(values if steps is not None else values[-len(pass_losses) :])), taken


def array_pass(
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    batch_size: int,
    rng: np.random.Generator,
    drop_last: bool,
    device: torch.device | str | None = None,
) -> OnePass:
    """Passes over in-memory (x, y), arrays or tensors, kept on ``device`` (default:
    where they are; an array shares its memory on the CPU): each pass a fresh permutation
    drawn from ``rng`` and copied there, cut into ``batches_per_pass`` mini-batches of
    ``batch_size``, gathered by ``index_select``."""
    where = None if device is None else torch.device(device)
    xt, yt = (torch.as_tensor(a) if where is None else on_device(a, where) for a in (x, y))
    per_pass = batches_per_pass(len(yt), batch_size, drop_last)

    def one_pass() -> Iterable[Batch]:
        order = torch.from_numpy(rng.permutation(len(yt))).to(xt.device)
        return (
            (xt.index_select(0, idx), yt.index_select(0, idx))
            for idx in order.split(batch_size)[:per_pass]
        )

    return one_pass


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


def batches_per_pass(num_examples: int, batch_size: int, drop_last: bool = False) -> int:
    """Mini-batches in one pass over a client's data: ceil(n / B), the last one smaller
    when B does not divide n (the default); with ``drop_last``, floor(n / B) full ones,
    as the peers' code (torch's ``DataLoader(drop_last=True)``) trains, except that a
    client with fewer than B examples keeps its one batch rather than taking no step."""
    if drop_last:
        return max(num_examples // batch_size, 1)
    return math.ceil(num_examples / batch_size)


def num_local_steps(
    num_examples: int, batch_size: int, epochs: int, steps: int | None, drop_last: bool = False
) -> int:
    """How many SGD steps ``local_sgd`` takes (SCAFFOLD's K)."""
    if steps is not None:
        return steps
    return epochs * batches_per_pass(num_examples, batch_size, drop_last)


def client_rng(seed: int, server_round: int, partition_id: int) -> np.random.Generator:
    """The generator of one client's draws in one round: seeded from (seed, round, id)."""
    return stream("client-batches", seed, server_round, partition_id)


class ClientData(Protocol):
    """A client's training data as local SGD sees it."""

    def __len__(self) -> int:
        """m_i, the number of training examples (``num-examples``)."""

    def passes(self, config: Mapping[str, Any]) -> OnePass:
        """The passes of one round, given the round's train config."""

    def full(self) -> tuple[Any, Any]:
        """All of (x, y) at once (CA-Fed's F_k*, a full-batch minimisation)."""


class ArrayData:
    """The project's in-memory (x, y) of client ``partition_id``: each pass a permutation
    drawn from the (seed, round, id) stream (:func:`client_rng`), so every engine and
    both of Flower's APIs train on the same batches. The config's ``batch-size``
    overrides ``batch_size``. (x, y): arrays or tensors; batches are gathered on
    ``device`` (default: where the tensors are, the CPU for arrays)."""

    def __init__(
        self,
        x: np.ndarray | torch.Tensor,
        y: np.ndarray | torch.Tensor,
        *,
        batch_size: int,
        seed: int,
        partition_id: int,
        drop_last: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        self.x, self.y = x, y
        self.batch_size, self.seed, self.partition_id = batch_size, seed, partition_id
        self.drop_last, self.device = drop_last, device

    def __len__(self) -> int:
        return len(self.y)

    def passes(self, config: Mapping[str, Any]) -> OnePass:
        rng = client_rng(self.seed, int(config.get(SERVER_ROUND, 0)), self.partition_id)
        batch_size = int(config.get(BATCH_SIZE, self.batch_size))
        return array_pass(self.x, self.y, batch_size, rng, self.drop_last, self.device)

    def full(self) -> tuple[np.ndarray | torch.Tensor, np.ndarray | torch.Tensor]:
        return self.x, self.y


class LoaderData:
    """A user's data loader (a torch ``DataLoader`` or any re-iterable of batches): each
    pass iterates it once, in its own order. ``to_xy`` turns one batch into (inputs,
    labels); the default takes an (x, y) pair (``TensorDataset``, torchvision); Flower
    Datasets' dict batches need e.g. ``to_xy=lambda b: (b["img"], b["label"])``. Batches
    move to ``device``. ``num_examples`` defaults to ``len(loader.dataset)``."""

    def __init__(
        self,
        loader: Iterable[Any],
        *,
        to_xy: Callable[[Any], Batch] | None = None,
        device: torch.device | str | None = None,
        num_examples: int | None = None,
    ) -> None:
        self.loader, self.to_xy, self.device = loader, to_xy or pair_batch, device
        dataset = getattr(loader, "dataset", None)
        if num_examples is None and not hasattr(dataset, "__len__"):
            raise ValueError(
                "num_examples: the data loader has no sized .dataset to count its "
                "examples (num-examples): pass num_examples=..."
            )
        self.num_examples = len(dataset) if num_examples is None else num_examples

    def __len__(self) -> int:
        return self.num_examples

    def passes(self, config: Mapping[str, Any]) -> OnePass:
        if BATCH_SIZE in config:
            raise ValueError(
                f"the server sent '{BATCH_SIZE}' = {config[BATCH_SIZE]}, but a data loader "
                "fixes its own batch size: build the loader with that batch size and take "
                f"'{BATCH_SIZE}' out of the strategy's train config"
            )

        def one_pass() -> Iterable[Batch]:
            for batch in self.loader:
                x, y = self.to_xy(batch)
                yield x.to(self.device), y.to(self.device)

        return one_pass

    def full(self) -> tuple[torch.Tensor, torch.Tensor]:
        xs, ys = zip(*self.passes({})())
        return torch.cat(xs), torch.cat(ys)


def pair_batch(batch: Any) -> Batch:
    """The default ``to_xy``: a batch that is an (inputs, labels) pair."""
    if isinstance(batch, Mapping):
        raise ValueError(
            f"to_xy: the data loader yields dict batches (keys {sorted(batch)}): pass "
            "to_xy=... naming its inputs and labels, e.g. to_xy=lambda b: (b['img'], "
            "b['label'])"
        )
    if not isinstance(batch, Sequence) or len(batch) != 2:
        raise ValueError(
            f"to_xy: a batch of type {type(batch).__name__} is not an (inputs, labels) "
            "pair: pass to_xy=... that returns (inputs, labels) tensors"
        )
    return batch[0], batch[1]


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
    (``training.lr_schedule``, :func:`~fedram_flwr.lr_schedule.scheduled_lr`, on the
    round's ``server-round``). The round's train config may override ``lr`` (FedAR's eta_t,
    or a Flower app's ``lr``) and ``local-epochs``. ``optimizer``: the app's own (an
    instance or a factory, :mod:`fedram_flwr.optimizers`) instead of plain SGD; ``block``
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
        given = config.get(LR, self.lr)
        if given is None and self.optimizer is None:
            raise ValueError(
                f"no learning rate: the train config has no '{LR}' and none was given: "
                f"pass lr=... or send '{LR}' in the strategy's train config"
            )
        lr = None if given is None else scheduled_lr(float(given), self.lr_schedule, config)
        hooks = dict(batch_weight=batch_weight, grad_offset=grad_offset, losses=losses)
        if self.optimizer is None:
            return self.passes(config, lr, **hooks)
        with fitting(self.optimizer, self.model, extra_groups, self.block) as optimizer:
            lr = set_lr(optimizer, lr, len(optimizer.param_groups) - len(extra_groups))
            if plain_sgd is not None:
                require_plain_sgd(optimizer, self.block, plain_sgd)
            return self.passes(config, lr, optimizer=optimizer, **hooks)

    def passes(self, config: Mapping[str, Any], lr: float, **hooks: Any) -> LocalRun:
        """:func:`sgd_passes` over the round's passes at step size ``lr`` with ``hooks``
        (``batch_weight``, ``grad_offset``, ``losses``, ``optimizer``); its metrics."""
        if any(isinstance(m, SeededDropout) for m in self.model.modules()):
            # Masks from the (seed, round, client) stream, not from the shared model's past.
            seed = getattr(self.data, "seed", 0)
            rnd = int(config.get(SERVER_ROUND, 0))
            seed_dropout(self.model, stream("dropout-masks", seed, rnd, self.partition_id))
        start = time.perf_counter()
        loss, steps = sgd_passes(
            self.model,
            self.data.passes(config),
            epochs=int(config.get(LOCAL_EPOCHS, self.local_epochs)),
            lr=lr,
            steps=self.local_steps,
            weight_decay=self.weight_decay,
            **hooks,
        )
        seconds = time.perf_counter() - start
        metrics = {PARTITION_ID: self.partition_id, TRAIN_LOSS: loss, TRAIN_SECONDS: seconds}
        return LocalRun(metrics, steps, lr)
