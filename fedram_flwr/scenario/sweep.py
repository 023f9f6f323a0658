"""A scenario's ``sweep`` and ``--set`` overrides: dotted field paths on the raw mapping.

``sweep`` maps a dotted field (``training.lr``, or the short form ``algorithm.alpha`` of
``algorithm.params.alpha``) to a list of values, and the variants are the product of the
lists. A key naming several fields joined by commas zips them instead: each value is one
row with a value per field, so settings chosen per algorithm stay together::

    sweep:
      algorithm.name, training.lr, algorithm.server_lr:
        - [ca-fed, 0.1, 0.3]
        - [adafed, 0.03, 1.0]

gives two variants (``name=ca-fed_lr=0.1_server_lr=0.3``, ...), crossed with any other
key of the sweep. Imports nothing from the package but :mod:`fedram_flwr.scenario.schema`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from fedram_flwr.scenario.schema import ScenarioError


def zipped_fields(key: str) -> list[str]:
    """The dotted fields of sweep key ``key``: one, or several joined by commas."""
    return [part.strip() for part in key.split(",")]


def swept_values(sweep: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """One ``{field: value}`` per variant of ``sweep``, in the order of
    ``Scenario.variants()``: the product of the keys' value lists, a comma-joined key
    giving one value per field from each of its rows (``[{}]`` without a sweep)."""
    columns = []
    for key, values in sweep.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ScenarioError(f"sweep.{key}: expected a non-empty list of values, got {values!r}")
        fields = zipped_fields(key)
        if len(fields) == 1:
            columns.append([{key: v} for v in values])
            continue
        if any(not f for f in fields) or len(set(fields)) < len(fields):
            raise ScenarioError(
                f"sweep.{key}: name each field once, e.g. 'training.lr, algorithm.name'"
            )
        rows = []
        for i, row in enumerate(values):
            if not isinstance(row, (list, tuple)) or len(row) != len(fields):
                raise ScenarioError(
                    f"sweep.{key}[{i}]: expected a list of {len(fields)} values, one for each "
                    f"of {', '.join(fields)}; got {row!r}"
                )
            rows.append(dict(zip(fields, row)))
        columns.append(rows)
    return [
        {k: v for part in combo for k, v in part.items()} for combo in itertools.product(*columns)
    ]


def label_part(key: str, value: Any) -> str:
    """``alpha=0.1`` for ``algorithm.alpha: 0.1``; a whole section given as a mapping
    with a ``name`` (``algorithm: {name: afl, params: {...}}``) is labelled by it, one
    without (``time.policy: {kind: deadline, deadline_s: 60}``) by its values joined
    with ``-`` (``policy=deadline-60``), so that the label stays a plain folder name."""
    if isinstance(value, Mapping) and "name" in value:
        return f"name={value['name']}"
    if isinstance(value, Mapping):
        return f"{key.split('.')[-1]}={'-'.join(str(v) for v in value.values())}"
    return f"{key.split('.')[-1]}={value}"


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of scenario mapping ``raw`` with dotted-path overrides applied
    (``algorithm.params.alpha``, or its short form ``algorithm.alpha``).

    An override of a swept field replaces the sweep: the field leaves ``sweep`` (or its
    comma-joined key and rows) and takes the value given. An override inside a field swept
    as a whole section (``sweep: {algorithm: [...]}``, ``--set algorithm.alpha=...``)
    would be overwritten by every variant, so it is an error."""
    data = plain(raw)
    sweep = data.get("sweep") if isinstance(data.get("sweep"), dict) else {}
    for dotted, value in overrides.items():
        path = canonical_path(dotted)
        for key in list(sweep):
            fields = zipped_fields(key)
            paths = [canonical_path(f) for f in fields]
            inside = next((f for f, p in zip(fields, paths) if path.startswith(p + ".")), None)
            if inside is not None:
                raise ScenarioError(
                    f"{dotted}: inside sweep.{key}, which replaces {inside} in every variant; "
                    f"override the sweep's values instead (sweep.{key} or --set {inside}=VALUE)"
                )
            if path not in paths:
                continue
            values = sweep.pop(key)
            keep = [i for i, p in enumerate(paths) if p != path]
            if keep and isinstance(values, list):  # the other fields of a zipped key stay
                sweep[", ".join(fields[i] for i in keep)] = [
                    [row[i] for i in keep] if len(keep) > 1 else row[keep[0]] for row in values
                ]
        set_dotted(data, path, value)
    return data


def canonical_path(dotted: str) -> str:
    """Allow ``algorithm.alpha`` as a short form of ``algorithm.params.alpha``."""
    parts = dotted.split(".")
    if (
        len(parts) == 2
        and parts[0] in ("algorithm", "availability")
        and parts[1] not in ("name", "oracle", "params")
    ):
        return f"{parts[0]}.params.{parts[1]}"
    return dotted


OPTIONAL_SECTIONS = ("time",)
"""Sections a resolved scenario leaves out when unset (``time``: no time model); an
override or sweep inside one starts it, and its missing sub-sections, empty."""


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data``'s field at dotted path ``dotted`` (its sections must exist, except
    inside an optional section, :data:`OPTIONAL_SECTIONS`)."""
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        if parts[0] in OPTIONAL_SECTIONS and node.get(part) is None:
            node[part] = {}
        if not isinstance(node.get(part), dict):
            raise ScenarioError(f"{dotted}: {part!r} is not a section of the scenario")
        node = node[part]
    node[parts[-1]] = value


def plain(value: Any) -> Any:
    """``value`` with mappings as dicts and sequences as lists, recursively (a copy)."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
