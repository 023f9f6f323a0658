"""CA-Fed client: reports its loss at the received model, then trains.

CA-Fed Alg. 1, lines 3 and 8-11; on request it also reports its minimum local loss F_k*.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.common import ConfigRecord, NDArrays, RecordDict
from torch import nn
from torch.nn import functional as F

from fedram_flwr.clients.erm import ERMClient, FitResult
from fedram_flwr.clients.models import get_weights, on_device, set_weights
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.protocol import LOCAL_OPTIMUM, RECEIVED_LOSS, REPORT_LOCAL_OPTIMUM


def local_optimum_loss(
    model: nn.Module,
    x: np.ndarray | torch.Tensor,
    y: np.ndarray | torch.Tensor,
    weight_decay: float,
    iterations: int = 200,
) -> float:
    """Compute F_k*, the client's minimum local loss.

    The mean cross-entropy on (x, y) at the minimiser of mean cross-entropy +
    (weight_decay / 2) ||w||^2 (the ridge objective local SGD optimises, CA-Fed
    Sec. V-A b), found by full-batch L-BFGS from ``model``'s weights. Strongly convex
    for the linear model when weight_decay > 0.

    Parameters
    ----------
    model : nn.Module
        Starting point; changed (it ends at the minimiser).
    x, y : np.ndarray or torch.Tensor
        All the client's inputs and labels.
    weight_decay : float
        The ridge coefficient mu, >= 0.
    iterations : int
        L-BFGS's maximum iterations, >= 1.

    Returns
    -------
    float
        F_k*, the data loss (without the ridge term), >= 0.
    """
    params = list(model.parameters())
    xt, yt = on_device(x, params[0].device), on_device(y, params[0].device)
    opt = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=iterations,
        tolerance_grad=1e-9,
        tolerance_change=1e-12,
        line_search_fn="strong_wolfe",
    )

    def objective() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xt), yt)
        loss = loss + 0.5 * weight_decay * sum((p * p).sum() for p in params)
        loss.backward()
        return loss

    model.train()
    opt.step(objective)
    with torch.no_grad():
        return float(F.cross_entropy(model(xt), yt))


def local_optimum(trainer: LocalTrainer, theta: NDArrays, state: RecordDict) -> float:
    """Return F_k*, computed once and kept in ``state`` (``Context.state``).

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model and data.
    theta : NDArrays
        The starting point of :func:`local_optimum_loss` (on all the client's data).
    state : RecordDict
        The client's ``Context.state``.

    Returns
    -------
    float
        F_k*.
    """
    if LOCAL_OPTIMUM not in state:
        set_weights(trainer.model, theta)
        x, y = trainer.data.full()
        value = local_optimum_loss(trainer.model, x, y, trainer.weight_decay)
        state[LOCAL_OPTIMUM] = ConfigRecord({LOCAL_OPTIMUM: value})
    return float(state[LOCAL_OPTIMUM][LOCAL_OPTIMUM])


def fit_ca_fed(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Train as ERM (CA-Fed eq. 2) and report the loss at the received model.

    Also returns F_k^(t) = F_k(w_{t,0}, B_{t,0}), the mean loss of its first mini-batch at the
    received model, as the fit metric ``received-loss``. That value is the first SGD step's own
    forward pass, read from the losses local SGD copies to the host once (``losses`` of
    :func:`~fedram_flwr.clients.training.sgd_passes`; training is ERM's, op for op): the report
    costs no
    extra computation. It is the data loss: a ridge penalty given as ``training.weight_decay``
    (CA-Fed Sec. V-A b) acts in SGD's step and is not in it; (mu/2)||w_t||^2 is the same for every
    client of round t, but F_hat* compares rounds, so F_hat - F_hat* omits (mu/2)(||w_t||^2 -
    ||w_s||^2).

    When the train config carries ``report-local-optimum`` (CA-Fed with ``loss_floor:
    local-optimum``) it also returns ``local-optimum-loss``, :func:`local_optimum`.

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings.
    parameters : NDArrays
        The received model's arrays.
    config : Mapping[str, Any]
        The round's train config (``server-round``, optional ``lr``, ``local-epochs``, optional
        ``report-local-optimum``).
    state : RecordDict
        The client's persistent ``Context.state`` (keeps F_k*).

    Returns
    -------
    FitResult
        Flower's fit triple: the trained model's arrays, m_i (the client's number of examples) and
        the fit metrics (``train-loss``, ``received-loss``, and ``local-optimum-loss`` on request).
    """
    floor = ca_fed_floor(trainer, parameters, config, state)
    seen: list[float] = []
    metrics = trainer.train(parameters, config, losses=seen).metrics
    report = ca_fed_report(seen, floor)
    return get_weights(trainer.model), trainer.num_examples, {**metrics, **report}


def ca_fed_floor(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> dict[str, float]:
    """Return what :func:`fit_ca_fed` works out before training: F_k* when asked for.

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model and data.
    parameters : NDArrays
        The received model's arrays.
    config : Mapping[str, Any]
        The round's train config; ``report-local-optimum`` asks for F_k*.
    state : RecordDict
        The client's ``Context.state`` (keeps F_k*).

    Returns
    -------
    dict of str to float
        ``{local-optimum-loss: F_k*}`` (:func:`local_optimum`) when asked for, else empty.
    """
    if not config.get(REPORT_LOCAL_OPTIMUM):
        return {}
    return {LOCAL_OPTIMUM: local_optimum(trainer, parameters, state)}


def ca_fed_report(losses: list[float], floor: dict[str, float]) -> dict[str, float]:
    """Return the metrics :func:`fit_ca_fed` adds to ERM's once trained.

    Parameters
    ----------
    losses : list of float
        Every local step's mini-batch loss, in step order.
    floor : dict of str to float
        What :func:`ca_fed_floor` gave.

    Returns
    -------
    dict of str to float
        ``received-loss``: F_k^(t), the first step's loss (``losses[0]``), then ``floor``.
    """
    return {RECEIVED_LOSS: losses[0], **floor}


class CAFedClient(ERMClient):
    """CA-Fed's (and AFL's, q-FFL's) NumPyClient: :func:`fit_ca_fed` on the client's data.

    F_k* is kept in its ``Context.state``. Constructor parameters:
    :class:`~fedram_flwr.clients.erm.ERMClient`'s.
    """

    local_fit = staticmethod(fit_ca_fed)
