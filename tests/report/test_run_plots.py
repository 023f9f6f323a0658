"""One run's figures (fedram_flwr/report/run_plots.py), drawn from its run folder alone: what each
figure shows, read back from its artists, against hand computations from the run's
files; CA-Fed Fig. 1d's client groups and cumulative weights."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.report.run_plots import client_groups, cumulative_group_weights, plot_run
from tests.helpers import CA_FED_PI

LAM = (0.0, 0.8, 0.0, 0.8, 0.0, 0.8)  # the ca_fed_run fixture's lambda


def test_groups_and_cumulative_weights() -> None:
    pi = np.array([0.9, 0.9, 0.1, 0.1, 0.9])
    lam = np.array([0.9, 0.0, -0.6, 0.01, 0.8])
    groups = client_groups(pi, lam)
    assert {k: v.tolist() for k, v in groups.items()} == {
        "more available, correlated": [0, 4],
        "more available, weakly corr.": [1],
        "less available, correlated": [2],
        "less available, weakly corr.": [3],
    }
    w = np.array([[1, 0, 0, 2, 1], [0, 1, 3, 0, 0]], np.float32)
    cum = cumulative_group_weights(w, groups)
    assert cum["more available, correlated"].tolist() == [2.0, 2.0]
    assert cum["less available, correlated"].tolist() == [0.0, 3.0]
    assert cum["less available, weakly corr."].tolist() == [2.0, 2.0]


@pytest.fixture(scope="module")
def ca_fed_plots(ca_fed_run):
    _, out = ca_fed_run
    return out, plot_run(out.path)


def test_plot_run_writes_each_figure_from_the_run_folder(ca_fed_plots) -> None:
    out, shown = ca_fed_plots
    expected = {"accuracy.png", "relays.png", "availability.png", "inclusion.png"}
    expected |= {"group_weights.png", "estimator_errors.png"}
    assert expected <= set(shown)
    for name in shown:
        assert (out.path / name).stat().st_size > 0, name


def test_accuracy_and_estimator_curves_are_the_recorded_rows(ca_fed_plots) -> None:
    out, shown = ca_fed_plots
    rows = out.read_metrics()
    evals = [(r["round"], r["accuracy"]) for r in rows if "accuracy" in r]
    assert shown["accuracy.png"]["overall"].tolist() == [list(p) for p in evals]
    pi_err = [[r["round"], r["pi-error"]] for r in rows if "pi-error" in r]
    assert shown["estimator_errors.png"]["|pi_hat - pi|"].tolist() == pi_err


def test_availability_and_inclusion_heatmaps_by_hand(ca_fed_plots) -> None:
    out, shown = ca_fed_plots
    rows, weights = out.read_metrics(), out.read_weights()
    active, relayed = np.zeros((4, 6), int), np.zeros((4, 6), int)
    for r in rows:
        for k in r.get("active", []):
            active[r["round"] - 1, k] = 1
        for k in r.get("relayed", []):
            relayed[r["round"] - 1, k] = 1
    active |= relayed
    # 0 inactive, 1 active, 2 relayed; clients down, rounds across
    assert np.array_equal(shown["availability.png"]["image0"], (active + relayed).T)
    inclusion = shown["inclusion.png"]
    assert np.array_equal(inclusion["0:image0"], active.T)
    assert np.array_equal(inclusion["1:image0"], (active + (weights > 0)).T)


def test_relay_shares_and_group_weights_by_hand(ca_fed_plots) -> None:
    out, shown = ca_fed_plots
    rows, weights = out.read_metrics(), out.read_weights()
    counts = np.zeros(6)
    for r in rows:
        counts[r.get("relayed", [])] += 1
    assert np.allclose(shown["relays.png"]["relayed (empirical)"], counts / counts.sum())
    # pi >= 1/2: clients 0-3 more available; |lambda| >= 1/2: 1, 3, 5 correlated
    assert CA_FED_PI[:4] == (0.9, 0.9, 0.6, 0.6) and LAM[1::2] == (0.8,) * 3
    lines = shown["group_weights.png"]
    for label, ids in (
        ("more available, correlated (2)", [1, 3]),
        ("more available, weakly corr. (2)", [0, 2]),
        ("less available, correlated (1)", [5]),
        ("less available, weakly corr. (1)", [4]),
    ):
        cum = np.cumsum([sum(float(w[k]) for k in ids) for w in weights])
        assert lines[label][:, 0].tolist() == [1, 2, 3, 4]
        assert np.allclose(lines[label][:, 1], cum), label


def test_decision_boundary_shows_the_test_points_of_each_class(gaussian_run) -> None:
    _, out = gaussian_run
    shown = plot_run(out.path)["decision_boundary.png"]
    inputs = out.read_plot_inputs()
    x, y = inputs["test_x"], inputs["test_y"]
    assert set(np.unique(y)) == {0, 1, 2}
    for c, tag in ((0, ""), (1, ""), (2, " (rare)")):
        assert np.array_equal(shown[f"class {c}{tag}"], x[y == c])
