"""The report's multi-run figures (fedram_flwr/report/figures.py): what each draws, read
back from its artists, against hand computations over the runs' files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from fedram_flwr.report import RunSet, write_report
from fedram_flwr.report.figures import (
    group_weights,
    plot_boundaries,
    plot_client_histograms,
    plot_client_test_accuracy,
    plot_curves,
    plot_train_loss,
)
from tests.helpers import write_run


def two_seeds(root: Path) -> None:
    """alpha=1.0 with accuracies (0.2, 0.4) and (0.4, 0.8) at rounds 0 and 5."""
    for seed, accs in ((0, (0.2, 0.4)), (1, (0.4, 0.8))):
        rows = [
            {"round": 5 * i, "accuracy": a, "rare-accuracy": a / 2, "train-loss": 1 - a}
            for i, a in enumerate(accs)
        ]
        final = {**rows[-1], "client-accuracy": [0.02, 0.07, 0.5 + 0.1 * seed]}
        final["client-test-accuracy"] = [0.5, 0.9 - 0.2 * seed]
        write_run(root, "alpha=1.0", seed, rows, summary={"final": final})


def test_curves_are_the_mean_over_seeds(tmp_path: Path) -> None:
    two_seeds(tmp_path)
    rs = RunSet.load(tmp_path)
    shown = plot_curves(rs, tmp_path / "curves.png")
    assert np.allclose(shown["0:alpha=1.0 (2 seeds)"], [[0, 0.3], [5, 0.6]])
    assert np.allclose(shown["1:alpha=1.0 (2 seeds)"], [[0, 0.15], [5, 0.3]])
    loss = plot_train_loss(rs, tmp_path / "loss.png")["alpha=1.0 (2 seeds)"]
    assert np.allclose(loss, [[0, 0.7], [5, 0.4]])


def test_client_histograms_and_test_accuracy_bars(tmp_path: Path) -> None:
    two_seeds(tmp_path)
    rs = RunSet.load(tmp_path)
    counts = plot_client_histograms(rs, tmp_path / "hist.png")[
        "alpha=1.0/alpha=1.0"
    ]  # group / name
    # 2% and 7% (twice each), 50% and 60%: bins of 5 points
    assert counts[[0, 1, 10, 12]].tolist() == [2, 2, 1, 1] and counts.sum() == 6
    bars = plot_client_test_accuracy(rs, tmp_path / "bars.png")["alpha=1.0 (2 seeds)"]
    assert np.allclose(bars, [50.0, 80.0])


def test_group_weights_per_variant_and_their_table(ca_fed_run, tmp_path: Path) -> None:
    _, out = ca_fed_run
    for seed in (0, 1):
        shutil.copytree(out.path, tmp_path / "ca-fed" / f"seed{seed}")
    weights, groups = group_weights(RunSet.load(tmp_path))
    w = out.read_weights()
    assert list(weights) == ["ca-fed"] and len(weights["ca-fed"]) == 2
    assert groups["ca-fed"]["less available, correlated"].tolist() == [5]
    text = write_report(tmp_path).read_text()
    # (1/T) sum_t q_5^(t), the same in both copies: std 0
    assert f"{w[:, 5].sum() / 4:.2f} ± 0.00" in text and "CA-Fed Fig. 1d" in text


def test_boundaries_side_by_side_from_the_run_folders(gaussian_run, tmp_path: Path) -> None:
    _, out = gaussian_run
    for label in ("alpha=1.0", "alpha=0.1"):
        shutil.copytree(out.path, tmp_path / label / "seed0")
    shown = plot_boundaries(RunSet.load(tmp_path), tmp_path / "b.png")
    x, y = out.read_plot_inputs()["test_x"], out.read_plot_inputs()["test_y"]
    for panel in ("0", "1"):
        assert np.array_equal(shown[f"{panel}:class 2 (rare)"], x[y == 2])
