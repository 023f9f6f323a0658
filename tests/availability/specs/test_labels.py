"""The FedAWE paper's rule p_i = <nu_i, phi> (fedram_flwr/availability/specs/labels.py, App. J.3)
as an option of the ``bernoulli`` oracle (``p: labels``): p_i by hand from the
partition's labels, the same rule and phi as the ``nonstationary`` oracle's, the same
draws as explicit p, and every bad value a ScenarioError naming the field."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.availability import BernoulliClientManager
from fedram_flwr.availability.specs.labels import label_p
from fedram_flwr.engines.experiment import Experiment, availability_law, build_oracle
from fedram_flwr.rng import stream
from fedram_flwr.scenario.config import ScenarioError
from tests.helpers import scenario_with

MIXED = {"client_classes": [[0, 1], [1], [1, 2]]}  # class 1 split 14 / 13 / 13


def test_labels_p_is_nu_dot_phi_by_hand(scenario_dict) -> None:
    """Counts (40, 14, 0), (0, 13, 0), (0, 13, 40): p_0 = (40 phi_0 + 14 phi_1) / 54,
    p_1 = phi_1, p_2 = (13 phi_1 + 40 phi_2) / 53, phi_c ~ U(0, (1, 1, 0.5)_c)."""
    s = scenario_with(scenario_dict, "bernoulli", {"p": "labels"}, **MIXED)
    counts = [np.bincount(y, minlength=3).tolist() for y in Experiment(s, 5).data.client_y]
    assert counts == [[40, 14, 0], [0, 13, 0], [0, 13, 40]]
    phi = stream("fedawe-phi", 5).uniform(0.0, [1.0, 1.0, 0.5])
    hand = [(40 * phi[0] + 14 * phi[1]) / 54, phi[1], (13 * phi[1] + 40 * phi[2]) / 53]
    np.testing.assert_allclose(build_oracle(s, 5).pi, hand, rtol=1e-12)
    np.testing.assert_allclose(availability_law(s, 5), hand, rtol=1e-12)
    ns = scenario_with(scenario_dict, "nonstationary", {"dynamics": "stationary"}, **MIXED)
    assert build_oracle(ns, 5).base_p.tobytes() == label_p(s, 5, None).tobytes()  # one rule


def test_phi_max_bounds_each_class(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "bernoulli", {"p": "labels", "phi_max": [0.2, 0.0, 0.4]})
    phi = stream("fedawe-phi", 1).uniform(0.0, [0.2, 0.0, 0.4])
    np.testing.assert_allclose(build_oracle(s, 1).pi, phi)  # one class per client: p = phi
    assert build_oracle(s, 1).pi[1] == 0.0


def test_labels_draw_as_explicit_p(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "bernoulli", {"p": "labels"}, **MIXED)
    m = build_oracle(s, 3)
    twin = BernoulliClientManager(label_p(s, 3, None), 3)
    assert m.availability_matrix(30).tolist() == twin.availability_matrix(30).tolist()


BAD = [
    ({"p": "label"}, r"availability\.params\.p: expected a list.*; or 'label' is not allowed; "),
    ({"p": [0.5, "x", 1.0]}, r"^availability\.params\.p\[1\]: expected a number, got 'x'$"),
    ({"p": "labels", "phi_max": [1.0, 2.0, 1.0]}, r"availability\.params\.phi_max\[1\]: 2\.0 is"),
    ({"phi_max": [1.0, 1.0, 1.0]}, r"availability\.params\.phi_max: only with p: labels"),
    ({"p": "labels", "label_correlated": True}, r"availability\.params\.label_correlated: p: l"),
]


@pytest.mark.parametrize(("params", "message"), BAD)
def test_bad_values_name_the_field(scenario_dict, params: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario_with(scenario_dict, "bernoulli", params)


def test_phi_max_length_is_checked_against_the_classes(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "bernoulli", {"p": "labels", "phi_max": [1.0, 0.5]})
    with pytest.raises(ScenarioError, match=r"phi_max: has 2 entries, the number of classes is 3"):
        build_oracle(s, 0)


def test_labels_need_a_partition_independent_of_availability(scenario_dict) -> None:
    scenario_dict["data"].update(client_classes=None, num_clients=10, num_classes=5)
    with pytest.raises(ScenarioError, match=r"availability\.params\.p: the paper's rule"):
        scenario_with(scenario_dict, "bernoulli", {"p": "labels"})
