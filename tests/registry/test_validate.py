"""The one place scenarios are validated (fedram_flwr/registry/validate.py): every way
to make a scenario (file, mapping, overrides, sweep variants) checks the registered
params, and errors name the field (and the file)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fedram_flwr.registry import (
    ALGORITHMS,
    ORACLES,
    algorithm_params,
    load_scenario,
    oracle_params,
    scenario_from_dict,
    with_overrides,
)
from fedram_flwr.scenario.config import Scenario, ScenarioError
from tests.helpers import scenario_error

SCENARIO_DIR = Path(__file__).resolve().parent.parent.parent / "scenarios"
SCENARIO_FILES = sorted(SCENARIO_DIR.glob("*.yaml"))


def test_repository_has_scenarios() -> None:
    assert SCENARIO_FILES, f"no scenario files in {SCENARIO_DIR}"


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=[p.name for p in SCENARIO_FILES])
def test_every_repository_scenario_loads(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name
    for label, variant in scenario.variants():
        assert label
        assert not variant.sweep
        algorithm_params(variant)
        oracle_params(variant)


def test_unknown_algorithm_lists_allowed_names(scenario_dict) -> None:
    scenario_dict["algorithm"] = {"name": "fedprox", "params": {}}
    msg = scenario_error(scenario_dict)
    assert "algorithm.name" in msg and "'fedprox'" in msg
    for name in ALGORITHMS:
        assert name in msg
    assert {"fedavg", "fed-cvar-avg"} <= set(ALGORITHMS)


def test_unknown_oracle_lists_allowed_names(scenario_dict) -> None:
    scenario_dict["availability"] = {"oracle": "poisson", "params": {}}
    msg = scenario_error(scenario_dict)
    assert "availability.oracle" in msg and "'poisson'" in msg
    for name in ORACLES:
        assert name in msg


def test_file_errors_name_the_file(tmp_path: Path, scenario_dict) -> None:
    scenario_dict["algorithm"]["params"]["alpha"] = 2.0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(scenario_dict))
    with pytest.raises(ScenarioError, match=re.escape(f"{path}: algorithm.params.alpha")):
        load_scenario(path)
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ScenarioError, match="must be a YAML mapping"):
        load_scenario(tmp_path / "list.yaml")


def test_with_overrides_short_form(tiny_scenario: Scenario) -> None:
    changed = with_overrides(
        tiny_scenario,
        {"algorithm.alpha": 0.5, "availability.clients_per_round": 2, "training.lr": 0.2},
    )
    assert algorithm_params(changed).alpha == 0.5
    assert algorithm_params(changed).gamma == 0.1  # untouched
    assert oracle_params(changed).clients_per_round == 2
    assert changed.training.lr == 0.2
    # The original is unchanged.
    assert algorithm_params(tiny_scenario).alpha == 0.1
    assert tiny_scenario.training.lr == 0.05


def test_with_overrides_long_form_equals_short_form(tiny_scenario: Scenario) -> None:
    short = with_overrides(tiny_scenario, {"algorithm.alpha": 0.3})
    long = with_overrides(tiny_scenario, {"algorithm.params.alpha": 0.3})
    assert short == long


def test_with_overrides_name_switch(tiny_scenario: Scenario) -> None:
    fedavg = with_overrides(tiny_scenario, {"algorithm.name": "fedavg", "algorithm.params": {}})
    assert fedavg.algorithm.name == "fedavg"
    assert fedavg.algorithm.params == {}


def test_with_overrides_are_validated(tiny_scenario: Scenario) -> None:
    with pytest.raises(ScenarioError, match=r"algorithm\.params\.alpha.*\(0, 1\]"):
        with_overrides(tiny_scenario, {"algorithm.alpha": 0.0})
    with pytest.raises(ScenarioError, match=r"rounds\.x: 'rounds' is not a section"):
        with_overrides(tiny_scenario, {"rounds.x": 1})
    with pytest.raises(ScenarioError, match=r"training\.momentum: unknown key"):
        with_overrides(tiny_scenario, {"training.momentum": 0.9})


@pytest.mark.parametrize(
    ("sweep", "expected"),
    [
        ({"algorithm.alpha": [1.0, 2.0]}, "sweep: algorithm.params.alpha: 2.0 is outside"),
        ({"algorithm.alpah": [0.1]}, "sweep: algorithm.params.alpah: unknown key"),
        ({"algorithm.alpha": 0.5}, "sweep.algorithm.alpha: expected a non-empty list"),
        ({"algorithm.alpha": []}, "sweep.algorithm.alpha: expected a non-empty list"),
    ],
)
def test_bad_sweep_fails_at_load_time(scenario_dict, sweep, expected) -> None:
    scenario_dict["sweep"] = sweep
    assert expected in scenario_error(scenario_dict)


LOGNORMAL_SPEEDS = {
    "law": "lognormal",
    "compute_ms_per_sample": {"median": 40.0},
    "bandwidth_kbps": {"median": 5000.0},
}


def test_a_round_policy_for_an_asynchronous_algorithm_is_refused(scenario_dict) -> None:
    """FedBuff takes each update as it arrives: a round policy would do nothing."""
    scenario_dict["algorithm"] = {"name": "fedbuff", "params": {"buffer_size": 2, "concurrency": 3}}
    scenario_dict["availability"] = {"oracle": "bernoulli", "params": {"p": [1.0, 1.0, 1.0]}}
    scenario_dict["time"] = {"speeds": LOGNORMAL_SPEEDS}
    assert scenario_from_dict(scenario_dict).time is not None  # the clock alone is taken
    scenario_dict["time"]["policy"] = {"kind": "deadline", "deadline_s": 60}
    with pytest.raises(ScenarioError, match=r"^time\.policy: fedbuff is asynchronous"):
        scenario_from_dict(scenario_dict)


@pytest.mark.parametrize("section", ["speeds", "availability"])
def test_fedscale_files_are_read_at_load(
    scenario_dict, tmp_path: Path, capsys, section: str
) -> None:
    """A missing or malformed FedScale file is a scenario error like any other: exit 2 at
    load, from ``fedram show`` too, before any run folder is made."""
    from fedram_flwr.cli.commands import main

    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    time = {"speeds": {"law": "fedscale", "path": str(bad)}}
    if section == "availability":
        time = {"speeds": LOGNORMAL_SPEEDS, "availability": {"law": "fedscale", "path": str(bad)}}
    scenario_dict["time"] = time
    with pytest.raises(ScenarioError, match=rf"^time\.{section}\.path: {bad}"):
        scenario_from_dict(scenario_dict)
    scenario_dict["time"][section]["path"] = str(tmp_path / "missing.json")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario_dict))
    for command in (["show", str(path)], ["run", str(path), "--out", str(tmp_path / "runs")]):
        code = main(command)
        err = capsys.readouterr().err
        assert code == 2 and f"time.{section}.path: {tmp_path / 'missing.json'}" in err
    assert not (tmp_path / "runs").exists()
