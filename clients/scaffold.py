"""SCAFFOLD's client (Karimireddy et al., ICML 2020, Alg. 1 lines 7-13, option II)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.common import ArrayRecord, NDArrays, RecordDict

from fedram_flwr.clients.erm import ERMClient, FitResult
from fedram_flwr.models import get_weights
from fedram_flwr.objectives import scaffold_control_update
from fedram_flwr.protocol import SCAFFOLD_CONTROL, join_model_control, split_model_control
from fedram_flwr.training import LocalTrainer


def control_variate(state: RecordDict, like: NDArrays) -> NDArrays:
    """Return c_i from the persistent state, zeros shaped ``like`` the first time.

    Parameters
    ----------
    state : RecordDict
        The client's ``Context.state``.
    like : NDArrays
        Arrays shaped like the model's.

    Returns
    -------
    NDArrays
        c_i.
    """
    if SCAFFOLD_CONTROL in state:
        return state[SCAFFOLD_CONTROL].to_numpy_ndarrays()
    return [np.zeros_like(a) for a in like]


OPTION_II = (
    "SCAFFOLD's control update (option II, c_i+ = c_i - c + (x - y_i) / (K eta_l)) holds "
    "for K plain SGD steps of size eta_l on the corrected gradient"
)


def fit_scaffold(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Run SCAFFOLD's local steps and control update (Alg. 1 lines 7-13, option II).

    Runs K local SGD steps on g_i(y) - c_i + c; sets c_i by option II (line 12:
    c_i+ = c_i - c + (x - y_i) / (K eta_l)) and keeps it in ``state`` (zero before the
    first round it trains). K is the number of steps local SGD took (``local_steps``,
    or epochs x batches). The app's optimizer is taken only if it is plain SGD
    (``torch.optim.SGD`` without momentum): the correction c - c_i is added to every
    gradient before its step, and option II reads eta_l from it; any other is refused
    with :data:`OPTION_II` as the reason.

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings.
    parameters : NDArrays
        (x, c): the model's arrays, then the server's control variate shaped like them.
    config : Mapping[str, Any]
        The round's train config (``server-round``, optional ``lr``, ``local-epochs``).
    state : RecordDict
        The client's persistent ``Context.state`` (keeps c_i).

    Returns
    -------
    FitResult
        Flower's fit triple: (y_i, c_i^+ - c_i), m_i (the client's number of examples) and the
        fit metrics (``train-loss``).
    """
    x, c = split_model_control(parameters)
    c_i = control_variate(state, c)
    device = next(trainer.model.parameters()).device
    offset = [torch.from_numpy(np.asarray(b - a)).to(device) for a, b in zip(c_i, c)]  # c - c_i
    run = trainer.train(x, config, grad_offset=offset, plain_sgd=OPTION_II)
    y = get_weights(trainer.model)
    c_new = [scaffold_control_update(*v, run.steps, run.lr) for v in zip(c_i, c, x, y)]
    state[SCAFFOLD_CONTROL] = ArrayRecord(c_new)
    deltas = [new - old for new, old in zip(c_new, c_i)]
    return join_model_control(y, deltas), trainer.num_examples, run.metrics


class ScaffoldClient(ERMClient):
    """SCAFFOLD's NumPyClient: :func:`fit_scaffold` with c_i in its ``Context.state``.

    Constructor parameters: :class:`~fedram_flwr.clients.erm.ERMClient`'s.
    """

    local_fit = staticmethod(fit_scaffold)
