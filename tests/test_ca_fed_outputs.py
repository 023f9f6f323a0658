"""CA-Fed outputs (issue 3, part 3): per-round aggregation weights in ``weights.npy``,
estimator errors logged by the recorder from the oracle's hidden law, the Fig. 1d group
weights and Fig. 5 inclusion heatmap, the time-averaged accuracy, and the two
benchmark scripts (Fig. 4a estimator errors, selection time) on tiny inputs."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.config import scenario_from_dict
from fedram_flwr.engines import run_in_process
from fedram_flwr.outputs import availability_from_rows, summarise
from fedram_flwr.plots import client_groups, cumulative_group_weights
from fedram_flwr.report import write_report
from fedram_flwr.strategies.ca_fed import (
    lambda_hat,
    pi_hat,
    transition_counts,
    transition_matrix_hat,
)

BENCH = Path(__file__).resolve().parent.parent / "bench"

PI = (0.9, 0.9, 0.6, 0.6, 0.3, 0.3)


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ca_fed_run(tmp_path_factory, ca_fed_dict):
    root = tmp_path_factory.mktemp("runs")
    raw = ca_fed_dict(pi=PI, rounds=4, eval_every=2, local_steps=1)
    out = run_in_process(scenario_from_dict(raw), 0, root / "ca-fed" / "seed0")
    return root, out


def test_weights_are_recorded_per_round_for_the_participants(ca_fed_run) -> None:
    _, out = ca_fed_run
    weights = out.read_weights()
    assert weights is not None and weights.shape == (4, 6) and weights.dtype == np.float32
    rows = out.read_metrics()
    relayed = availability_from_rows(rows, 6, "relayed")
    assert not np.any(weights[~relayed])  # only clients whose update was aggregated
    participants = {r["round"]: r["fit-participants"] for r in rows if "fit-participants" in r}
    for t, n in participants.items():
        assert np.count_nonzero(weights[t - 1]) == n
    # rows stay compact: no per-client weight lists in metrics.jsonl
    assert not any(
        isinstance(v, list) and k not in ("active", "relayed", "failed")
        for r in rows
        for k, v in r.items()
    )


def test_estimator_errors_match_the_tracker_on_the_recorded_matrix(ca_fed_run) -> None:
    _, out = ca_fed_run
    rows = out.read_metrics()
    active = availability_from_rows(rows, 6, "relayed")
    pi = np.array(PI)
    lam = np.array(out.scenario()["availability"]["params"]["lam"])
    for r in rows:
        if r["round"] == 0:
            continue
        t = r["round"]
        seen = active[:t]
        pi_est = pi_hat(seen.sum(0), t, 1.0, 1.0)
        lam_est = lambda_hat(transition_matrix_hat(transition_counts(seen), 1.0))
        assert r["pi-error"] == pytest.approx(np.abs(pi_est - pi).mean())
        assert r["lambda-error"] == pytest.approx(np.abs(lam_est - lam).mean())


def test_run_and_report_plots(ca_fed_run) -> None:
    root, out = ca_fed_run
    for name in ("inclusion.png", "group_weights.png", "estimator_errors.png"):
        assert (out.path / name).is_file(), name
    report = write_report(root).read_text()
    assert (root / "group_weights.png").is_file()
    assert "Time-averaged" in report and "Fig. 1d" in report


def test_report_pivots_only_a_full_grid_of_two_keys(ca_fed_run, tmp_path) -> None:
    _, out = ca_fed_run
    labels = ["name=a_kappa2=1", "name=a_kappa2=2", "name=b_kappa2=1", "name=b_kappa2=2"]
    for label in labels:  # a grid of two swept keys: the paper's layout is added
        shutil.copytree(out.path, tmp_path / "grid" / label / "seed0")
    assert "Paper layout" in write_report(tmp_path / "grid").read_text()
    for label in ("name=a", "name=b", "loss_floor=x"):  # two keys, but mixed labels
        shutil.copytree(out.path, tmp_path / "mixed" / label / "seed0")
    assert "Paper layout" not in write_report(tmp_path / "mixed").read_text()


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


def test_time_mean_averages_every_evaluation_after_round_zero() -> None:
    rows = [{"round": r, "accuracy": a} for r, a in [(0, 0.0), (5, 0.2), (10, 0.4), (15, 0.9)]]
    s = summarise(rows)
    assert s["time-mean"]["accuracy"] == pytest.approx(0.5)
    assert s["final"]["accuracy"] == 0.9


def test_estimator_error_bench_decreases_with_observations() -> None:
    bench = load_bench("ca_fed_estimators")
    rows = bench.estimator_errors([100, 3000], seeds=2, num_clients=20)
    by = {(r["observations"], r["group"]): r for r in rows}
    for key in ("pi_error_mean", "lambda_error_mean"):
        assert by[(3000, "all")][key] < by[(100, "all")][key]
    assert "| 3,000 | all |" in bench.markdown(rows)


def test_selection_bench_times_one_selection() -> None:
    bench = load_bench("ca_fed_selection")
    row = bench.selection_times(200, repeats=2, warmup=3)
    assert row["clients"] == 200 and 0 < row["included"] <= 200
    assert 0 < row["total_median_s"] < 1.0
