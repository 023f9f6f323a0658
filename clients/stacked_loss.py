"""The clients' losses and gradients on a stack of their parameters (``training.batched``):
each client's mean cross-entropy on its own batch, rows of the stack never mixing, so one
backward pass of the losses' sum gives every client its own gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F


def stacked_loss(model: nn.Module) -> Callable[..., torch.Tensor]:
    """The clients' losses on the stack, ``(params, x, y, w) -> [clients]``: each its
    batch's mean cross-entropy (rows weighted by ``w``). A model that is a chain of
    Flatten, Linear and element-wise activations (:func:`linear_chain`) runs as batched
    matrix products with one cross-entropy over all rows (a CA-Fed Synthetic step of 48
    clients: ~0.6 ms instead of ~1.2 through ``vmap``, whose cross-entropy runs as a
    Python decomposition); any other model by ``vmap`` of :func:`client_loss`."""
    chain = linear_chain(model)
    if chain is None:
        return vmap(client_loss(model))

    def loss(
        params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        h = x
        for name, m in chain:
            if isinstance(m, nn.Flatten):  # the module's dims, one further right
                end = m.end_dim if m.end_dim < 0 else m.end_dim + 1
                h = h.flatten(m.start_dim + 1, end)
            elif isinstance(m, nn.Linear):
                weight, bias = params[f"{name}.weight"], params.get(f"{name}.bias")
                flat = h.reshape(h.shape[0], -1, h.shape[-1])
                out = (
                    torch.bmm(flat, weight.transpose(1, 2))
                    if bias is None
                    else torch.baddbmm(bias.unsqueeze(1), flat, weight.transpose(1, 2))
                )
                h = out.reshape(*h.shape[:-1], weight.shape[1])
            else:
                h = m(h)
        if h.dim() != 3:  # logits with more than a class axis: the per-client loss
            return vmap(weighted_ce)(h, y, w)
        return (stacked_cross_entropy(h, y) * w).sum(1)

    return loss


def stacked_cross_entropy(h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each row's cross-entropy of logits ``h`` ``[..., classes]`` on labels ``y``:
    logsumexp(h) - h_y, shifted by the row's (constant) maximum. The same values as
    ``F.cross_entropy`` to float32 rounding, ~3x faster forward and backward on the CPU
    with few classes (whose log-softmax kernel is slow on short rows: 48 clients x 32
    rows x 10 classes, 0.18 ms against 0.52, bench/stacked_sgd.py's shape)."""
    z = h - h.detach().amax(-1, keepdim=True)
    return z.exp().sum(-1).log() - z.gather(-1, y.unsqueeze(-1)).squeeze(-1)


CHAIN_ACTIVATIONS = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.Identity, nn.LeakyReLU, nn.GELU)
"""Element-wise modules a linear chain may hold (they act on the stack as on a batch)."""


def linear_chain(model: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """``model``'s layers in order with their parameter prefixes when it is a
    ``Sequential`` (nested ones too) of Flatten, Linear and element-wise activations
    (:data:`CHAIN_ACTIVATIONS`, unsubclassed); None for any other model."""
    if type(model) is not nn.Sequential:
        return None
    out: list[tuple[str, nn.Module]] = []
    for name, m in model.named_children():
        if type(m) is nn.Sequential:
            inner = linear_chain(m)
            if inner is None:
                return None
            out += [(f"{name}.{n}", c) for n, c in inner]
        elif type(m) in (nn.Flatten, nn.Linear, *CHAIN_ACTIVATIONS):
            out.append((name, m))
        else:
            return None
    return out


def stacked_grads(
    forward: Callable[..., torch.Tensor],
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Every client's gradient (rows of the stacked parameters) and loss (a vector): the
    clients' losses computed on the stack (``forward``: the vmapped :func:`client_loss`),
    then one backward pass of their sum. Rows do not mix, so row k of the sum's gradient
    is client k's own: the same numbers as ``vmap(grad_and_value(...))``, without its
    gradient transform around the vmap (a CA-Fed Synthetic step of 48 clients: ~1.2 ms
    instead of ~1.6)."""
    with torch.enable_grad():
        leaves = {n: p.detach().requires_grad_() for n, p in params.items()}
        loss = forward(leaves, x, y, w)
        grads = torch.autograd.grad(loss.sum(), list(leaves.values()))
    return dict(zip(leaves, grads)), loss.detach()


def client_loss(model: nn.Module) -> Callable[..., torch.Tensor]:
    """One client's mean cross-entropy on its batch, as a function of its parameters:
    rows weighted by ``w`` (1 / the client's batch size, 0 for padding)."""

    def loss(
        params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        return weighted_ce(functional_call(model, params, (x,)), y, w)

    return loss


def weighted_ce(out: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """One client's cross-entropy of logits ``out`` on labels ``y``, rows weighted by ``w``."""
    return (F.cross_entropy(out, y, reduction="none") * w).sum()
