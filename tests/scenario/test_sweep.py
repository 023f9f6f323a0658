"""A scenario's sweep (fedram_flwr/scenario/sweep.py): the product of the keys' value lists, and
comma-joined keys whose rows keep settings chosen together (e.g. per algorithm)."""

from __future__ import annotations

import pytest

from fedram_flwr.registry import algorithm_params, scenario_from_dict
from fedram_flwr.scenario.config import ScenarioError
from fedram_flwr.scenario.sweep import apply_overrides, swept_values
from tests.helpers import scenario_error

ZIPPED = "algorithm.alpha, training.lr"


def test_swept_values_follow_the_sweep_product_order() -> None:
    sweep = {"availability.p_min": [0.1, 0.5], "algorithm.name": ["fedar", "mifa"]}
    assert swept_values(sweep) == [
        {"availability.p_min": 0.1, "algorithm.name": "fedar"},
        {"availability.p_min": 0.1, "algorithm.name": "mifa"},
        {"availability.p_min": 0.5, "algorithm.name": "fedar"},
        {"availability.p_min": 0.5, "algorithm.name": "mifa"},
    ]
    assert swept_values({}) == [{}]


def test_a_comma_joined_key_zips_its_rows_and_crosses_the_other_keys() -> None:
    sweep = {"data.num_clients": [4, 8], ZIPPED: [[1.0, 0.1], [0.3, 0.01]]}
    assert swept_values(sweep) == [
        {"data.num_clients": 4, "algorithm.alpha": 1.0, "training.lr": 0.1},
        {"data.num_clients": 4, "algorithm.alpha": 0.3, "training.lr": 0.01},
        {"data.num_clients": 8, "algorithm.alpha": 1.0, "training.lr": 0.1},
        {"data.num_clients": 8, "algorithm.alpha": 0.3, "training.lr": 0.01},
    ]


def test_zipped_variants_carry_their_own_row(scenario_dict) -> None:
    scenario_dict["sweep"] = {ZIPPED: [[1.0, 0.1], [0.3, 0.01], [0.1, 0.1]]}
    variants = dict(scenario_from_dict(scenario_dict).variants())
    assert list(variants) == ["alpha=1.0_lr=0.1", "alpha=0.3_lr=0.01", "alpha=0.1_lr=0.1"]
    got = {(algorithm_params(v).alpha, v.training.lr) for v in variants.values()}
    assert got == {(1.0, 0.1), (0.3, 0.01), (0.1, 0.1)}  # 3 rows, not the 9-point grid


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([[1.0, 0.1], [0.3]], r"sweep\.algorithm\.alpha, training\.lr\[1\]: expected a list of 2"),
        ([[1.0, 0.1], 0.3], r"\[1\]: expected a list of 2 values, one for each of algorithm"),
        ([], "expected a non-empty list"),
    ],
)
def test_bad_zipped_rows_name_the_key_and_the_row(scenario_dict, rows, expected) -> None:
    scenario_dict["sweep"] = {ZIPPED: rows}
    assert pytest.raises(ScenarioError, scenario_from_dict, scenario_dict).match(expected)


def test_a_field_named_twice_in_a_key_is_an_error(scenario_dict) -> None:
    scenario_dict["sweep"] = {"training.lr, training.lr": [[0.1, 0.2]]}
    assert "name each field once" in scenario_error(scenario_dict, scenario_from_dict)


def test_overriding_one_zipped_field_keeps_the_others_rows(scenario_dict) -> None:
    scenario_dict["sweep"] = {
        "algorithm.alpha, training.lr, training.batch_size": [[1.0, 0.1, 4], [0.3, 0.01, 8]]
    }
    raw = apply_overrides(scenario_dict, {"training.lr": 0.5})
    assert raw["sweep"] == {"algorithm.alpha, training.batch_size": [[1.0, 4], [0.3, 8]]}
    raw = apply_overrides(raw, {"algorithm.params.alpha": 0.2})  # long form of a short key
    assert raw["sweep"] == {"training.batch_size": [4, 8]}
    variants = scenario_from_dict(raw).variants()
    assert [
        (v.training.lr, algorithm_params(v).alpha, v.training.batch_size) for _, v in variants
    ] == [
        (0.5, 0.2, 4),
        (0.5, 0.2, 8),
    ]
    assert "training.lr" in next(iter(scenario_dict["sweep"]))  # the input is untouched


def test_sections_swept_whole_with_the_algorithm_are_labelled_as_folder_names(
    scenario_dict,
) -> None:
    """One sweep mixing round policies and FedBuff (docs/time-results.md): a section
    with a name is labelled by it, one without by its values joined with '-'."""
    speeds = {"compute_ms_per_sample": {"median": 20.0}, "bandwidth_kbps": {"median": 1e3}}
    scenario_dict["time"] = {"speeds": speeds}
    scenario_dict["sweep"] = {
        "algorithm, time.policy, rounds": [
            [{"name": "fedavg"}, {"kind": "wait-all"}, 3],
            [{"name": "fedavg"}, {"kind": "deadline", "deadline_s": 60.0}, 5],
            [
                {"name": "fedbuff", "params": {"buffer_size": 2, "concurrency": 3}},
                {"kind": "wait-all"},
                9,
            ],
            [{"name": "mifa"}, {"kind": "deadline", "deadline_s": 60.0, "late": "keep"}, 5],
        ]
    }
    variants = dict(scenario_from_dict(scenario_dict).variants())
    assert list(variants) == [
        "name=fedavg_policy=wait-all_rounds=3",
        "name=fedavg_policy=deadline-60.0_rounds=5",
        "name=fedbuff_policy=wait-all_rounds=9",
        "name=mifa_policy=deadline-60.0-keep_rounds=5",
    ]
    mifa = variants["name=mifa_policy=deadline-60.0-keep_rounds=5"]
    assert (mifa.algorithm.name, mifa.time.policy.late, mifa.rounds) == ("mifa", "keep", 5)
    assert algorithm_params(variants["name=fedbuff_policy=wait-all_rounds=9"]).buffer_size == 2
