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

from fedram_flwr.clients.batches import Batch, OnePass, StepPlan
from fedram_flwr.clients.models import SeededDropout, module_list, parameter_list
from fedram_flwr.clients.stacked_batches import gathered_block, stacked_batches, step_blocks
from fedram_flwr.clients.stacked_loss import stacked_gradients

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
    gradients = stacked_gradients(model)
    active = list(range(len(jobs)))  # rows of the stack, in job order
    trained: dict[int, tuple[Stack, int]] = {}  # job -> (its stack when it finished, row)
    corrected: dict[str, torch.Tensor] = {}  # the last step's gradients, as p.grad
    step_losses: list[tuple[torch.Tensor, list[int]]] = []

    def step(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> None:
        """One local step of the clients in ``active`` on their batches (x, y, w)."""
        grads, loss = gradients(params, x, y, w)
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
                if decayed:  # g + wd p, then p - lr g: sgd_step's two updates, fused
                    g = torch.addcmul(g, p, rows(decay, p))
                p.addcmul_(g, rows(lr, p), value=-1.0)

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
            for s in range(first, last):
                keep = [r for r, j in enumerate(active) if counts[j] > s]
                if len(keep) < len(active):
                    leave(keep)
                x, y, w = x_all[s - first], y_all[s - first], w_all[s - first]
                if len(active) < len(jobs):  # the block's rows of the clients still training
                    still = torch.tensor(active, device=x.device)
                    x, y, w = (t.index_select(0, still) for t in (x, y, w))
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
