"""Overrides (fedram_flwr/registry/app_config.py): one ``--set FIELD=VALUE`` takes any YAML value,
and the run config's ``overrides`` string keeps values with commas intact."""

from __future__ import annotations

import json

import pytest

from fedram_flwr.registry.app_config import parse_override, parse_overrides
from fedram_flwr.scenario.config import ScenarioError


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("hcvar_alpha=[0.1, 0.2]", ("hcvar_alpha", [0.1, 0.2])),
        ("description=a, b", ("description", "a, b")),
        (
            "algorithm={name: afl, params: {lr_lambda: 0.1}}",
            ("algorithm", {"name": "afl", "params": {"lr_lambda": 0.1}}),
        ),
        (" rounds = 5", ("rounds", 5)),
        ("data.rare_classes=null", ("data.rare_classes", None)),
    ],
)
def test_one_override_is_any_yaml_value(item: str, expected: tuple) -> None:
    assert parse_override(item) == expected


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("rounds", "override 'rounds': expected FIELD=VALUE"),
        ("=3", "override '=3': expected FIELD=VALUE"),
        ("hcvar_alpha=[0.1, 0.2", "override hcvar_alpha: invalid YAML: line 1"),
        ("algorithm={a: 1, a: 2}", "override algorithm: invalid YAML: .*duplicate key 'a'"),
    ],
)
def test_bad_override_names_it(item: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_override(item)


def test_run_config_overrides_keep_commas_inside_values() -> None:
    wanted = {"hcvar_alpha": [0.1, 0.2], "algorithm.alpha": 0.1, "description": "a, b"}
    assert parse_overrides(json.dumps(wanted)) == wanted  # JSON of the mapping
    assert parse_overrides("{hcvar_alpha: [0.1, 0.2], algorithm.alpha: 0.1}") == {
        "hcvar_alpha": [0.1, 0.2],
        "algorithm.alpha": 0.1,
    }
    # FIELD=VALUE items: commas and semicolons split only outside brackets and quotes.
    text = "hcvar_alpha=[0.1, 0.2], algorithm={name: afl}; description='a, b',rounds=3"
    assert parse_overrides(text) == {
        "hcvar_alpha": [0.1, 0.2],
        "algorithm": {"name": "afl"},
        "description": "a, b",
        "rounds": 3,
    }
    assert parse_overrides("") == {} and parse_overrides("algorithm.alpha=1.0") == {
        "algorithm.alpha": 1.0
    }
