"""Local SGD of many clients as one stacked computation (``training.batched``).

:func:`stacked_sgd` runs what :func:`~fedram_flwr.clients.training.sgd_passes` runs for
one client, for a round's clients at once: their parameters stacked along a leading
client axis, one step for all of them per local step (their losses by ``torch.func``'s
``vmap`` over ``functional_call``, their gradients by one backward pass of the losses'
sum). Each client keeps its own batches (pulled from its own passes, in the order and
from the random stream the per-client loop draws them), step size, weight decay,
gradient weight (``batch_weight``: CVaR's d G_i / d f_b) and gradient offset
(``grad_offset``: SCAFFOLD's c - c_i).

Clients with different numbers of steps: the clients still training form the stack; when
some finish, their rows leave it (a copy of the stack per distinct step count, not a mask
per step). Mini-batches of different sizes in one step (the smaller last batch of a pass):
padded to the largest, each client's loss the mean over its own rows (padding weighs 0).

Results equal the per-client loop's to float32 rounding, not bit for bit: the batched
kernels sum in another order (a batched matmul or grouped convolution, a scaled gradient
instead of a scaled loss). Models with buffers (batch norm's running statistics) or
dropout are refused (:func:`unbatchable`): their per-client statistics and random masks
are the per-client loop's to keep.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from fedram_flwr.clients.batches import Batch, OnePass, StepPlan
from fedram_flwr.clients.models import SeededDropout, module_list, parameter_list

REFUSED_MODULES = (nn.modules.batchnorm._NormBase, nn.modules.dropout._DropoutNd, SeededDropout)
"""Modules whose training-time behaviour is per-client state or randomness."""


def unbatchable(model: nn.Module) -> str | None:
    """Why ``model``'s clients cannot train stacked, or None when they can: a buffer
    (batch norm's running statistics: each client's own) or a dropout module (each
    client's own masks) is refused."""
    for m in module_list(model):
        if isinstance(m, REFUSED_MODULES):
            return (
                f"its {type(m).__name__} module keeps per-client statistics or random "
                "masks, which a stacked step would share"
            )
    if any(True for _ in model.buffers()):
        return "it has buffers (per-client state beside its parameters)"
    return None


@dataclass
class SGDJob:
    """One client's call of :func:`~fedram_flwr.clients.training.sgd_passes`: its start
    parameters (copied at the call), its passes and the loop's settings and hooks;
    ``plan``: its steps already drawn (:meth:`~fedram_flwr.clients.batches.ArrayData.plan`;
    ``one_pass`` is then not used)."""

    start: list[torch.Tensor]
    one_pass: OnePass | None
    epochs: int
    lr: float
    steps: int | None = None
    weight_decay: float = 0.0
    batch_weight: Callable[[float], float] | None = None
    grad_offset: Sequence[torch.Tensor] | None = None
    pass_lengths: list[int] = field(default_factory=list)
    plan: StepPlan | None = None

    def batches(self) -> Iterator[Batch]:
        """The job's mini-batches in step order, drawn as ``sgd_passes`` draws them (a
        pass started only when a step needs it, no batch beyond the last step asked of
        a data loader); records each pass's number of steps in ``pass_lengths``. (Data
        in memory are planned at once instead: :func:`step_plans`.)"""
        if self.steps is None and self.epochs < 1:
            raise ValueError(f"local-epochs must be >= 1, got {self.epochs}")
        taken = 0
        for _ in range(self.epochs) if self.steps is None else itertools.count():
            one = self.one_pass()
            batches = one if self.steps is None else itertools.islice(one, self.steps - taken)
            n = 0
            for batch in batches:
                n += 1
                yield batch
            if not n:
                raise ValueError("local training: a pass over the client's data gave no mini-batch")
            taken += n
            self.pass_lengths.append(n)
            if taken == self.steps:
                return


class Stack:
    """The stacked parameters and last gradients of some clients when they finished
    (one row each); their host copies made once, when first asked for."""

    def __init__(self, params: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
        self.params, self.grads = params, grads
        self._host: list[np.ndarray] | None = None

    def host(self) -> list[np.ndarray]:
        """The parameters as numpy arrays (views on the CPU, one copy from a GPU)."""
        if self._host is None:
            self._host = [p.detach().cpu().numpy() for p in self.params]
        return self._host


@dataclass
class JobResult:
    """What :func:`stacked_sgd` gives back for one job: its row ``row`` of ``stack``,
    every step's mini-batch loss (floats, in step order) and its number of steps K."""

    stack: Stack
    row: int
    losses: list[float]
    steps: int

    @property
    def params(self) -> list[torch.Tensor]:
        """The job's trained parameters (views of the stack's row)."""
        return [p[self.row] for p in self.stack.params]

    @property
    def grads(self) -> list[torch.Tensor]:
        """Its last step's gradients (what ``p.grad`` holds after ``sgd_passes``: the
        weighted loss's gradient plus the offset, without weight decay; FOCUS reads it)."""
        return [g[self.row] for g in self.stack.grads]

    def arrays(self) -> list[np.ndarray]:
        """The trained parameters as numpy arrays (views of the stack's host copy)."""
        return [a[self.row] for a in self.stack.host()]


def stacked_sgd(model: nn.Module, jobs: Sequence[SGDJob]) -> list[JobResult]:
    """Run ``jobs`` (clients of one architecture, ``model``'s; their start parameters
    in the jobs) stacked, each as ``sgd_passes`` would run it alone; results in job
    order. ``model`` is only the function: its own parameters are neither read nor
    written."""
    if not jobs:
        return []
    if (why := unbatchable(model)) is not None:
        raise ValueError(f"training.batched: the model cannot train stacked: {why}")
    names = [name for name, _ in model.named_parameters()]
    if any(len(job.start) != len(names) for job in jobs):
        raise ValueError(f"stacked SGD: every job needs {len(names)} start parameters")
    device = parameter_list(model)[0].device
    params = {n: torch.stack([job.start[i] for job in jobs]) for i, n in enumerate(names)}
    offsets = (
        None
        if all(job.grad_offset is None for job in jobs)
        else {n: stacked_offsets(jobs, i, params[n]) for i, n in enumerate(names)}
    )
    lr = torch.tensor([job.lr for job in jobs], dtype=params[names[0]].dtype, device=device)
    decay = torch.tensor([job.weight_decay for job in jobs], dtype=lr.dtype, device=device)
    decayed = any(job.weight_decay != 0 for job in jobs)
    forward = stacked_loss(model)
    active = list(range(len(jobs)))  # rows of the stack, in job order
    trained: dict[int, tuple[Stack, int]] = {}  # job -> (its stack when it finished, row)
    corrected: dict[str, torch.Tensor] = {}  # the last step's gradients, as p.grad
    step_losses: list[tuple[torch.Tensor, list[int]]] = []

    def step(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> None:
        """One local step of the clients in ``active`` on their batches (x, y, w)."""
        grads, loss = stacked_grads(forward, params, x, y, w)
        step_losses.append((loss.detach(), list(active)))
        weights = [jobs[j].batch_weight for j in active]
        if any(bw is not None for bw in weights):
            values = loss.tolist()
            scale = [1.0 if bw is None else bw(v) for bw, v in zip(weights, values)]
            scale_t = torch.tensor(scale, dtype=lr.dtype, device=device)
            grads = {n: g * rows(scale_t, g) for n, g in grads.items()}
        with torch.no_grad():
            for n, p in params.items():
                g = grads[n] if offsets is None else grads[n] + offsets[n]
                corrected[n] = g
                if decayed:
                    g = g + p * rows(decay, p)
                p.sub_(g * rows(lr, p))

    def leave(keep: list[int]) -> None:
        """The rows of the stack not in ``keep`` (clients done) leave it (as views: a
        stack left behind is never written again)."""
        nonlocal params, offsets, lr, decay, active
        kept = set(keep)
        stack = Stack([params[n] for n in names], [corrected[n] for n in names])
        for r, j in enumerate(active):
            if r not in kept:
                trained[j] = (stack, r)
        if keep:
            index = torch.tensor(keep, device=device)
            params = {n: p.index_select(0, index) for n, p in params.items()}
            if offsets is not None:
                offsets = {n: o.index_select(0, index) for n, o in offsets.items()}
            lr, decay = lr.index_select(0, index), decay.index_select(0, index)
        active = [active[r] for r in keep]

    plans = step_plans(jobs)
    if plans is not None:  # in-memory data: the round's rows gathered a block of steps at a time
        counts = [len(plan.sizes) for plan in plans]
        for first, last in step_blocks(plans):
            x_all, y_all, w_all = gathered_block(plans, first, last, lr.dtype)
            size = w_all.shape[2]
            for s in range(first, last):
                keep = [r for r, j in enumerate(active) if counts[j] > s]
                if len(keep) < len(active):
                    leave(keep)
                at = (s - first) * size
                x, y, w = x_all[:, at : at + size], y_all[:, at : at + size], w_all[:, s - first]
                if len(active) < len(jobs):
                    rows_of = torch.tensor(active, device=x.device)
                    x, y, w = (t.index_select(0, rows_of) for t in (x, y, w))
                step(x, y, w)
        leave([])
    streams = [job.batches() for job in jobs]
    while active:  # a data loader's batches, drawn step by step
        pulled = [next(streams[j], None) for j in active]
        keep = [r for r, b in enumerate(pulled) if b is not None]
        if len(keep) < len(active):
            leave(keep)
            pulled = [pulled[r] for r in keep]
        if active:
            step(*stacked_batches(pulled, lr.dtype))
    losses = host_losses(step_losses, len(jobs))
    return [JobResult(*trained[j], losses[j], sum(job.pass_lengths)) for j, job in enumerate(jobs)]


def step_plans(jobs: Sequence[SGDJob]) -> list[StepPlan] | None:
    """Every job's steps of the round as row indices, drawn now (the same draws, in the
    same order, as its passes: each job's stream is its own; its ``pass_lengths`` set),
    when every job's data are in memory (:func:`~fedram_flwr.clients.batches.array_pass`);
    None when one's batches come from a data loader (drawn step by step, not held)."""
    if not all(job.plan is not None or hasattr(job.one_pass, "plan") for job in jobs):
        return None
    plans = [
        job.one_pass.plan(job.epochs, job.steps) if job.plan is None else job.plan  # type: ignore[union-attr]
        for job in jobs
    ]
    for job, plan in zip(jobs, plans):
        job.pass_lengths[:] = plan.pass_lengths
    return plans


BLOCK_BYTES = 64 * 2**20
"""At most this many bytes of the round's gathered inputs at once (a block of steps)."""


def step_blocks(plans: Sequence[StepPlan]) -> list[tuple[int, int]]:
    """The round's steps cut into blocks ``[first, last)`` whose gathered inputs (every
    client's padded batches) stay under :data:`BLOCK_BYTES`."""
    steps = max(len(plan.sizes) for plan in plans)
    width = max(plan.rows.shape[1] for plan in plans)
    x = plans[0].x
    per_step = len(plans) * width * max(x[:1].numel(), 1) * x.element_size()
    chunk = max(1, min(steps, BLOCK_BYTES // per_step))
    return [(first, min(first + chunk, steps)) for first in range(0, steps, chunk)]


def gathered_block(
    plans: Sequence[StepPlan], first: int, last: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Steps ``first``..``last - 1`` of every client gathered: x ``[clients, steps * B,
    ...]`` and y ``[clients, steps * B]`` (B: the widest batch), each client's steps one
    after another, and w ``[clients, steps, B]``, each row's weight in its client's mean
    (1 / its batch's size; 0 for padding: a smaller batch's rest and the steps of a
    client that has none left, filled with one of its rows). One gather for all clients
    when their data are rows of one tensor (``rows_of``: a node's data), else one per
    client."""
    width, steps = max(plan.rows.shape[1] for plan in plans), last - first
    if all(len(p.sizes) >= last and p.rows.shape[1] == width for p in plans):
        rows = np.stack([p.rows[first:last] for p in plans])
        sizes = np.stack([p.sizes[first:last] for p in plans])
    else:  # some clients have fewer steps or narrower batches: padded
        rows = np.zeros((len(plans), steps, width), dtype=np.int64)
        sizes = np.zeros((len(plans), steps), dtype=np.int64)
        for c, plan in enumerate(plans):
            mine = plan.rows[first:last]
            rows[c, : len(mine), : mine.shape[1]] = mine
            sizes[c, : len(mine)] = plan.sizes[first:last]
    x0, y0 = plans[0].x, plans[0].y
    base = plans[0].rows_of
    if base is not None and all(
        p.rows_of is not None and p.rows_of[0] is base[0] and p.rows_of[1] is base[1] for p in plans
    ):  # every client's rows in one tensor (a node's data): one gather for all
        base_x, base_y = base[0], base[1]
        offsets = np.array([p.rows_of[2] for p in plans], dtype=np.int64)  # type: ignore[index]
        index = torch.from_numpy((rows + offsets[:, None, None]).reshape(-1)).to(x0.device)
        x = base_x.index_select(0, index).view(len(plans), steps * width, *x0.shape[1:])
        y = base_y.index_select(0, index).view(len(plans), steps * width)
    else:
        shape = (len(plans), steps * width)
        x = torch.empty((*shape, *x0.shape[1:]), dtype=x0.dtype, device=x0.device)
        y = torch.empty(shape, dtype=y0.dtype, device=y0.device)
        for plan, mine, xr, yr in zip(plans, rows, x.unbind(0), y.unbind(0)):
            index = torch.from_numpy(mine.reshape(-1)).to(plan.x.device)
            torch.index_select(plan.x, 0, index, out=xr)
            torch.index_select(plan.y, 0, index, out=yr)
    inverse = 1.0 / np.maximum(sizes, 1)  # float64, rounded once into the weights' dtype
    w = np.where(np.arange(width) < sizes[..., None], inverse[..., None], 0.0)
    return x, y, torch.from_numpy(w).to(device=x0.device, dtype=dtype)


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


def stacked_batches(
    pulled: Sequence[Batch], dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The step's batches on a leading client axis, padded to the largest (zeros, label
    0), and each row's weight in its client's mean (1 / its batch size; 0: padding)."""
    sizes = [b[1].shape[0] for b in pulled]
    x0, y0 = pulled[0]
    largest, full = max(sizes), min(sizes) == max(sizes)
    make = torch.empty if full else torch.zeros
    x = make((len(pulled), largest, *x0.shape[1:]), dtype=x0.dtype, device=x0.device)
    y = make((len(pulled), largest), dtype=y0.dtype, device=y0.device)
    for (bx, by), s, xr, yr in zip(pulled, sizes, x.unbind(0), y.unbind(0)):
        xr[:s].copy_(bx)
        yr[:s].copy_(by)
    if full:
        return x, y, torch.full((len(pulled), largest), 1.0 / largest, dtype=dtype, device=x.device)
    w = torch.zeros((len(pulled), largest), dtype=dtype, device=x.device)
    for r, s in enumerate(sizes):
        w[r, :s] = 1.0 / s
    return x, y, w


def stacked_offsets(jobs: Sequence[SGDJob], i: int, like: torch.Tensor) -> torch.Tensor:
    """Parameter ``i``'s gradient offsets of all jobs stacked (zeros for a job without
    one), on ``like``'s device."""
    zero = torch.zeros_like(like[0])
    return torch.stack(
        [zero if job.grad_offset is None else job.grad_offset[i].to(like) for job in jobs]
    )


def rows(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-client vector shaped to broadcast over ``like``'s rows."""
    return values.view(-1, *([1] * (like.dim() - 1)))


def host_losses(
    step_losses: Sequence[tuple[torch.Tensor, list[int]]], num_jobs: int
) -> list[list[float]]:
    """Every job's step losses as floats, from one host copy of all steps' losses."""
    out: list[list[float]] = [[] for _ in range(num_jobs)]
    if not step_losses:
        return out
    values = torch.cat([loss for loss, _ in step_losses]).tolist()
    at = 0
    for loss, active in step_losses:
        for j in active:
            out[j].append(values[at])
            at += 1
    return out
