"""FOCUS's client: local steps on the gradient-tracking direction, the change pushed.

Ying, Li, Yang, NeurIPS 2025 (arXiv 2503.20117), after the authors' code
(github.com/BichengYing/FedASL, ``FedASL/client.py``, ``FedASLClient.local_update`` and
``push_step``); the server is :mod:`fedram_flwr.strategies.focus`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.common import ArrayRecord, NDArrays, RecordDict

from fedram_flwr.clients.erm import ERMClient, FitResult
from fedram_flwr.clients.models import parameter_list
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.protocol import FOCUS_GRADIENT

PLAIN_SGD = (
    "FOCUS pushes the gradient of its last local step and steps plain SGD on "
    "g - g_prev (FedASLClient.local_update)"
)


def fit_focus(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Run FOCUS's client round (``FedASLClient.local_update``, then ``push_step``).

    From x_0 = x (the received model), K local SGD steps on g_k - g_prev, g_k the
    mini-batch gradient at x_k and g_prev the gradient of this client's last step in the
    last round it trained (zero before its first): the corrected gradient is the
    trainer's gradient plus the offset -g_prev (with weight decay lambda, g_k is the
    gradient of the decayed loss, f + lambda |x|^2 / 2, as SGD's step takes it). The push
    is the last step's corrected gradient, y_i = g_{K-1} - g_prev; g_{K-1} is kept in
    ``state`` for the next round.
    The authors' client takes K - 1 model steps for K gradients; the K-th step here only
    moves a model that is never sent, so the push is the same.

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings (plain SGD, any weight decay).
    parameters : NDArrays
        The received model x.
    config : Mapping[str, Any]
        The round's train config (``server-round``, ``lr``, optional ``local-epochs``).
    state : RecordDict
        The client's persistent ``Context.state`` (keeps g_prev).

    Returns
    -------
    FitResult
        Flower's fit triple: y_i (arrays shaped like the model), m_i and the fit metrics.

    Raises
    ------
    ValueError
        With an app optimizer: the push would not be the gradient its steps followed.
    """
    if trainer.optimizer is not None:
        raise ValueError(
            f"{trainer.block}: optimizer={type(trainer.optimizer).__name__} is refused: "
            f"{PLAIN_SGD}; use no optimizer (the block steps plain SGD)"
        )
    params = parameter_list(trainer.model)
    if len(params) != len(parameters):
        raise ValueError(
            f"{trainer.block}: FOCUS tracks the gradient of every array it receives, but the "
            f"model has {len(params)} parameters for {len(parameters)} arrays (buffers such "
            "as BatchNorm's running statistics): use a model whose state is its parameters"
        )
    if FOCUS_GRADIENT in state:
        g_prev = state[FOCUS_GRADIENT].to_numpy_ndarrays()
    else:
        g_prev = [np.zeros_like(np.asarray(a), dtype=np.float32) for a in parameters]
    offset = [torch.from_numpy(np.asarray(-g, dtype=np.float32)) for g in g_prev]
    run = trainer.train(parameters, config, grad_offset=offset)
    # After the loop each p.grad holds the last step's corrected loss gradient; weight
    # decay lambda adds lambda x_{K-1}, x_{K-1} recovered from the step it took:
    # x_K = (1 - eta lambda) x_{K-1} - eta p.grad.
    wd, lr = trainer.weight_decay, run.lr
    pushes = []
    for p in params:
        grad = p.grad.detach().cpu().numpy().astype(np.float64)
        if wd:
            before = (p.detach().cpu().numpy() + lr * grad) / (1.0 - lr * wd)
            grad = grad + wd * before
        pushes.append(grad.astype(np.float32))
    state[FOCUS_GRADIENT] = ArrayRecord([y + g for y, g in zip(pushes, g_prev)])
    return pushes, trainer.num_examples, run.metrics


class FocusClient(ERMClient):
    """FOCUS's NumPyClient: :func:`fit_focus` with g_prev in its ``Context.state``.

    Constructor parameters: :class:`~fedram_flwr.clients.erm.ERMClient`'s.
    """

    local_fit = staticmethod(fit_focus)
