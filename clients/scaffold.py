"""SCAFFOLD's client and Amplified SCAFFOLD's.

SCAFFOLD: Karimireddy et al., ICML 2020, Alg. 1 lines 7-13, option II. Amplified
SCAFFOLD (Crawshaw and Liu, NeurIPS 2024): its control variate changes once per period
(:mod:`fedram_flwr.strategies.amplified_scaffold`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from flwr.common import ArrayRecord, ConfigRecord, NDArrays, RecordDict

from fedram_flwr.clients.erm import ERMClient, FitResult
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.training import LocalTrainer
from fedram_flwr.objectives import pooled_control_delta, scaffold_control_update
from fedram_flwr.protocol import (
    PERIOD,
    SCAFFOLD_CONTROL,
    SCAFFOLD_PENDING,
    join_model_control,
    split_model_control,
)


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


def corrected_round(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], c_i: NDArrays
) -> tuple[NDArrays, NDArrays, dict[str, Any], int]:
    """Run K local SGD steps on g_i(y) - c_i + c (SCAFFOLD Alg. 1 lines 7-12, option II).

    K is the number of steps local SGD took (``local_steps``, or epochs x batches). The
    app's optimizer is taken only if it is plain SGD (``torch.optim.SGD`` without
    momentum): the correction c - c_i is added to every gradient before its step, and
    option II reads eta_l from it; any other is refused with :data:`OPTION_II` as the
    reason.

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings.
    parameters : NDArrays
        (x, c): the model's arrays, then the server's control variate shaped like them.
    config : Mapping[str, Any]
        The round's train config (``server-round``, optional ``lr``, ``local-epochs``).
    c_i : NDArrays
        The client's control variate, shaped like the model.

    Returns
    -------
    tuple
        (y_i, c_i^+ of option II (line 12: c_i - c + (x - y_i) / (K eta_l)), the fit
        metrics, K).
    """
    x, c = split_model_control(parameters)
    device = next(trainer.model.parameters()).device
    offset = [torch.from_numpy(np.asarray(b - a)).to(device) for a, b in zip(c_i, c)]  # c - c_i
    run = trainer.train(x, config, grad_offset=offset, plain_sgd=OPTION_II)
    y = get_weights(trainer.model)
    c_new = [scaffold_control_update(*v, run.steps, run.lr) for v in zip(c_i, c, x, y)]
    return y, c_new, run.metrics, run.steps


def fit_scaffold(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Run SCAFFOLD's round (Alg. 1 lines 7-13, option II): :func:`corrected_round`.

    c_i <- c_i + Delta c_i at once, kept in ``state`` (zero before the first round it
    trains).

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
        Flower's fit triple: (y_i, c_i^+ - c_i), m_i (the client's number of examples)
        and the fit metrics (``train-loss``).
    """
    c_i = control_variate(state, split_model_control(parameters)[1])
    y, c_new, metrics, _ = corrected_round(trainer, parameters, config, c_i)
    state[SCAFFOLD_CONTROL] = ArrayRecord(c_new)
    deltas = [new - old for new, old in zip(c_new, c_i)]
    return join_model_control(y, deltas), trainer.num_examples, metrics


def fit_amplified_scaffold(
    trainer: LocalTrainer, parameters: NDArrays, config: Mapping[str, Any], state: RecordDict
) -> FitResult:
    """Run Amplified SCAFFOLD's round (Crawshaw and Liu 2024): c_i stays fixed in a period.

    A pending D_i of an earlier period (config ``period``) is adopted first, c_i <- c_i +
    D_i; then :func:`corrected_round`, and D_i of this period becomes the K-weighted mean
    of its rounds' Delta c_i (:func:`~fedram_flwr.objectives.pooled_control_delta`).

    Parameters
    ----------
    trainer : LocalTrainer
        The client's model, data and training settings.
    parameters : NDArrays
        (x, c): the model's arrays, then the server's control variate shaped like them.
    config : Mapping[str, Any]
        The round's train config, with ``period`` (the index of the current period).
    state : RecordDict
        The client's persistent ``Context.state`` (keeps c_i and the pending D_i).

    Returns
    -------
    FitResult
        (y_i, D_i), m_i and the fit metrics: the server adds (1/N) sum_i D_i to c when
        the period ends.
    """
    period = int(config[PERIOD])
    meta_key = SCAFFOLD_PENDING + "-meta"
    c_i = control_variate(state, split_model_control(parameters)[1])
    pending, pooled = None, 0
    if SCAFFOLD_PENDING in state:
        meta = state[meta_key]
        d_old = state[SCAFFOLD_PENDING].to_numpy_ndarrays()
        if int(meta["period"]) == period:
            pending, pooled = d_old, int(meta["steps"])
        else:  # an earlier period ended: its c_i^new is c_i + D_i
            c_i = [a + d for a, d in zip(c_i, d_old)]
            state[SCAFFOLD_CONTROL] = ArrayRecord(c_i)
    y, c_new, metrics, steps = corrected_round(trainer, parameters, config, c_i)
    deltas = [new - old for new, old in zip(c_new, c_i)]
    if pending is not None:
        deltas = [pooled_control_delta(p, pooled, d, steps) for p, d in zip(pending, deltas)]
    state[SCAFFOLD_PENDING] = ArrayRecord(deltas)
    state[meta_key] = ConfigRecord({"period": period, "steps": pooled + steps})
    return join_model_control(y, deltas), trainer.num_examples, metrics


class ScaffoldClient(ERMClient):
    """SCAFFOLD's NumPyClient: :func:`fit_scaffold` with c_i in its ``Context.state``.

    Constructor parameters: :class:`~fedram_flwr.clients.erm.ERMClient`'s.
    """

    local_fit = staticmethod(fit_scaffold)


class AmplifiedScaffoldClient(ERMClient):
    """Amplified SCAFFOLD's NumPyClient: :func:`fit_amplified_scaffold`.

    c_i and the period's pending D_i live in its ``Context.state``. Constructor
    parameters: :class:`~fedram_flwr.clients.erm.ERMClient`'s.
    """

    local_fit = staticmethod(fit_amplified_scaffold)
