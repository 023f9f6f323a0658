"""CVaR client of Fed-CVaR-Avg: trains (theta, t) jointly on G_i (eq. 6, Alg. 1)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from flwr.common import NDArrays, RecordDict

from fedram_flwr.clients.erm import ERMClient, FitResult
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.objectives import cvar_gradient_weights
from fedram_flwr.protocol import (
    CVAR_ALPHA,
    CVAR_GAMMA,
    LR_T,
    THRESHOLD_T,
    join_theta_t,
    split_theta_t,
)


def fit_cvar(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Train (theta, t) jointly on Fed-CVaR-Avg's G_i (eq. 6, Alg. 1, line 8).

    For H epochs, per mini-batch b with mean loss f_b::

        theta <- theta - eta_theta * dG/df * grad f_b,   t <- t - eta_t * dG/dt

    with (dG/df, dG/dt) from ``cvar_gradient_weights``, where G_i(theta, t) =
    (1 - gamma) [t + (f_i - t)_+ / alpha] + gamma f_i.

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings.
    parameters : NDArrays
        (theta, t): the model's arrays, then t as one more 1-element array.
    config : Mapping[str, Any]
        The round's train config (``server-round``, optional ``lr``, ``local-epochs``, and
        ``cvar-alpha`` (alpha in (0, 1]), ``cvar-gamma`` (gamma in [0, 1]), ``lr-t`` (eta_t > 0)).
    state : RecordDict
        The client's persistent ``Context.state`` (unused).

    Returns
    -------
    FitResult
        Flower's fit triple: (theta, t), m_i (the client's number of examples) and the
        fit metrics (``train-loss`` and ``t``).
    """
    alpha, gamma = float(config[CVAR_ALPHA]), float(config[CVAR_GAMMA])
    return train_with_threshold(
        trainer,
        parameters,
        config,
        lambda loss, t: cvar_gradient_weights(loss, t, alpha, gamma),
        lr=float(config[LR_T]),
        name=THRESHOLD_T,
    )


class CVaRClient(ERMClient):
    """Fed-CVaR-Avg's NumPyClient: :func:`fit_cvar` on the client's data.

    Constructor parameters: :class:`~fedram_flwr.clients.erm.ERMClient`'s.
    """

    local_fit = staticmethod(fit_cvar)


def train_with_threshold(
    trainer: LocalTrainer,
    parameters: NDArrays,
    config: Mapping[str, Any],
    gradient_weights: Callable[[float, float], tuple[float, float]],
    *,
    lr: float,
    name: str,
) -> FitResult:
    """Fit (theta, s) jointly, s a scalar threshold sent as the last array.

    s is Fed-CVaR-Avg's t or RC-FL's eta. Per mini-batch with mean loss f_b,
    (w, d_s) = gradient_weights(f_b, s) scales the batch's theta-gradient by w, and
    s <- s - lr * d_s.

    With the app's optimizer (``trainer.optimizer``), s is a float64 tensor in a parameter
    group of its own (step size ``lr``, the optimizer's other settings): the optimizer
    steps (theta, s) jointly on (w grad f_b, d_s).

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings.
    parameters : NDArrays
        (theta, s): the model's arrays, then s as one more 1-element array.
    config : Mapping[str, Any]
        The round's train config.
    gradient_weights : callable
        (f_b, s) -> (w, d_s): the theta-gradient's weight and s's gradient.
    lr : float
        s's step size, > 0.
    name : str
        The metric that reports the final s.

    Returns
    -------
    FitResult
        Flower's fit triple with (theta, s), m_i and the metrics (``train-loss``,
        ``name`` = s).
    """
    theta, s = split_theta_t(parameters)
    if trainer.optimizer is not None:
        return threshold_in_optimizer(trainer, theta, s, config, gradient_weights, lr, name)

    def step(loss: float) -> float:
        nonlocal s
        d_theta, d_s = gradient_weights(loss, s)
        s -= lr * d_s
        return d_theta

    metrics = {**trainer.train(theta, config, batch_weight=step).metrics, name: s}
    return join_theta_t(get_weights(trainer.model), s), trainer.num_examples, metrics


def threshold_in_optimizer(
    trainer: LocalTrainer,
    theta: NDArrays,
    s: float,
    config: Mapping[str, Any],
    gradient_weights: Callable[[float, float], tuple[float, float]],
    lr: float,
    name: str,
) -> FitResult:
    """Run :func:`train_with_threshold` through the app's optimizer.

    s joins it as the group ``{"params": [s], "lr": lr}`` and gets d_s as its gradient
    at every step. Parameters and returns as for :func:`train_with_threshold`, with
    theta and s apart.
    """
    threshold = torch.tensor([s], dtype=torch.float64)

    def step(loss: float) -> float:
        d_theta, d_s = gradient_weights(loss, float(threshold))
        threshold.grad = torch.tensor([d_s], dtype=torch.float64)
        return d_theta

    group = {"params": [threshold], "lr": lr}
    run = trainer.train(theta, config, batch_weight=step, extra_groups=[group])
    s = float(threshold)
    metrics = {**run.metrics, name: s}
    return join_theta_t(get_weights(trainer.model), s), trainer.num_examples, metrics
