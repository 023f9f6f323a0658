"""The wire contract a Message-API block reads and answers.

See docs/API.md and ``fedram_flwr.protocol``: the record keys, how a model's arrays
travel (alone, with t or eta, with SCAFFOLD's control variate: :class:`Layout`), the
node's partition id, the received arrays and config, and the reply's records. Errors
name what is missing and the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from torch import nn

from fedram_flwr.clients.erm import FitResult
from fedram_flwr.clients.models import set_weights
from fedram_flwr.protocol import (
    ALGORITHM_ARRAYS,
    NUM_EXAMPLES,
    PARTITION_ID,
    split_model_control,
    split_theta_t,
)

ARRAYS, CONFIG, METRICS = "arrays", "config", "metrics"
"""The record keys of the wire contract (Flower's strategies' defaults:
``arrayrecord_key="arrays"``, ``configrecord_key="config"``; replies carry "metrics")."""


@dataclass(frozen=True)
class Layout:
    """How a model of n arrays travels on the wire.

    Parameters
    ----------
    what : str
        The layout in words, for errors.
    count : callable
        n -> the number of arrays on the wire.
    model : callable
        The wire's arrays -> the model's own arrays.
    initial : str
        The ``initial_arrays`` a server gives for this layout, for errors.
    """

    what: str
    count: Callable[[int], int]
    model: Callable[[list], list]
    initial: str


MODEL = Layout("the model's arrays", lambda n: n, list, "ArrayRecord(model.state_dict())")
WITH_THRESHOLD = Layout(
    "the model's arrays, then the threshold as one more 1-element array",
    lambda n: n + 1,
    lambda arrays: split_theta_t(arrays)[0],
    "ArrayRecord(fedram_flwr.protocol.join_theta_t(weights, 0.0))",
)
WITH_CONTROL = Layout(
    "the model's arrays, then the control variate shaped like them",
    lambda n: 2 * n,
    lambda arrays: split_model_control(arrays)[0],
    "ArrayRecord(fedram_flwr.protocol.join_model_control(weights, zeros_like_weights))",
)
LAYOUTS = (MODEL, WITH_THRESHOLD, WITH_CONTROL)


def partition_id(context: Context) -> int:
    """Return the node's ``partition-id`` from ``context.node_config``.

    Parameters
    ----------
    context : Context
        The ClientApp's context.

    Returns
    -------
    int
        The partition id, in 0..K-1.

    Raises
    ------
    ValueError
        Saying what to add, if the node config has no ``partition-id``.
    """
    if PARTITION_ID not in context.node_config:
        raise ValueError(
            f"this node has no '{PARTITION_ID}' in its node_config (it has "
            f"{sorted(context.node_config)}): start the SuperNode with --node-config "
            f'"{PARTITION_ID}=<0..N-1> num-partitions=<N>" (the Simulation Engine sets it)'
        )
    return int(context.node_config[PARTITION_ID])


def received(msg: Message, block: str) -> tuple[list, dict[str, Any]]:
    """Return the message's arrays (in the record's order) and config.

    ``block`` names the caller in the error raised (ValueError) when the message has no
    ``"arrays"`` ArrayRecord; a missing ``"config"`` reads as empty.
    """
    content = msg.content
    if ARRAYS not in content.array_records:
        raise ValueError(
            f"{block}: the message has no ArrayRecord '{ARRAYS}' (records: {sorted(content)}): "
            f"the server must send RecordDict({{'{ARRAYS}': ArrayRecord(arrays), "
            f"'{CONFIG}': ConfigRecord(...)}}), as Flower's strategies do with their "
            f"default arrayrecord_key='{ARRAYS}'"
        )
    config = content.config_records.get(CONFIG, ConfigRecord())
    return [
        a for k in record_keys(msg) for a in content.array_records[k].to_numpy_ndarrays()
    ], dict(config)


def record_keys(msg: Message) -> list[str]:
    """Return the names of the message's ArrayRecords that carry arrays, in wire order.

    ``"arrays"`` (the model), then :data:`~fedram_flwr.protocol.ALGORITHM_ARRAYS` where the
    algorithm sends more (t, eta, the control c).
    """
    return [k for k in (ARRAYS, ALGORITHM_ARRAYS) if k in msg.content.array_records]


def array_keys(msg: Message) -> tuple[list[str], list[str]]:
    """Return the keys of the message's model arrays and of the arrays sent beside them."""
    records = msg.content.array_records
    extra = list(records[ALGORITHM_ARRAYS].keys()) if ALGORITHM_ARRAYS in records else []
    return list(records[ARRAYS].keys()), extra


def load_by_key(model: nn.Module, carried: dict[str, Any], block: str) -> None:
    """Copy ``carried`` (state_dict key -> array) into ``model``; leave its other entries.

    Raises
    ------
    ValueError
        Naming the keys the model lacks, or whose shapes differ from the model's.
    """
    state = model.state_dict()
    if unknown := [k for k in carried if k not in state]:
        raise ValueError(
            f"{block}: the message's arrays carry {unknown}, which this model's state_dict "
            f"lacks (it has {list(state)}): give the strategy the same model's state_dict"
        )
    if bad := [k for k, a in carried.items() if tuple(state[k].shape) != np.shape(a)]:
        shapes = {k: (tuple(state[k].shape), np.shape(carried[k])) for k in bad}
        raise ValueError(f"{block}: arrays of the wrong shape (model's, message's): {shapes}")
    with torch.no_grad():
        for key, array in carried.items():
            state[key].copy_(torch.from_numpy(np.asarray(array)))


def layout_of(arrays: list, model: nn.Module, block: str) -> Layout:
    """Return the layout that ``len(arrays)`` arrays for ``model`` are in (evaluation).

    Raises ValueError, naming ``block``, when no single layout fits.
    """
    n = len(model.state_dict())
    fits = [layout for layout in LAYOUTS if layout.count(n) == len(arrays)]
    if len(fits) != 1:
        raise ValueError(
            f"{block}: the server sent {len(arrays)} arrays for a model of {n} state_dict "
            f"entries; expected {n} (the model), {n + 1} (with t or eta) or {2 * n} (with "
            "SCAFFOLD's control variate): is it the same model as the server's?"
        )
    return fits[0]


def reply_content(fit: FitResult, keys: list[str]) -> RecordDict:
    """Turn Flower's fit triple into the reply's records.

    ``"arrays"`` under the received record's ``keys`` (a torch state_dict's names stay
    names) and ``"metrics"`` with ``num-examples`` = m_i beside the fit metrics.
    """
    arrays, num_examples, metrics = fit
    return RecordDict(
        {
            ARRAYS: ArrayRecord({key: Array(a) for key, a in zip(keys, arrays, strict=True)}),
            METRICS: MetricRecord({NUM_EXAMPLES: num_examples, **metrics}),
        }
    )


def model_part(
    msg: Message, arrays: list, model: nn.Module, layout: Layout, load: bool, block: Any
) -> tuple[list[str] | None, list]:
    """Check the message's model arrays against ``model``, loading them by key if ``load``.

    Parameters
    ----------
    msg : Message
        The train message.
    arrays : list of np.ndarray
        Its arrays (:func:`received`): the model's, then those sent beside them.
    model : nn.Module
        The handler's model.
    layout : Layout
        The objective's.
    load : bool
        Load the message's model arrays into ``model``, by key, leaving the entries it
        does not carry as they are.
    block : Objective
        The caller (its ``block``, ``algorithm`` and ``check_arrays``), for errors.

    Returns
    -------
    tuple of (list of str or None, list)
        The model keys the message carries and the arrays sent beside the model. A record
        without state_dict names ("0", "1", ...: a server given a list of arrays) is the
        whole model in order, loaded whatever ``load`` (keys ``None``: no handler line
        loads it by name).

    Raises
    ------
    ValueError
        Naming the keys the model lacks, the shapes that differ, a partial model where
        the algorithm needs the whole one (SCAFFOLD), or a wrong count.
    """
    keys, _ = array_keys(msg)
    names = set(model.state_dict())
    if not all(k in names for k in keys) and all(k.isdigit() for k in keys):
        block.check_arrays(arrays, model)
        set_weights(model, arrays[: len(names)])
        return None, arrays[len(names) :]
    carried = dict(zip(keys, arrays[: len(keys)]))
    if load or any(k not in names for k in keys):
        load_by_key(model, carried, block.block)  # names what the model lacks
    extra = arrays[len(keys) :]
    if layout is WITH_CONTROL and set(keys) != names:
        raise ValueError(
            f"{block.block}: {block.algorithm} needs the whole model on the wire (its control "
            f"variate is shaped like it), but the message carries {sorted(keys)} of "
            f"{sorted(names)}: send the whole state_dict"
        )
    if len(extra) != layout.count(len(keys)) - len(keys):
        raise ValueError(
            f"{block.block}: the {block.algorithm} strategy sends {layout.what}: "
            f"{layout.count(len(keys))} arrays for the {len(keys)} it names, but the message "
            f"carries {len(arrays)}"
        )
    return keys, extra
