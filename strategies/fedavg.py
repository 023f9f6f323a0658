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
from fedram_flwr.strategies.base import CoreStrategy
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.hyper import server_lr_hyper
from fedram_flwr.strategies.wire import client_id

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
    """Average the models weighted by their example counts, in place.

    sum_k (n_k / n) w_k with n = sum_k n_k (FedAvg, McMahan et al. 2017, Algorithm 1):
    each model scaled in place, summed in the given order, op for op as Flower's
    ``aggregate_inplace``, so the mean is bitwise the same in every engine.

    Parameters
    ----------
    models : sequence of Arrays
        The returned models w_k, each a list of layer arrays, in partition-id order;
        overwritten.
    num_examples : sequence of int
        n_k, each model's number of training examples, >= 0 with a positive sum.

    Returns
    -------
    Arrays
        The weighted mean, layer by layer, in the models' dtypes.
    """
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
    """Average the models with weights c_k (Flower's ``aggregate``, op for op).

    Parameters
    ----------
    results : sequence of (Arrays, float)
        The models w_k with their weights c_k (>= 0, positive sum).

    Returns
    -------
    Arrays
        sum_k c_k w_k / sum_k c_k, layer by layer.
    """
    total = sum(c for _, c in results)
    weighted = [[layer * c for layer in arrays] for arrays, c in results]
    return [reduce(np.add, layers) / total for layers in zip(*weighted, strict=True)]


def server_step(previous: Sequence[np.ndarray], mean: Arrays, server_lr: float) -> Arrays:
    """Take the server step x_{t+1} = x_t + eta_g (mean - x_t).

    The global learning rate of the FedAU / FedAWE authors' code; computed layer by
    layer in float64 and cast to the mean's dtype.

    Parameters
    ----------
    previous : sequence of np.ndarray
        x_t, the model broadcast this round.
    mean : Arrays
        The aggregated model (same shapes as ``previous``).
    server_lr : float
        eta_g, > 0; 1 returns ``mean`` itself (x_t + (mean - x_t) would round).

    Returns
    -------
    Arrays
        x_{t+1}, layer by layer.
    """
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
    """The state of the model-averaging cores: the global model.

    Parameters
    ----------
    arrays : Arrays
        The global model's arrays, as broadcast.
    """

    arrays: Arrays


@dataclass(frozen=True)
class WeightedMeanCore(Core[ModelState]):
    """Adopt the example-weighted mean of the returned models as the new model.

    No reply, no step (the model stays). No hyper-parameter.
    """

    def init(self, initial_arrays: Sequence[np.ndarray]) -> ModelState:
        """Start from the initial model."""
        return ModelState(list(initial_arrays))

    def arrays(self, state: ModelState) -> Arrays:
        """Broadcast the global model."""
        return state.arrays

    def aggregate(
        self, state: ModelState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[ModelState]:
        """Replace the model by the replies' weighted mean (:func:`weighted_mean_inplace`)."""
        if not replies:
            return Outcome(state, {}, aggregated=False)
        mean = weighted_mean_inplace(
            [r.arrays() for r in replies], [r.num_examples for r in replies]
        )
        return Outcome(ModelState(mean))


@dataclass(frozen=True)
class FedAvgCore(WeightedMeanCore):
    """FedAvg's core (McMahan et al., AISTATS 2017, Algorithm 1).

    The example-weighted mean, then :func:`server_step` with eta_g = ``server_lr``
    (1: the mean itself).
    """

    server_lr: float = server_lr_hyper()

    def aggregate(
        self, state: ModelState, server_round: int, replies: Sequence[ClientReply], elapsed: int
    ) -> Outcome[ModelState]:
        """Average the replies, then take the server step with eta_g."""
        out = super().aggregate(state, server_round, replies, elapsed)
        if not out.aggregated or self.server_lr == 1.0:
            return out
        return Outcome(ModelState(server_step(state.arrays, out.state.arrays, self.server_lr)))


# ---------------------------------------------------------------- Flower adapter
class FedAvg(CoreStrategy):
    """FedAvg (McMahan et al., AISTATS 2017) as Flower's ``FedAvg``, reproducible.

    Results are aggregated in partition-id order (clients that report no partition id,
    e.g. a stock Flower app's, are summed first); ``server_lr``: eta_g
    (:func:`server_step`).
    """

    core_type = FedAvgCore
    needs_partition_id = False
