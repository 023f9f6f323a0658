"""The scenario schema (fedram_flwr/scenario/config.py): types, ranges and keys of every section
fail at parse time naming the field and what is allowed; sweeps expand into variants.
The registered ``params`` are the registry's (tests/registry)."""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedram_flwr.clock import lognormal_speeds, scenario_speeds
from fedram_flwr.registry import (
    algorithm_params,
    load_scenario,
    oracle_params,
    scenario_from_dict,
    with_overrides,
)
from fedram_flwr.rundir import scenario_fingerprint
from fedram_flwr.scenario.config import (
    Scenario,
    ScenarioError,
    apply_overrides,
    parse_scenario,
    read_scenario_file,
)
from tests.helpers import scenario_error


def build_error(raw: dict) -> str:
    """The schema's error for ``raw`` (no registry involved)."""
    return scenario_error(raw, parse_scenario)


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
    allowed = "batch_size, batched, device, drop_last, local_epochs, local_steps, lr, lr_schedule, "
    assert allowed + "weight_decay" in msg


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
    assert "fashion-mnist, mnist, cifar10, svhn, cinic10, gaussian2d" in msg


def test_an_unknown_lr_schedule_is_named_with_the_allowed_ones(scenario_dict) -> None:
    assert scenario_from_dict(scenario_dict).training.lr_schedule == "constant"
    scenario_dict["training"]["lr_schedule"] = "cosine"
    assert build_error(scenario_dict) == (
        "training.lr_schedule: 'cosine' is not allowed; allowed values: constant, inv-sqrt"
    )


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        (None, "rounds", 0, "rounds: 0 is outside the allowed range [1, 1e+06] (a million"),
        (None, "rounds", 10**30, f"rounds: {10**30} is outside the allowed range [1, 1e+06]"),
        (
            None,
            "max_failed_rounds",
            10**30,
            "max_failed_rounds: 1000000000000000000000000000000 "
            "is outside the allowed range [1, 1e+06] (a million rounds would take hours",
        ),
        ("training", "lr", 0.0, "training.lr: 0.0 is outside the allowed range (0, inf)"),
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


# ---------------------------------------------------------- overrides, sweeps


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


def test_to_dict_round_trips(tiny_scenario: Scenario) -> None:
    again = scenario_from_dict(yaml.safe_load(yaml.safe_dump(tiny_scenario.to_dict())))
    assert again == tiny_scenario


def test_schema_leaves_params_to_the_registry(scenario_dict) -> None:
    scenario_dict["algorithm"]["params"]["alpha"] = 2.0  # outside (0, 1]
    assert parse_scenario(scenario_dict).algorithm.params["alpha"] == 2.0
    with pytest.raises(ScenarioError, match=r"algorithm\.params\.alpha: 2\.0 is outside"):
        scenario_from_dict(scenario_dict)


def test_config_imports_only_its_leaf_schema_from_the_package() -> None:
    """config.py is the bottom of the house: no package import at any level but its leaves
    schema.py (the error and the YAML coercion), which imports none, sweep.py (dotted
    overrides), time_config.py (the time section) and data_config.py (the data section),
    which import only schema.py."""
    for name, allowed in (
        (
            "config.py",
            {
                "fedram_flwr.scenario.schema",
                "fedram_flwr.scenario.sweep",
                "fedram_flwr.scenario.time_config",
                "fedram_flwr.scenario.data_config",
            },
        ),
        ("sweep.py", {"fedram_flwr.scenario.schema"}),
        ("time_config.py", {"fedram_flwr.scenario.schema"}),
        ("data_config.py", {"fedram_flwr.scenario.schema"}),
        ("schema.py", set()),
    ):
        path = Path(__file__).resolve().parents[2] / "fedram_flwr" / "scenario" / name
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
        assert imported, "the walk found no imports"
        assert {m for m in imported if m.split(".")[0] == "fedram_flwr"} == allowed, imported


def test_sweep_over_whole_algorithm_sections(scenario_dict) -> None:
    scenario_dict["sweep"] = {
        "algorithm": [{"name": "fedavg"}, {"name": "rfedfair", "params": {"alpha": [0.6]}}]
    }
    variants = dict(scenario_from_dict(scenario_dict).variants())
    assert list(variants) == ["name=fedavg", "name=rfedfair"]
    assert variants["name=rfedfair"].algorithm.params == {"alpha": [0.6]}
    scenario_dict["sweep"]["algorithm"].append({"name": "fedavg"})
    with pytest.raises(ScenarioError, match="two variants are labelled 'name=fedavg'"):
        scenario_from_dict(scenario_dict)


# ------------------------------------------- overrides of swept fields
def test_override_of_a_swept_field_replaces_the_sweep(scenario_dict) -> None:
    scenario_dict["sweep"] = {"algorithm.alpha": [1.0, 0.1], "training.lr": [0.1, 0.01]}
    raw = apply_overrides(scenario_dict, {"algorithm.params.alpha": 0.5})  # long form
    assert raw["sweep"] == {"training.lr": [0.1, 0.01]}
    variants = scenario_from_dict(raw).variants()
    assert [label for label, _ in variants] == ["lr=0.1", "lr=0.01"]
    assert {algorithm_params(v).alpha for _, v in variants} == {0.5}
    assert scenario_dict["sweep"]["algorithm.alpha"] == [1.0, 0.1]  # input untouched


def test_override_inside_a_section_swept_whole_is_an_error(scenario_dict) -> None:
    scenario_dict["sweep"] = {"algorithm": [{"name": "fedavg"}, {"name": "afl"}]}
    with pytest.raises(ScenarioError, match=r"algorithm\.alpha: inside sweep\.algorithm"):
        apply_overrides(scenario_dict, {"algorithm.alpha": 0.5})


# -------------------------------------------------- relative paths
def test_relative_paths_resolve_against_the_working_directory(
    scenario_dict, tmp_path: Path, monkeypatch
) -> None:
    """data.root (given or default) and a trace's path, in the scenario or a sweep,
    are absolute once parsed; absolute ones are kept."""
    monkeypatch.chdir(tmp_path)
    assert parse_scenario(scenario_dict).data.root == str(tmp_path / "data")  # the default
    scenario_dict["data"]["root"] = "../shared/data"
    scenario_dict["availability"] = {"oracle": "trace", "params": {"path": "t/a.csv"}}
    scenario_dict["sweep"] = {"availability.params.path": ["t/a.csv", "/abs/b.csv"]}
    s = parse_scenario(scenario_dict)
    assert s.data.root == str(tmp_path.parent / "shared" / "data")
    assert s.availability.params["path"] == str(tmp_path / "t" / "a.csv")
    paths = [v.availability.params["path"] for _, v in s.variants()]
    assert paths == [str(tmp_path / "t" / "a.csv"), "/abs/b.csv"]
    monkeypatch.chdir(tmp_path.parent)  # reparsing the resolved scenario keeps its paths
    assert parse_scenario(s.to_dict()) == s


# --------------------------------------------------------- files and ranges
def test_duplicate_keys_are_rejected_naming_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("rounds: 6\ndata:\n  num_clients: 3\n  num_clients: 4\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml: invalid YAML: line 4, column 3: "):
        read_scenario_file(path)


@pytest.mark.parametrize(
    ("seed", "ok"), [(0, True), (2**32 - 1, True), (2**32, False), (-1, False), (2**70, False)]
)
def test_seeds_are_0_to_2_32_minus_1(scenario_dict, seed: int, ok: bool) -> None:
    scenario_dict["seeds"] = [0, seed]
    if ok:
        assert parse_scenario(scenario_dict).seeds == (0, seed)
    else:
        assert build_error(scenario_dict).startswith(f"seeds[1]: {seed} is outside")


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("data", "cluster_std", -0.1, "data.cluster_std: -0.1 is outside"),
        ("data", "num_clients", 100_001, "data.num_clients: 100001 is outside"),
    ],
)
def test_more_out_of_range_values(scenario_dict, section, key, value, expected) -> None:
    scenario_dict[section][key] = value
    scenario_dict["data"].pop("client_classes")
    assert build_error(scenario_dict).startswith(expected)


@pytest.mark.parametrize("section", ["data", "training", "model", "availability"])
def test_null_section_is_an_error(scenario_dict, section: str) -> None:
    scenario_dict[section] = None
    assert build_error(scenario_dict).startswith(f"{section}: expected a mapping, got null")


def test_default_device_is_left_out_of_the_resolved_scenario(scenario_dict) -> None:
    """Fingerprints of runs recorded before ``training.device`` existed stay valid."""
    assert "device" not in scenario_from_dict(scenario_dict).to_dict()["training"]
    scenario_dict["training"]["device"] = "cuda"
    resolved = scenario_from_dict(scenario_dict)
    assert resolved.training.device == "cuda" and resolved.to_dict()["training"]["device"] == "cuda"
    assert scenario_from_dict(resolved.to_dict()).training.device == "cuda"


def test_default_lr_schedule_is_left_out_of_the_resolved_scenario(scenario_dict) -> None:
    """Fingerprints of runs recorded before ``training.lr_schedule`` existed stay valid."""
    before = scenario_fingerprint(scenario_from_dict(scenario_dict).to_dict(), 0)
    assert "lr_schedule" not in scenario_from_dict(scenario_dict).to_dict()["training"]
    scenario_dict["training"]["lr_schedule"] = "constant"  # spelled out: the same run
    assert scenario_fingerprint(scenario_from_dict(scenario_dict).to_dict(), 0) == before
    scenario_dict["training"]["lr_schedule"] = "inv-sqrt"
    resolved = scenario_from_dict(scenario_dict)
    assert resolved.to_dict()["training"]["lr_schedule"] == "inv-sqrt"
    assert scenario_from_dict(resolved.to_dict()).training.lr_schedule == "inv-sqrt"
    assert scenario_fingerprint(resolved.to_dict(), 0) != before


def test_max_failed_rounds_default_is_left_out_and_bad_values_are_named(scenario_dict) -> None:
    """Fingerprints of runs recorded before ``max_failed_rounds`` existed stay valid."""
    before = scenario_fingerprint(scenario_from_dict(scenario_dict).to_dict(), 0)
    assert scenario_from_dict(scenario_dict).max_failed_rounds == 3
    scenario_dict["max_failed_rounds"] = 3  # spelled out: the same run
    assert "max_failed_rounds" not in scenario_from_dict(scenario_dict).to_dict()
    assert scenario_fingerprint(scenario_from_dict(scenario_dict).to_dict(), 0) == before
    scenario_dict["max_failed_rounds"] = 1
    resolved = scenario_from_dict(scenario_dict)
    assert scenario_from_dict(resolved.to_dict()).max_failed_rounds == 1
    assert scenario_fingerprint(resolved.to_dict(), 0) != before
    for bad in (0, -2, 1.5, "x"):
        scenario_dict["max_failed_rounds"] = bad
        assert build_error(scenario_dict).startswith("max_failed_rounds:")


# ------------------------------------------------------------- time
KEYS_BEFORE_TIME = {
    "name", "rounds", "data", "availability", "algorithm", "training", "model",
    "eval_every", "client_metrics", "hcvar_alpha", "seeds", "sweep", "description",
}  # fmt: skip
LOGNORMAL_TIME = {
    "speeds": {
        "law": "lognormal",
        "compute_ms_per_sample": {"median": 40.0, "sigma": 0.5},
        "bandwidth_kbps": {"median": 2000.0, "sigma": 0.0},
    },
    "availability": {"law": "diurnal", "base": [0.3], "amplitude": 0.6, "slot_seconds": 120},
}


def test_a_scenario_without_time_resolves_as_before(scenario_dict) -> None:
    """No time section: the resolved scenario (and so its fingerprint) is today's."""
    resolved = scenario_from_dict(scenario_dict)
    assert resolved.time is None
    assert set(resolved.to_dict()) == KEYS_BEFORE_TIME
    before = scenario_fingerprint(resolved.to_dict(), 0)
    scenario_dict["time"] = None  # spelled out: the same run
    assert scenario_fingerprint(scenario_from_dict(scenario_dict).to_dict(), 0) == before


def test_a_time_section_round_trips(scenario_dict) -> None:
    scenario_dict["time"] = copy.deepcopy(LOGNORMAL_TIME)
    resolved = scenario_from_dict(scenario_dict)
    assert resolved.time.speeds.compute_ms_per_sample.median == 40.0
    assert resolved.time.availability.base == (0.3,)
    assert resolved.to_dict()["time"]["availability"]["slot_seconds"] == 120.0
    again = scenario_from_dict(yaml.safe_load(yaml.safe_dump(resolved.to_dict())))
    assert again == resolved
    before = scenario_fingerprint(scenario_from_dict({**scenario_dict, "time": None}).to_dict(), 0)
    assert scenario_fingerprint(resolved.to_dict(), 0) != before


def test_the_wall_clock_needs_no_speeds_and_leaves_simulated_runs_unchanged(
    scenario_dict,
) -> None:
    """``time.clock: wall`` with a policy alone resolves (real devices: no speeds) and
    round-trips; ``clock: simulated`` spelled out is the scenario without it (same
    fingerprint: run folders written before the field existed still match)."""
    scenario_dict["time"] = {"clock": "wall", "policy": {"kind": "deadline", "deadline_s": 5}}
    resolved = scenario_from_dict(scenario_dict)
    assert resolved.time.clock == "wall" and resolved.time.policy.deadline_s == 5.0
    assert scenario_from_dict(yaml.safe_load(yaml.safe_dump(resolved.to_dict()))) == resolved
    scenario_dict["time"] = copy.deepcopy(LOGNORMAL_TIME)
    before = scenario_from_dict(scenario_dict).to_dict()
    scenario_dict["time"]["clock"] = "simulated"
    assert scenario_from_dict(scenario_dict).to_dict() == before and "clock" not in before["time"]


def test_emulation_is_off_unless_asked_and_then_recorded(scenario_dict) -> None:
    """``time.emulate`` left out or false: the resolved scenario and its fingerprint are
    those of the section without it; true: recorded, round-tripped, another run."""
    scenario_dict["time"] = copy.deepcopy(LOGNORMAL_TIME)
    resolved = scenario_from_dict(scenario_dict)
    assert resolved.time.emulate is False
    assert "emulate" not in resolved.to_dict()["time"]
    before = scenario_fingerprint(resolved.to_dict(), 0)
    scenario_dict["time"]["emulate"] = False
    assert scenario_fingerprint(scenario_from_dict(scenario_dict).to_dict(), 0) == before
    scenario_dict["time"]["emulate"] = True
    emulated = scenario_from_dict(scenario_dict)
    assert emulated.to_dict()["time"]["emulate"] is True
    assert scenario_from_dict(emulated.to_dict()) == emulated
    assert scenario_fingerprint(emulated.to_dict(), 0) != before
    assert "emulate_from" not in emulated.to_dict()["time"]  # the default, node
    scenario_dict["time"]["emulate_from"] = "push"
    from_push = scenario_from_dict(scenario_dict)
    assert from_push.to_dict()["time"]["emulate_from"] == "push"
    assert scenario_from_dict(from_push.to_dict()) == from_push


@pytest.mark.parametrize(
    ("time", "expected"),
    [
        ({"speeds": {"law": "gamma"}}, "time.speeds.law: 'gamma' is not allowed; allowed values: "
         "lognormal, fedscale"),
        ({"availability": {"law": "weekly"}}, "time.availability.law: 'weekly' is not allowed; "
         "allowed values: rounds, fedscale, diurnal"),
        ({}, "time.speeds.compute_ms_per_sample: required for law lognormal"),
        ({"speeds": {**LOGNORMAL_TIME["speeds"], "path": "cap.json"}},
         "time.speeds.path: applies to law fedscale only; time.speeds.law is lognormal"),
        ({"speeds": {"law": "fedscale"}}, "time.speeds.path: required for law fedscale"),
        ({"speeds": {"law": "fedscale", "path": "c.json", "bandwidth_kbps": {"median": 1.0}}},
         "time.speeds.bandwidth_kbps: applies to law lognormal only"),
        ({"speeds": {**LOGNORMAL_TIME["speeds"], "compute_ms_per_sample": {"median": 0}}},
         "time.speeds.compute_ms_per_sample.median: 0.0 is outside the allowed range (0, inf)"),
        ({"speeds": {**LOGNORMAL_TIME["speeds"], "bandwidth_kbps": {"median": 1, "sigma": -1}}},
         "time.speeds.bandwidth_kbps.sigma: -1.0 is outside the allowed range [0, inf)"),
        ({"speeds": {**LOGNORMAL_TIME["speeds"], "bandwidth_kbps": {"sigma": 1}}},
         "time.speeds.bandwidth_kbps.median: required key is missing"),
        ({**LOGNORMAL_TIME, "availability": {"law": "diurnal"}},
         "time.availability.base: required for law diurnal"),
        ({**LOGNORMAL_TIME, "availability": {"law": "rounds", "base": [0.5]}},
         "time.availability.base: applies to law diurnal only; time.availability.law is rounds"),
        ({**LOGNORMAL_TIME, "availability": {"law": "diurnal", "base": [1.5]}},
         "time.availability.base[0]: 1.5 is outside the allowed range [0, 1]"),
        ({**LOGNORMAL_TIME, "availability": {"law": "diurnal", "base": [0.5, 0.5]}},
         "time.availability.base: has 2 entries; give one value or one per client "
         "(data.num_clients = 3)"),
        ({**LOGNORMAL_TIME, "availability": {"law": "fedscale"}},
         "time.availability.path: required for law fedscale"),
        ({**LOGNORMAL_TIME, "availability": {"law": "fedscale", "path": "b.json",
                                             "clients": [1]}},
         "time.availability.clients: has 1 entries; give one per client"),
        ({**LOGNORMAL_TIME, "availability": {"tick_seconds": 0}},
         "time.availability.tick_seconds: 0.0 is outside the allowed range (0, 1e+09]"),
        ({**LOGNORMAL_TIME, "availability": {"law": "diurnal", "base": [0.5],
                                             "period_seconds": 1e308}},
         "time.availability.period_seconds: 1e+308 is outside the allowed range (0, 1e+09] "
         "(1e9 s, about 32 years of simulated time, is past the end of any run)"),
        ({**LOGNORMAL_TIME, "policy": {"kind": "over-selection", "select": 4}},
         "time.policy.select: 4 is outside the allowed range [1, 3] (a round cannot use "
         "more than the data.num_clients = 3 clients)"),
        ({**LOGNORMAL_TIME, "policy": {"kind": "over-selection", "select": 1, "over": 1e300}},
         "time.policy.over: 1e+300 is outside the allowed range [1, 3]"),
        ({**LOGNORMAL_TIME, "wallclock": {}}, "time.wallclock: unknown key; allowed keys of "
         "time: availability, clock, emulate, emulate_from, policy, speeds"),
        ({**LOGNORMAL_TIME, "clock": "real"},
         "time.clock: 'real' is not allowed; allowed values: simulated, wall"),
        ({"clock": "wall", "availability": {"law": "diurnal", "base": [0.5]}},
         "time.availability: applies to clock simulated only"),
        ({"clock": "wall", "speeds": {"law": "lognormal",
                                      "compute_ms_per_sample": {"median": 1.0}}},
         "time.speeds.bandwidth_kbps: required for law lognormal"),
        ({"emulate": True}, "time.emulate: there is no time model to emulate; give the "
         "devices in time.speeds"),
        ({**LOGNORMAL_TIME, "emulate": "yes"}, "time.emulate: expected true or false, got 'yes'"),
        ({**LOGNORMAL_TIME, "emulate_from": "push"},
         "time.emulate_from: applies with time.emulate: true only; time.emulate is false"),
        ({**LOGNORMAL_TIME, "emulate": True, "emulate_from": "server"},
         "time.emulate_from: 'server' is not allowed; allowed values: node, push"),
    ],
)  # fmt: skip
def test_bad_time_sections_name_the_field(scenario_dict, time: dict, expected: str) -> None:
    scenario_dict["time"] = time
    assert build_error(scenario_dict).startswith(expected)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({"kind": "first"}, "time.policy.kind: 'first' is not allowed; allowed values: "
         "wait-all, deadline, over-selection"),
        ({"kind": "deadline"}, "time.policy.deadline_s: required for kind deadline"),
        ({"kind": "deadline", "deadline_s": 0},
         "time.policy.deadline_s: 0.0 is outside the allowed range (0, inf)"),
        ({"kind": "deadline", "deadline_s": 5, "late": "later"},
         "time.policy.late: 'later' is not allowed; allowed values: drop, keep"),
        ({"kind": "deadline", "deadline_s": 5, "select": 3},
         "time.policy.select: applies to kind over-selection only; time.policy.kind is deadline"),
        ({"deadline_s": 5},
         "time.policy.deadline_s: applies to kind deadline only; time.policy.kind is wait-all"),
        ({"late": "keep"}, "time.policy.late: applies to kind deadline, over-selection only; "
         "time.policy.kind is wait-all"),
        ({"kind": "over-selection"}, "time.policy.select: required for kind over-selection"),
        ({"kind": "over-selection", "select": 0},
         "time.policy.select: 0 is outside the allowed range [1, inf)"),
        ({"kind": "over-selection", "select": 2, "over": 0.5},
         "time.policy.over: 0.5 is outside the allowed range [1, inf)"),
        ({"kind": "deadline", "deadline_s": 5, "wait": 1}, "time.policy.wait: unknown key"),
    ],
)  # fmt: skip
def test_bad_round_policies_name_the_field(scenario_dict, policy: dict, expected: str) -> None:
    scenario_dict["time"] = {**LOGNORMAL_TIME, "policy": policy}
    assert build_error(scenario_dict).startswith(expected)


def test_a_round_policy_round_trips(scenario_dict) -> None:
    scenario_dict["time"] = {
        **LOGNORMAL_TIME,
        "policy": {"kind": "over-selection", "select": 2, "over": 1.5, "late": "keep"},
    }
    resolved = scenario_from_dict(scenario_dict)
    assert resolved.time.policy.select == 2 and resolved.time.policy.late == "keep"
    assert scenario_from_dict(yaml.safe_load(yaml.safe_dump(resolved.to_dict()))) == resolved
    scenario_dict["time"] = copy.deepcopy(LOGNORMAL_TIME)
    assert scenario_from_dict(scenario_dict).time.policy.kind == "wait-all"  # the default


def test_time_paths_resolve_against_the_working_directory(
    scenario_dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    scenario_dict["time"] = {
        "speeds": {"law": "fedscale", "path": "capacity.json"},
        "availability": {"law": "fedscale", "path": "traces/behave.json", "start_time": 60},
    }
    resolved = parse_scenario(scenario_dict)  # the files are read when it is validated
    assert resolved.time.speeds.path == str(tmp_path / "capacity.json")
    assert resolved.time.availability.path == str(tmp_path / "traces" / "behave.json")


def test_scenario_speeds_follow_the_time_section(scenario_dict, tmp_path: Path) -> None:
    scenario_dict["time"] = copy.deepcopy(LOGNORMAL_TIME)
    s = scenario_from_dict(scenario_dict)
    speeds = scenario_speeds(s.time.speeds, s.data.num_clients, 4)
    want = lognormal_speeds(3, 4, (40.0, 0.5), (2000.0, 0.0))
    assert np.array_equal(speeds.compute_ms_per_sample, want.compute_ms_per_sample)
    assert speeds.bandwidth_kbps.tolist() == [2000.0] * 3
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps({str(i): {"computation": i, "communication": 10 * i}
                                for i in (1, 2, 3)}))  # fmt: skip
    scenario_dict["time"] = {"speeds": {"law": "fedscale", "path": str(path), "clients": [3, 1, 1]}}
    s = scenario_from_dict(scenario_dict)
    assert scenario_speeds(s.time.speeds, 3, 0).bandwidth_kbps.tolist() == [30.0, 10.0, 10.0]
    scenario_dict["time"]["speeds"]["clients"] = [3, 1, 9]
    s = parse_scenario(scenario_dict)
    with pytest.raises(ValueError, match=r"^time\.speeds\.clients: client 9 is not in"):
        scenario_speeds(s.time.speeds, 3, 0)
    with pytest.raises(ScenarioError, match=r"^time\.speeds\.clients: client 9 is not in"):
        scenario_from_dict(scenario_dict)  # at load, as every scenario error
    path.write_text(json.dumps({"1": {"computation": 0, "communication": 1}}))
    scenario_dict["time"]["speeds"]["clients"] = [1, 1, 1]
    s = parse_scenario(scenario_dict)
    with pytest.raises(ValueError, match=r"^time\.speeds\.path: .*client 1\.computation: 0 is"):
        scenario_speeds(s.time.speeds, 3, 0)
    with pytest.raises(ScenarioError, match=r"^time\.speeds\.path: .*client 1\.computation: 0"):
        scenario_from_dict(scenario_dict)


def test_overrides_and_sweeps_start_an_absent_time_section(scenario_dict) -> None:
    base = scenario_from_dict(scenario_dict)
    speeds = {"law": "lognormal", "compute_ms_per_sample": {"median": 5}}
    with_time = with_overrides(base, {"time.speeds": {**speeds, "bandwidth_kbps": {"median": 9}}})
    assert with_time.time.speeds.bandwidth_kbps.median == 9.0
    assert (
        with_overrides(
            with_time, {"time.availability.tick_seconds": 2}
        ).time.availability.tick_seconds
        == 2.0
    )
    with pytest.raises(ScenarioError, match=r"^time\.speeds\.compute_ms_per_sample: required"):
        with_overrides(base, {"time.availability.tick_seconds": 2})
    scenario_dict["sweep"] = {
        "time.speeds": [{**speeds, "bandwidth_kbps": {"median": m}} for m in (1, 2)]
    }
    assert [
        v.time.speeds.bandwidth_kbps.median for _, v in scenario_from_dict(scenario_dict).variants()
    ] == [1.0, 2.0]
