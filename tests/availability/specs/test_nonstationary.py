"""The ``nonstationary`` oracle's spec (fedram_flwr/availability/specs/nonstationary.py): the
paper's p_i = <nu_i, phi> from each client's labels, every bad parameter a ScenarioError
naming the field, and the example scenario runs."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.availability import (
    DYNAMICS,
    default_phi_max,
    fedawe_base_p,
    fedawe_phi,
    read_trace,
)
from fedram_flwr.engines import run_in_process
from fedram_flwr.engines.experiment import Experiment, availability_law, build_oracle
from fedram_flwr.registry import load_scenario, oracle_params, with_overrides
from fedram_flwr.rng import stream
from fedram_flwr.scenario.config import ScenarioError
from tests.helpers import scenario_with

EXAMPLE = "scenarios/fedawe_nonstationary_gaussian.yaml"


def test_one_class_per_client_gets_its_class_phi(scenario_dict) -> None:
    """Tiny scenario: client k holds only class k, so nu_k = e_k and p_k = phi_k."""
    s = scenario_with(scenario_dict, "nonstationary", {"dynamics": "staircase"})
    phi = fedawe_phi(default_phi_max(3), stream("fedawe-phi", 4))
    m = build_oracle(s, 4)
    assert np.allclose(m.base_p, phi)
    assert np.allclose(availability_law(s, 4), phi * (1 + 0.4) / 2)  # staircase, P = 20


def test_labels_rule_reads_the_runs_partition() -> None:
    s = load_scenario(EXAMPLE)
    exp = Experiment(s, 1)
    counts = np.array([np.bincount(y, minlength=4) for y in exp.data.client_y])
    phi = fedawe_phi(default_phi_max(4), stream("fedawe-phi", 1))
    assert np.allclose(build_oracle(s, 1).base_p, fedawe_base_p(counts, phi))


def test_explicit_p_and_phi_max(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "nonstationary", {"p": [0.2, 0.5, 1.0]})
    assert build_oracle(s, 0).base_p.tolist() == [0.2, 0.5, 1.0]
    s = scenario_with(scenario_dict, "nonstationary", {"phi_max": [0.0, 0.0, 0.0]})
    assert build_oracle(s, 0).base_p.tolist() == [0.0, 0.0, 0.0]


BAD = [
    ({"gamma": 0.6}, r"availability\.params\.gamma: 0\.6 is outside the allowed range \[0, 0\.5\]"),
    ({"period": 0}, r"availability\.params\.period: 0 is outside"),
    ({"delta0": 1.5}, r"availability\.params\.delta0: 1\.5 is outside"),
    ({"staircase_low": -0.1}, r"availability\.params\.staircase_low: -0\.1 is outside"),
    ({"p": [0.5, 0.5]}, r"availability\.params\.p: has 2 entries, data\.num_clients is 3"),
    ({"p": [0.5, 1.5, 0.1]}, r"availability\.params\.p\[1\]: 1\.5 is outside .*\[0, 1\]"),
    ({"phi_max": [1.0, 2.0, 1.0]}, r"availability\.params\.phi_max\[1\]: 2\.0 is outside"),
    ({"p": [0.1] * 3, "phi_max": [1.0] * 3}, r"availability\.params: give p .* or phi_max"),
    ({"dynamics": "cosine"}, r"availability\.params\.dynamics: .*cosine.*interleaved-sine"),
    ({"decay": 1}, r"availability\.params\.decay: unknown key"),
]


@pytest.mark.parametrize(("params", "message"), BAD)
def test_bad_parameters_name_the_field(scenario_dict, params: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario_with(scenario_dict, "nonstationary", params)


def test_labels_rule_needs_a_partition_independent_of_availability(scenario_dict) -> None:
    scenario_dict["data"].update(client_classes=None, num_clients=10, num_classes=5)
    with pytest.raises(ScenarioError, match=r"availability\.params\.p: the paper's rule"):
        scenario_with(scenario_dict, "nonstationary", {})


def test_phi_max_length_is_checked_against_the_classes(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "nonstationary", {"phi_max": [1.0, 0.5]})
    with pytest.raises(
        ScenarioError, match=r"params\.phi_max: has 2 entries, the number of classes is 3"
    ):
        build_oracle(s, 0)


def test_example_scenario_runs_two_rounds(tmp_path) -> None:
    """The example loads with its four dynamics; its hardest variant runs two rounds."""
    s = load_scenario(EXAMPLE)
    variants = [v for _, v in s.variants()]
    assert [oracle_params(v).dynamics for v in variants] == list(DYNAMICS)
    short = with_overrides(variants[-1], {"rounds": 2, "eval_every": 1})
    run = run_in_process(short, 0, tmp_path / "run")
    assert (run.path / "final_model.npz").is_file()
    relayed = read_trace(run.path / "availability.csv", 10)
    assert np.array_equal(relayed, build_oracle(short, 0).availability_matrix(2))


def test_fedavg_is_with_the_oracle_reads_p_i_t_of_each_round(scenario_dict) -> None:
    """FedAvg with known p_i^t (FedAWE Table 2): under the staircase the strategy's law
    is the oracle's per-round one (1, then 0.4 after P / 2 rounds), not its mean, in both
    APIs; a stationary oracle still gives the constant law (the array of before)."""
    s = scenario_with(scenario_dict, "nonstationary", {"dynamics": "staircase", "period": 4})
    s = with_overrides(
        s, {"algorithm": {"name": "fedavg-is", "params": {"availability": "oracle"}}}
    )
    exp, oracle = Experiment(s, 2), build_oracle(s, 2)
    legacy, message = exp.strategy().core.known_p, exp.message_strategy().core.known_p
    for r in range(1, 9):
        expected = oracle.base_p * (1.0 if (r - 1) % 4 < 2 else 0.4)
        assert legacy(r).tobytes() == message(r).tobytes() == oracle.probabilities(r).tobytes()
        np.testing.assert_allclose(legacy(r), expected)
    assert not np.allclose(legacy(3), availability_law(s, 2))
    bern = with_overrides(s, {"availability": {"oracle": "bernoulli", "params": {}}})
    known = Experiment(bern, 2).strategy().core.known_p
    assert isinstance(known, np.ndarray)
    assert known.tobytes() == availability_law(bern, 2).tobytes()
