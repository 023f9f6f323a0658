"""Local mini-batch SGD shared by every NumPyClient (Fed-CVaR-Avg Alg. 1, lines 5-10)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedram_flwr.rng import stream


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
    """Run ``epochs`` passes of mini-batch SGD on the mean cross-entropy f_b; or, when
    ``steps`` is given, exactly ``steps`` mini-batch steps (FedAR Sec. 6.1: K local
    steps), reshuffling at each pass over the data.

    ``batch_weight(f_b)`` scales the gradient of each mini-batch (the CVaR client uses
    it for d G_i / d f_b, eq. 6); ``None`` is plain SGD. ``grad_offset`` (one tensor per
    parameter) is added to every gradient before the step (SCAFFOLD's c - c_i);
    ``weight_decay`` is SGD's. The step is ``sgd_step`` (torch.optim.SGD's arithmetic
    without importing torch.optim). Batches are drawn from ``rng`` only, so a client's update
    is a pure function of its inputs. ``drop_last`` (``training.drop_last``): the last,
    smaller mini-batch of each pass is dropped instead of taken as a step of its own
    (:func:`batches_per_pass`). Returns the mean mini-batch loss of the last epoch (of
    all ``steps`` steps). Runs on the model's device; ``x``, ``y`` (arrays, or tensors
    kept there by the caller) are moved there, the batch indices too.
    """
    params = list(model.parameters())
    device = params[0].device
    xt, yt = on_device(x, device), on_device(y, device)
    model.train()
    per_epoch = batches_per_pass(len(y), batch_size, drop_last)
    passes = epochs if steps is None else math.ceil(steps / per_epoch)
    order = torch.from_numpy(np.concatenate([rng.permutation(len(y)) for _ in range(passes)]))
    batches = [
        idx
        for one_pass in order.to(device).split(len(y))
        for idx in one_pass.split(batch_size)[:per_epoch]
    ][:steps]
    losses: list[torch.Tensor] = []
    for idx in batches:
        loss = F.cross_entropy(model(xt.index_select(0, idx)), yt.index_select(0, idx))
        losses.append(loss.detach())
        for p in params:
            p.grad = None
        (loss if batch_weight is None else loss * batch_weight(loss.item())).backward()
        if grad_offset is not None:
            for p, offset in zip(params, grad_offset, strict=True):
                p.grad.add_(offset.to(p.device))
        sgd_step(params, lr, weight_decay)
    # One device-to-host copy of the float32 losses, averaged in float64 as before.
    values = torch.stack(losses[-(steps or per_epoch) :]).cpu().tolist()
    return float(np.mean(values))


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


@torch.no_grad()
def predict_logits(
    model: nn.Module, x: np.ndarray | torch.Tensor, batch_size: int = 4096
) -> torch.Tensor:
    """The model's outputs on ``x`` in chunks of ``batch_size`` rows, computed on the
    model's device (``x`` is moved there if it is not), returned on the CPU."""
    model.eval()
    xt = on_device(x, next(model.parameters()).device)
    chunks = [model(xt[i : i + batch_size]) for i in range(0, len(xt), batch_size)]
    return torch.cat(chunks).cpu()


def on_device(x: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` as a tensor on ``device``: a numpy array shares its memory on the CPU; a
    tensor already there is returned as it is (callers cache device copies)."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    return x if x.device == device else x.to(device)


def resolve_device(name: str) -> torch.device:
    """``training.device`` as a torch device: ``cpu``, ``cuda`` (an error naming the
    setting when no GPU is visible) or ``auto`` (``cuda`` where available, else ``cpu``).
    On ``cuda`` it turns TensorFloat-32 off for matmuls and convolutions (cuDNN allows it
    by default: 10-bit mantissas), so GPU runs stay within float32 rounding of CPU runs."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "training.device: cuda is not available on this machine (torch sees no GPU); "
            "allowed values here: cpu, auto"
        )
    if name not in ("cpu", "cuda"):
        raise ValueError(
            f"training.device: {name!r} is not allowed; allowed values: cpu, cuda, auto"
        )
    if name == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(name)


def client_rng(seed: int, server_round: int, partition_id: int) -> np.random.Generator:
    """The generator of one client's draws in one round: seeded from (seed, round, id)."""
    return stream("client-batches", seed, server_round, partition_id)
