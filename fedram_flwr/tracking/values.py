"""What a tracker receives of a run: its parameters (the resolved scenario, flattened to
dotted keys) and each ``metrics.jsonl`` row's numbers (lists counted). Pure functions; no
tracker is imported here."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": [1, 2]}`` -> ``{"a.b": 1, "c": [1, 2]}``: nested mappings
    as dotted keys, every other value as it is."""
    if not isinstance(value, Mapping):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    return out


def params_of(scenario: Mapping[str, Any], **run: Any) -> dict[str, str]:
    """A run's parameters as strings (what every tracker takes): the resolved scenario's
    fields as dotted keys (``algorithm.name``, ``algorithm.params.alpha``,
    ``availability.oracle``, ``training.lr``, ...) and ``run``'s (``seed``, ``engine``,
    ``api``, ``flwr``); the scenario's ``seeds`` list is left out (the run has one)."""
    fields = {k: v for k, v in flatten(scenario).items() if k != "seeds"}
    return {key: str(value) for key, value in {**fields, **run}.items()}


def is_number(value: Any) -> bool:
    """A finite or infinite int/float (not a bool, not None)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metrics_of(row: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of one ``metrics.jsonl`` row a tracker logs at its round: every number
    (``accuracy``, ``loss``, ``rare-accuracy``, ``t``, ``sim-seconds``, ``fit-*``, ...)
    under its own key, every list of partition ids (``active``, ``relayed``, ``failed``,
    ``late``, ``dropped``, ...) as its length under ``<key>.count``, nested mappings
    dotted; NaN kept (a diverged run shows as one). ``round`` is the step, not a metric."""
    out: dict[str, float] = {}
    for key, value in flatten(dict(row)).items():
        if key == "round":
            continue
        if is_number(value):
            out[key] = float(value)
        elif isinstance(value, bool):
            out[key] = float(value)
        elif isinstance(value, list):
            out[f"{key}.count"] = float(len(value))
    return out


def summary_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a run's ``summary.json`` (``final.accuracy``, ``tail-mean.loss``,
    ``wall-seconds``, ...) as dotted keys; the relay counts are left out (one per client)."""
    return {
        key: float(value)
        for key, value in flatten({k: v for k, v in summary.items() if k != "relay-counts"}).items()
        if is_number(value) and not math.isnan(float(value))
    }
