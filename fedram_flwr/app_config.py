"""Reading a run's scenario from Flower's run config (``flwr run . -c ...``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from fedram_flwr.config import Scenario, ScenarioError
from fedram_flwr.paths import APP_ROOT
from fedram_flwr.registry import load_scenario, with_overrides

__all__ = ["APP_ROOT", "parse_overrides", "run_settings", "scenario_from_run_config"]


def parse_overrides(text: str) -> dict[str, Any]:
    """``"algorithm.alpha=0.1, training.local_epochs=2"`` -> {dotted: YAML value}."""
    out: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in text.replace(";", ",").split(","))):
        if "=" not in item:
            raise ScenarioError(
                f"override {item!r}: expected FIELD=VALUE, e.g. algorithm.alpha=0.1"
            )
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


@lru_cache(maxsize=8)
def scenario_from_run_config(path: str, overrides: str) -> Scenario:
    """The scenario file (relative paths are inside the app) with overrides applied."""
    file = Path(path) if Path(path).is_absolute() else APP_ROOT / path
    scenario = load_scenario(file)
    return with_overrides(scenario, parse_overrides(overrides)) if overrides else scenario


def run_settings(run_config: dict[str, Any]) -> tuple[Scenario, int]:
    scenario = scenario_from_run_config(
        str(run_config["scenario"]), str(run_config.get("overrides", ""))
    )
    return scenario, int(run_config.get("seed", scenario.seeds[0]))
