"""A stacked round's mini-batches (``training.batched``): every client's batches of a block
of steps gathered on a leading client axis, padded where batches differ in size or a
client has no step left, and each row's weight in its client's mean (0 for padding).
In-memory data come as step plans (:class:`~fedram_flwr.clients.batches.StepPlan`: the
round's indices drawn at once), a data loader's batches one step at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from fedram_flwr.clients.batches import Batch, StepPlan

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
    """Steps ``first``..``last - 1`` of every client gathered, step by step: x ``[steps,
    clients, B, ...]`` and y ``[steps, clients, B]`` (B: the widest batch; a step's batches
    are one contiguous block), and w ``[steps, clients, B]``, each row's weight in its
    client's mean (1 / its batch's size; 0 for padding: a smaller batch's rest and the
    steps of a client that has none left, filled with one of its rows). One gather for
    all clients when their data are rows of one tensor (``rows_of``: a node's data), else
    one per client."""
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
        index = (rows + offsets[:, None, None]).transpose(1, 0, 2).reshape(-1)
        index_t = torch.from_numpy(index).to(x0.device)
        x = base_x.index_select(0, index_t).view(steps, len(plans), width, *x0.shape[1:])
        y = base_y.index_select(0, index_t).view(steps, len(plans), width)
    else:  # each client's batch of each step gathered into its place (no copy after)
        shape = (steps, len(plans), width)
        x = torch.empty((*shape, *x0.shape[1:]), dtype=x0.dtype, device=x0.device)
        y = torch.empty(shape, dtype=y0.dtype, device=y0.device)
        for c, (plan, mine) in enumerate(zip(plans, rows)):
            index = torch.from_numpy(mine).to(plan.x.device)
            for s in range(steps):
                torch.index_select(plan.x, 0, index[s], out=x[s, c])
                torch.index_select(plan.y, 0, index[s], out=y[s, c])
    inverse = 1.0 / np.maximum(sizes, 1)  # float64, rounded once into the weights' dtype
    w = np.where(np.arange(width) < sizes[..., None], inverse[..., None], 0.0).transpose(1, 0, 2)
    return x, y, torch.from_numpy(w).to(device=x0.device, dtype=dtype)


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
