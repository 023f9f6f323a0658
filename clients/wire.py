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

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from torch import nn

from fedram_flwr.clients.erm import FitResult
from fedram_flwr.protocol import NUM_EXAMPLES, PARTITION_ID, split_model_control, split_theta_t

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
    return content.array_records[ARRAYS].to_numpy_ndarrays(), dict(config)


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
