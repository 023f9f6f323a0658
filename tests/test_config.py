"""Scenario loading: every bad value fails at load time with a message naming the field
and what is allowed; overrides and sweeps build valid scenarios."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from fedram_flwr.config import Scenario, ScenarioError
from fedram_flwr.registry import (
    ALGORITHMS,
    ORACLES,
    algorithm_params,
    load_scenario,
    oracle_params,
    scenario_from_dict,
    with_overrides,
)

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"


def build_error(raw: dict) -> str:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(raw)
    return str(info.value)


# ---------------------------------------------------------------- valid input
def test_tiny_scenario_is_typed_and_frozen(tiny_scenario: Scenario) -> None:
    s = tiny_scenario
    assert s.data.client_classes == ((0,), (1,), (2,))
    assert s.seeds == (0,)
    assert isinstance(s.training.lr, float)
    params = algorithm_params(s)
    assert (params.alpha, params.gamma, params.lr_t, params.t_init) == (0.1, 0.1, 0.01, 0.0)
    assert oracle_params(s).rho == (0.5, 0.4, 0.1)
    with pytest.raises(AttributeError):
        s.rounds = 3  # type: ignore[misc]


def test_number_written_as_string_by_yaml_is_a_float(tmp_path: Path, scenario_dict) -> None:
    # PyYAML (YAML 1.1) reads "5e-4" as a string; float fields must accept it.
    scenario_dict["algorithm"]["params"]["lr_t"] = "__LR__"
    text = yaml.safe_dump(scenario_dict).replace("__LR__", "5e-4")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert yaml.safe_load(text)["algorithm"]["params"]["lr_t"] == "5e-4"
    assert algorithm_params(load_scenario(path)).lr_t == 5e-4


def test_name_defaults_to_file_stem(tmp_path: Path, scenario_dict) -> None:
    del scenario_dict["name"]
    path = tmp_path / "my_run.yaml"
    path.write_text(yaml.safe_dump(scenario_dict))
    assert load_scenario(path).name == "my_run"


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


# ------------------------------------------------------------- bad scenarios
def test_unknown_top_level_key(scenario_dict) -> None:
    scenario_dict["roundz"] = 3
    msg = build_error(scenario_dict)
    assert msg.startswith("roundz: unknown key")
    for allowed in ("rounds", "data", "algorithm", "availability", "seeds", "sweep"):
        assert allowed in msg


def test_unknown_key_in_section(scenario_dict) -> None:
    scenario_dict["training"]["learning_rate"] = 0.1
    msg = build_error(scenario_dict)
    assert "training.learning_rate: unknown key" in msg
    assert "batch_size, local_epochs, local_steps, lr, weight_decay" in msg


def test_unknown_algorithm_lists_allowed_names(scenario_dict) -> None:
    scenario_dict["algorithm"] = {"name": "fedprox", "params": {}}
    msg = build_error(scenario_dict)
    assert "algorithm.name" in msg and "'fedprox'" in msg
    for name in ALGORITHMS:
        assert name in msg
    assert {"fedavg", "fed-cvar-avg"} <= set(ALGORITHMS)


def test_unknown_oracle_lists_allowed_names(scenario_dict) -> None:
    scenario_dict["availability"] = {"oracle": "poisson", "params": {}}
    msg = build_error(scenario_dict)
    assert "availability.oracle" in msg and "'poisson'" in msg
    for name in ORACLES:
        assert name in msg


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5])
def test_alpha_outside_unit_interval(scenario_dict, alpha: float) -> None:
    scenario_dict["algorithm"]["params"]["alpha"] = alpha
    msg = build_error(scenario_dict)
    assert "algorithm.params.alpha" in msg
    assert "(0, 1]" in msg


@pytest.mark.parametrize("alpha", [1.0, 1e-3])
def test_alpha_boundaries_allowed(scenario_dict, alpha: float) -> None:
    scenario_dict["algorithm"]["params"]["alpha"] = alpha
    assert algorithm_params(scenario_from_dict(scenario_dict)).alpha == alpha


def test_gamma_outside_unit_interval(scenario_dict) -> None:
    scenario_dict["algorithm"]["params"]["gamma"] = 1.01
    msg = build_error(scenario_dict)
    assert "algorithm.params.gamma" in msg and "[0, 1]" in msg


def test_rho_must_sum_to_one(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["rho"] = [0.5, 0.4, 0.2]
    msg = build_error(scenario_dict)
    assert "availability.params.rho" in msg
    assert "sum to 1" in msg and "1.1" in msg


def test_rho_must_be_non_negative(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["rho"] = [0.7, 0.4, -0.1]
    assert "availability.params.rho" in build_error(scenario_dict)


def test_rho_length_must_match_num_clients(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["rho"] = [0.5, 0.5]
    msg = build_error(scenario_dict)
    assert "availability.params.rho" in msg
    assert "2 entries" in msg and "data.num_clients is 3" in msg


def test_unknown_algorithm_param_lists_allowed(scenario_dict) -> None:
    scenario_dict["algorithm"]["params"]["beta"] = 0.5
    msg = build_error(scenario_dict)
    assert msg.startswith("algorithm.params.beta: unknown key")
    assert "alpha, gamma, lr_t, t_init" in msg


def test_fedavg_takes_no_cvar_params(scenario_dict) -> None:
    scenario_dict["algorithm"] = {"name": "fedavg", "params": {"alpha": 0.1}}
    assert build_error(scenario_dict).startswith("algorithm.params.alpha: unknown key")


def test_unknown_oracle_param(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["m"] = 2
    msg = build_error(scenario_dict)
    assert msg.startswith("availability.params.m: unknown key")
    assert "clients_per_round" in msg and "rare_rho" in msg and "rho" in msg


def test_clients_per_round_above_num_clients(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["clients_per_round"] = 4
    msg = build_error(scenario_dict)
    assert "availability.params.clients_per_round" in msg and "[1, 3]" in msg


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        (None, "rounds", "ten", "rounds: expected an integer, got 'ten'"),
        (None, "rounds", 2.5, "rounds: expected an integer"),
        (None, "rounds", True, "rounds: expected an integer"),
        ("training", "lr", "fast", "training.lr: expected a number, got 'fast'"),
        ("training", "lr", float("nan"), "training.lr: expected a finite number"),
        (None, "seeds", 3, "seeds: expected a list"),
        ("data", "num_clients", "3", "data.num_clients: expected an integer"),
    ],
)
def test_wrong_types_name_the_field(scenario_dict, section, key, value, expected) -> None:
    (scenario_dict if section is None else scenario_dict[section])[key] = value
    assert expected in build_error(scenario_dict)


def test_literal_field_lists_allowed_values(scenario_dict) -> None:
    scenario_dict["data"]["dataset"] = "imagenet"
    msg = build_error(scenario_dict)
    assert "data.dataset" in msg and "'imagenet'" in msg
    assert "fashion-mnist, mnist, cifar10, svhn, gaussian2d" in msg


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        (None, "rounds", 0, "rounds: 0 is outside the allowed range [1, inf]"),
        ("training", "lr", 0.0, "training.lr: 0.0 is outside the allowed range (0, inf]"),
        ("data", "train_fraction", 1.5, "data.train_fraction: 1.5 is outside"),
    ],
)
def test_out_of_range_values(scenario_dict, section, key, value, expected) -> None:
    (scenario_dict if section is None else scenario_dict[section])[key] = value
    assert expected in build_error(scenario_dict)


def test_missing_required_key(scenario_dict) -> None:
    del scenario_dict["rounds"]
    assert build_error(scenario_dict) == "rounds: required key is missing"


def test_client_classes_length_must_match(scenario_dict) -> None:
    scenario_dict["data"]["client_classes"] = [[0], [1]]
    msg = build_error(scenario_dict)
    assert "data.client_classes" in msg and "data.num_clients is 3" in msg


def test_rare_rho_count_must_match_rare_clients(scenario_dict) -> None:
    del scenario_dict["availability"]["params"]["rho"]
    scenario_dict["availability"]["params"]["rare_rho"] = [0.01, 0.02]
    msg = build_error(scenario_dict)
    # 3 clients, frequent_fraction 0.6667 -> one rare client.
    assert "availability.params.rare_rho" in msg and "1 rare clients" in msg


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


# ---------------------------------------------------------- overrides, sweeps
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


def test_sweep_expands_to_cartesian_product(scenario_dict) -> None:
    scenario_dict["sweep"] = {
        "algorithm.alpha": [1.0, 0.3, 0.1],
        "training.lr": [0.1, 0.01],
    }
    variants = scenario_from_dict(scenario_dict).variants()
    assert len(variants) == 6
    got = {(algorithm_params(v).alpha, v.training.lr) for _, v in variants}
    assert got == {(a, lr) for a in (1.0, 0.3, 0.1) for lr in (0.1, 0.01)}
    labels = [label for label, _ in variants]
    assert len(set(labels)) == 6
    assert "alpha=0.3_lr=0.01" in labels
    for label, v in variants:
        assert label == f"alpha={algorithm_params(v).alpha}_lr={v.training.lr}"
        assert v.sweep == {}
        # Everything not swept is the base scenario's.
        assert algorithm_params(v).gamma == 0.1
        assert v.data == scenario_from_dict(scenario_dict).data


def test_no_sweep_gives_one_default_variant(tiny_scenario: Scenario) -> None:
    assert tiny_scenario.variants() == [("default", tiny_scenario)]


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
    assert expected in build_error(scenario_dict)


def test_to_dict_round_trips(tiny_scenario: Scenario) -> None:
    again = scenario_from_dict(yaml.safe_load(yaml.safe_dump(tiny_scenario.to_dict())))
    assert again == tiny_scenario
