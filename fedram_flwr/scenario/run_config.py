"""A run's settings as a node reads them from Flower's run config (``flwr run . -c ...``),
without the registry: Flower's API (``api``), the ``FIELD=VALUE`` overrides of ``fedram
run --set`` and of the run config's ``overrides``, and the scenario, parsed with the
schema alone (the server, :mod:`fedram_flwr.registry.app_config`, also validates it against the
registry)."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from fedram_flwr.scenario.config import (
    Check,
    Scenario,
    ScenarioError,
    parse_scenario_file,
    parse_with_overrides,
)
from fedram_flwr.scenario.paths import APP_ROOT
from fedram_flwr.scenario.schema import load_yaml

APIS = ("message", "legacy")
"""Flower's API a run goes through (run config ``api``, ``fedram run --api``); the first
is the default: the Message API (``flwr.serverapp`` strategies, ``@app.main()``), or the
legacy one (Strategy, ClientManager, NumPyClient)."""


def run_api(api: Any) -> str:
    """``api`` checked against :data:`APIS`."""
    if str(api) not in APIS:
        raise ScenarioError(f"api: unknown {api!r}; allowed values: {', '.join(APIS)}")
    return str(api)


def parse_override(item: str) -> tuple[str, Any]:
    """``"hcvar_alpha=[0.1, 0.2]"`` -> ("hcvar_alpha", [0.1, 0.2]): one ``--set``; the
    value is any YAML value (commas included)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ScenarioError(f"override {item!r}: expected FIELD=VALUE, e.g. algorithm.alpha=0.1")
    return key.strip(), load_yaml(value, f"override {key.strip()}")


def _top_level_items(text: str) -> list[str]:
    """``text`` split at the commas and semicolons outside brackets, braces and quotes."""
    items, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch in ",;" and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return [s.strip() for s in [*items, text[start:]] if s.strip()]


def parse_overrides(text: str) -> dict[str, Any]:
    """The run config's ``overrides``: a YAML or JSON mapping of dotted fields
    (``{algorithm.alpha: 0.1, hcvar_alpha: [0.1, 0.2]}``, e.g. ``json.dumps`` of one),
    or ``FIELD=VALUE`` items separated by commas or semicolons outside brackets and
    quotes (``"algorithm.alpha=0.1, training.local_epochs=2"``)."""
    if text.lstrip().startswith("{"):
        mapping = load_yaml(text, "overrides")
        if not isinstance(mapping, dict) or not all(isinstance(k, str) for k in mapping):
            raise ScenarioError(f"overrides {text!r}: expected a mapping of FIELD: VALUE")
        return mapping
    return dict(parse_override(item) for item in _top_level_items(text))


def read_run_scenario(path: str, overrides: str, check: Check | None = None) -> Scenario:
    """The scenario file (relative paths are inside the app) with overrides applied,
    each step ``check``-ed (the server: the registry's ``validate``).

    The paths inside the scenario (``data.root``, a trace's ``path``) are made absolute
    against the working directory when it is loaded; ``fedram run`` hands the Flower
    engines a scenario whose paths are absolute already."""
    file = Path(path) if Path(path).is_absolute() else APP_ROOT / path
    scenario = parse_scenario_file(file, check)
    if not overrides:
        return scenario
    return parse_with_overrides(scenario, parse_overrides(overrides), check)


def settings_of(
    run_config: dict[str, Any], scenario_of: Callable[[str, str], Scenario]
) -> tuple[Scenario, int]:
    """(scenario, seed) of a run config, the scenario read by ``scenario_of(path,
    overrides)``."""
    scenario = scenario_of(str(run_config["scenario"]), str(run_config.get("overrides", "")))
    return scenario, int(run_config.get("seed", scenario.seeds[0]))


@lru_cache(maxsize=8)
def node_scenario(path: str, overrides: str) -> Scenario:
    """The run's scenario as a node reads it: parsed, not validated (its server did)."""
    return read_run_scenario(path, overrides)


def node_settings(run_config: dict[str, Any]) -> tuple[Scenario, int]:
    """(scenario, seed) of the run, as a node reads them (:func:`node_scenario`)."""
    return settings_of(run_config, node_scenario)
