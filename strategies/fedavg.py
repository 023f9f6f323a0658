"""FedAvg (McMahan et al., AISTATS 2017), Flower's arithmetic made reproducible.

The core (:class:`FedAvgCore`) averages the returned models weighted by the clients'
example counts, in partition-id order, with Flower's own float operations
(:func:`weighted_mean_inplace` is ``flwr.server.strategy.aggregate.aggregate_inplace``
op for op, :func:`weighted_average` is its ``aggregate``), so the aggregate is bitwise
the same in every engine when m > 1. Fed-CVaR-Avg's core extends its base
:class:`WeightedMeanCore` (no server learning rate).

Server (global) learning rate eta_g (``server_lr``, default 1): as the FedAU (Wang and
Ji, ICLR 2024) and FedAWE (Xiang et al., NeurIPS 2024) authors' code does for FedAvg, it
scales the averaged update, x_{t+1} = x_t + eta_g (mean_k w_k - x_t)
(:func:`server_step`). Flower's aggregation is kept as it is and the step wraps its
result; with eta_g = 1 the mean is adopted unchanged, bit for bit as before.

Flower's Message API: ``FedAvg`` in :mod:`fedram_flwr.message_api` (same core, same
arguments; ``strategy.start(grid=..., initial_arrays=...)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from fedram_flwr.protocol import Arrays, ClientReply, in_partition_order
from fedram_flwr.strategies.base import CoreStrategy, client_id
from fedram_flwr.strategies.core import Core, Outcome

__all__ = [
    "FedAvg",
    "FedAvgCore",
    "ModelState",
    "WeightedMeanCore",
    "client_id",
    "in_partition_order",
    "server_step",
]


# ------------------------------------------------------------------ pure functions
def _inplace(x: np.ndarray, y: Any, op: np.ufunc) -> np.ndarray:
    """``op(x, y)`` into ``x``, casting y to x's dtype when numpy would not (Flower's)."""
    if np.can_cast(y, x.dtype, casting="same_kind"):
        return op(x, y, out=x)
    return op(x, np.array(y, x.dtype), out=x)


def weighted_mean_inplace(models: Sequence[Arrays], num_examples: Sequence[int]) -> Arrays:
    """sum_k (n_k / n) w_k, each model scaled in place, summed in the given order
    (Flower's ``aggregate_inplace``). ``models`` are overwritten."""
    total = sum(num_examples)
    scaling = np.asarray([n / total for n in num_examples])
    params = [_inplace(x, scaling[0], np.multiply) for x in models[0]]
    for i, model in enumerate(models[1:], start=1):
        scaled = (_inplace(x, scaling[i], np.multiply) for x in model)
        params = [
            reduce(lambda a, b: _inplace(a, b, np.add), layers)
            for layers in zip(params, scaled, strict=True)
        ]
    return params


def weighted_average(results: Sequence[tuple[Arrays, float]]) -> Arrays:
    """sum_k c_k w_k / sum_k c_k (Flower's ``aggregate``, op for op)."""
    total = sum(c for _, c in results)
    weighted = [[layer * c for layer in arrays] for arrays, c in results]
    return [reduce(np.add, layers) / total for layers in zip(*weighted, strict=True)]


def server_step(previous: Sequence[np.ndarray], mean: Arrays, server_lr: float) -> Arrays:
    """x_t + eta_g (mean - x_t), layer by layer in float64 and cast to the mean's dtype;
    ``mean`` itself when eta_g = 1 (x_t + (mean - x_t) would round)."""
    if server_lr == 1.0:
        return list(mean)
    out = []
    for x, a in zip(previous, mean, strict=True):
        x64 = np.asarray(x, dtype=np.float64)
        out.append((x64 + server_lr * (np.asarray(a, dtype=np.float64) - x64)).astype(a.dtype))
    return out


# ------------------------------------------------------------------------ core
@dataclass(frozen=True)
class ModelState:
    """The global model's arrays (as broadcast)."""

    arrays: Arrays


@dataclass(frozen=True)
class WeightedMeanCore(Core[ModelState]):
    """The example-weighted mean of the returned models, adopted as the new model; no
    reply, no step."""

    def init(self, initial_arrays: Sequence[np.ndarray]) -> ModelState:
        return ModelState(list(initial_arrays))

    def arrays(self, state: ModelState) -> Arrays:
        return state.arrays

    def aggregate(
        self, state: ModelState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[ModelState]:
        if not replies:
            return Outcome(state, {}, aggregated=False)
        mean = weighted_mean_inplace(
            [r.arrays() for r in replies], [r.num_examples for r in replies]
        )
        return Outcome(ModelState(mean))


@dataclass(frozen=True)
class FedAvgCore(WeightedMeanCore):
    """FedAvg: the example-weighted mean, then :func:`server_step` with eta_g =
    ``server_lr`` (> 0; 1: the mean itself)."""

    server_lr: float = 1.0

    def __post_init__(self) -> None:
        if not self.server_lr > 0.0:
            raise ValueError(f"algorithm.params.server_lr: {self.server_lr} must be > 0")

    def aggregate(
        self, state: ModelState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[ModelState]:
        out = super().aggregate(state, server_round, replies, elapsed)
        if not out.aggregated or self.server_lr == 1.0:
            return out
        return Outcome(ModelState(server_step(state.arrays, out.state.arrays, self.server_lr)))


# ---------------------------------------------------------------- Flower adapter
class FedAvg(CoreStrategy):
    """Flower's ``FedAvg`` with results aggregated in partition-id order (clients that
    report no partition id, e.g. a stock Flower app's, are summed first); ``server_lr``:
    eta_g (:func:`server_step`)."""

    needs_partition_id = False

    def __init__(self, *, server_lr: float = 1.0, **kwargs: Any) -> None:
        super().__init__(FedAvgCore(server_lr=server_lr), **kwargs)
