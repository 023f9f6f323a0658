"""What a run writes at its end for its figures (fedram_flwr/engines/plot_inputs.py): the
oracle's hidden law and, for 2-D data, the decision-boundary grid, checked by hand."""

from __future__ import annotations

import numpy as np

from fedram_flwr.engines.plot_inputs import complete_plot_inputs
from fedram_flwr.rundir.outputs import PLOT_INPUTS_FILE
from tests.helpers import CA_FED_PI


def test_markov_run_keeps_the_oracles_pi_and_lambda(ca_fed_run) -> None:
    _, out = ca_fed_run
    inputs = out.read_plot_inputs()
    assert inputs["pi"].tolist() == list(CA_FED_PI)
    assert inputs["lam"].tolist() == out.scenario()["availability"]["params"]["lam"]
    assert "grid_pred" not in inputs  # 60-feature data: no decision boundary


def test_boundary_grid_is_the_final_models_argmax(gaussian_run) -> None:
    _, out = gaussian_run
    inputs = out.read_plot_inputs()
    assert np.allclose(inputs["relay_law"] / inputs["relay_law"].sum(), [0.5, 0.4, 0.1])
    x = inputs["test_x"]
    assert np.array_equal(inputs["grid_lo"], x.min(0) - 1.0)
    assert np.array_equal(inputs["grid_hi"], x.max(0) + 1.0)
    w, b = out.read_final_model()[:2]  # logistic regression: Linear(2, 3); t follows
    lo, hi = inputs["grid_lo"], inputs["grid_hi"]
    pred = inputs["grid_pred"]
    assert pred.shape == (300, 300)
    for i, j in ((0, 0), (299, 299), (150, 17), (3, 280)):  # row i: y, column j: x
        point = np.array([lo[0] + j * (hi[0] - lo[0]) / 299, lo[1] + i * (hi[1] - lo[1]) / 299])
        assert pred[i, j] == np.argmax(w @ point + b)
    assert int(inputs["num_classes"]) == 3 and inputs["rare_classes"].tolist() == [2]


def test_older_run_folders_get_their_plot_inputs_once(gaussian_run) -> None:
    root, out = gaussian_run
    before = out.read_plot_inputs()
    (out.path / PLOT_INPUTS_FILE).unlink()
    complete_plot_inputs(root)
    after = out.read_plot_inputs()
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k], after[k]) for k in before)
