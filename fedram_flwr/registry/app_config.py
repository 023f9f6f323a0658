"""Reading a run's scenario from Flower's run config (``flwr run . -c ...``), validated
against the registry (the server's; a node reads it with :mod:`fedram_flwr.scenario.run_config`,
which also holds the ``FIELD=VALUE`` overrides of ``fedram run --set`` and of the run
config's ``overrides``, re-exported here)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fedram_flwr.registry import validate
from fedram_flwr.scenario.config import Scenario
from fedram_flwr.scenario.run_config import (
    APIS,
    APP_ROOT,
    parse_override,
    parse_overrides,
    read_run_scenario,
    run_api,
    settings_of,
)

__all__ = [
    "APIS",
    "APP_ROOT",
    "parse_override",
    "parse_overrides",
    "run_api",
    "run_settings",
    "scenario_from_run_config",
]


@lru_cache(maxsize=8)
def scenario_from_run_config(path: str, overrides: str) -> Scenario:
    """The scenario file with overrides applied
    (:func:`~fedram_flwr.scenario.run_config.read_run_scenario`), validated against the registry
    (a node reads it with :func:`~fedram_flwr.scenario.run_config.node_settings`)."""
    return read_run_scenario(path, overrides, validate)


def run_settings(run_config: dict[str, Any]) -> tuple[Scenario, int]:
    return settings_of(run_config, scenario_from_run_config)
