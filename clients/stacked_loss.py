"""The clients' losses and gradients on a stack of their parameters (``training.batched``):
each client's mean cross-entropy on its own batch, rows of the stack never mixing, so one
backward pass of the losses' sum gives every client its own gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

Gradients = Callable[..., tuple[dict[str, torch.Tensor], torch.Tensor]]
"""``(params, x, y, w) -> (every client's gradients by parameter name, losses [clients])``:
each client's mean cross-entropy on its batch (rows weighted by ``w``: 1 / its batch's
size, 0 for padding) and its gradient, a row of each stacked parameter's."""


def stacked_gradients(model: nn.Module) -> Gradients:
    """The clients' losses and gradients on the stack (:data:`Gradients`). A chain of
    Flatten, Linear and element-wise activations (:func:`linear_chain`) in closed form:
    batched matrix products forward, the chain rule by hand backward (a CA-Fed Synthetic
    step of 48 clients: 0.38 ms, against 0.90 through autograd and 1.2 through ``vmap``,
    whose cross-entropy runs as a Python decomposition); any other model by autograd
    over ``vmap`` of :func:`client_loss` (:func:`stacked_grads`)."""
    by_autograd = partial(stacked_grads, vmap(client_loss(model)))
    chain = linear_chain(model)
    return by_autograd if chain is None else partial(chain_gradients, chain, by_autograd)


def chain_gradients(
    chain: list[tuple[str, nn.Module]],
    fallback: Gradients,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """:data:`Gradients` of a linear chain in closed form: forward through the chain
    keeping each layer's input, the cross-entropy's gradient (softmax - one-hot, times
    the row's weight), then back through the layers; ``fallback`` when the logits have
    more than a class axis."""
    with torch.no_grad():
        h, tape = x, []
        for name, m in chain:
            tape.append((name, m, h))
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
        if h.dim() != 3:
            return fallback(params, x, y, w)
        z = h - h.amax(-1, keepdim=True)
        e = z.exp()
        total = e.sum(-1, keepdim=True)
        label = y.unsqueeze(-1)
        losses = ((total.log() - z.gather(-1, label)).squeeze(-1) * w).sum(1)
        g = e.div_(total)  # d loss / d logits: (softmax - one-hot) x the row's weight
        g.scatter_add_(-1, label, torch.full(label.shape, -1.0, dtype=g.dtype, device=g.device))
        g.mul_(w.unsqueeze(-1))
        grads: dict[str, torch.Tensor] = {}
        below = [isinstance(m, nn.Linear) for _, m, _ in tape]  # a layer with parameters below?
        for i in range(len(tape) - 1, -1, -1):
            name, m, before = tape[i]
            if isinstance(m, nn.Linear):
                weight = params[f"{name}.weight"]
                flat_g = g.reshape(g.shape[0], -1, g.shape[-1])
                flat_in = before.reshape(before.shape[0], -1, before.shape[-1])
                grads[f"{name}.weight"] = torch.bmm(flat_g.transpose(1, 2), flat_in)
                if f"{name}.bias" in params:
                    grads[f"{name}.bias"] = flat_g.sum(1)
                if not any(below[:i]):
                    break
                g = torch.bmm(flat_g, weight).reshape(before.shape)
            elif isinstance(m, nn.Flatten):
                g = g.reshape(before.shape)
            else:
                g = activation_grad(m, before, g)
    return {n: grads[n] for n in params}, losses


def activation_grad(m: nn.Module, before: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The gradient at an element-wise activation's input, given the one at its output
    ``g`` and its input ``before``."""
    if isinstance(m, nn.ReLU):
        return g * (before > 0)
    if isinstance(m, nn.LeakyReLU):
        return torch.where(before > 0, g, g * m.negative_slope)
    if isinstance(m, nn.Tanh):
        t = torch.tanh(before)
        return g * (1 - t * t)
    if isinstance(m, nn.Sigmoid):
        s = torch.sigmoid(before)
        return g * s * (1 - s)
    return g  # nn.Identity


CHAIN_ACTIVATIONS = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.Identity, nn.LeakyReLU)
"""Element-wise modules a linear chain may hold (they act on the stack as on a batch;
:func:`activation_grad` has their derivatives)."""


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
