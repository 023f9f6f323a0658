"""Rates chosen per algorithm by grid search (fedram_flwr/report/rate_grid.py) on run
folders written by hand: the lowest mean training loss over seeds wins by default (test
accuracy is then never read), the highest mean accuracy when selecting on it (FedAWE App.
J); failed or diverged runs never win."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import scipy.stats
import yaml

from fedram_flwr.cli.args import SELECT_METRICS
from fedram_flwr.report import RunSet, write_report
from fedram_flwr.report.rate_grid import (
    CRITERIA,
    chosen_rates,
    grid_losses,
    rate_grid_section,
    tuned_per_algorithm,
)
from fedram_flwr.scenario.sweep import swept_values
from tests.helpers import write_run

# (algorithm, lr, server_lr) -> training loss per seed 0, 1 (tail mean)
LOSSES = {
    ("adafed", "0.01", "1.0"): [0.90, 0.70],  # mean 0.80
    ("adafed", "0.1", "1.0"): [0.50, 0.70],  # mean 0.60: chosen
    ("adafed", "0.01", "0.3"): [0.95, 0.85],
    ("adafed", "0.1", "0.3"): [0.40, 0.90],  # mean 0.65, the best single seed
    ("ca-fed", "0.01", "1.0"): [0.70, 0.72],  # mean 0.71: chosen
    ("ca-fed", "0.1", "1.0"): [0.30, math.nan],  # diverged on seed 1
    ("ca-fed", "0.01", "0.3"): [0.75, 0.75],
    ("ca-fed", "0.1", "0.3"): [0.20, None],  # seed 1 failed
}


def rate_runs(root: Path, name: str, lr: str, server_lr: str, rows: list[dict], failed=()) -> None:
    """One run folder per seed (rows[seed] its only metrics row) of the variant that a
    sweep of ``algorithm.name, training.lr, algorithm.server_lr`` labels by these values."""
    label = f"name={name}_lr={lr}_server_lr={server_lr}"
    variant = {
        "algorithm.name": name,
        "training.lr": float(lr),
        "algorithm.server_lr": float(server_lr),
    }
    for seed, row in enumerate(rows):
        status = "failed" if seed in failed else "complete"
        write_run(root, label, seed, [row], status=status, variant=variant)


def grid_runs(root: Path) -> None:
    """Every (algorithm, lr, server_lr, seed) of LOSSES as a run folder. Test accuracy is
    highest where the training loss is worst, so a rule reading it would pick those."""
    for (name, lr, server_lr), per_seed in LOSSES.items():
        rows = [
            {"round": 10, "accuracy": 1.0 - (0.5 if x is None else x) / 2, "train-loss": x}
            for x in per_seed
        ]
        failed = [seed for seed, x in enumerate(per_seed) if x is None]
        rate_runs(root, name, lr, server_lr, rows, failed)


def chosen_sweep(section: str) -> dict:
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))["sweep"]


def test_the_lowest_mean_training_loss_over_seeds_is_chosen(tmp_path: Path) -> None:
    grid_runs(tmp_path)
    section = rate_grid_section(RunSet.load(tmp_path))
    sweep = chosen_sweep(section)
    assert swept_values(sweep) == [
        {"algorithm.name": "adafed", "training.lr": 0.1, "algorithm.server_lr": 1.0},
        {"algorithm.name": "ca-fed", "training.lr": 0.01, "algorithm.server_lr": 1.0},
    ]
    # mean ± std (ddof 1) by hand: adafed (0.1, 1.0): 0.60 ± 0.1414
    assert "**0.6000 ± 0.1414**" in section and "**0.7100 ± 0.0141**" in section


def test_failed_and_diverged_runs_are_infinite(tmp_path: Path) -> None:
    grid_runs(tmp_path)
    losses = grid_losses(RunSet.load(tmp_path))["ca-fed"]
    assert losses[("0.1", "1.0")] == [0.30, math.inf]
    assert losses[("0.1", "0.3")] == [0.20, math.inf]
    section = rate_grid_section(RunSet.load(tmp_path))
    assert section.count("failed or diverged (1/2)") == 2


def test_runs_that_are_not_a_rate_sweep_get_no_section(tmp_path: Path) -> None:
    write_run(
        tmp_path,
        "p_min=0.1_name=fedar",
        0,
        [{"round": 1, "train-loss": 0.5}],
        variant={"availability.p_min": 0.1, "algorithm.name": "fedar"},
    )
    assert rate_grid_section(RunSet.load(tmp_path)) == ""
    other = tmp_path / "no_loss"
    write_run(
        other,
        "name=fedar_lr=0.1",
        0,
        [{"round": 1, "accuracy": 0.5}],
        variant={"algorithm.name": "fedar", "training.lr": 0.1},
    )
    assert rate_grid_section(RunSet.load(other)) == ""  # no training loss recorded


def test_the_report_has_the_grid_section(tmp_path: Path) -> None:
    grid_runs(tmp_path)
    text = write_report(tmp_path).read_text()
    assert "## Learning rates by grid search" in text
    assert chosen_sweep(text)


def test_tuned_runs_compare_algorithms_across_their_own_rates(tmp_path: Path) -> None:
    """One rate setting per algorithm (the chosen rows on the reported seeds): the rates
    do not split the comparison; CA-Fed's paired t-test over seeds is scipy's on the
    final accuracies, by hand."""
    finals = {"ca-fed": [0.70, 0.74, 0.71], "adafed": [0.69, 0.72, 0.72]}
    rates = {"ca-fed": ("0.1", "0.3"), "adafed": ("0.03", "1.0")}
    for name, accs in finals.items():
        rate_runs(tmp_path, name, *rates[name], [{"round": 5, "accuracy": a} for a in accs])
    rs = RunSet.load(tmp_path)
    assert tuned_per_algorithm(rs)
    text = write_report(tmp_path).read_text()
    p = scipy.stats.ttest_rel(finals["ca-fed"], finals["adafed"]).pvalue
    assert f"| all | {p:.2g} (+0.67, n=3) |" in text  # mean difference 0.02/3 in points
    assert "## Learning rates by grid search" not in text  # no training loss: no grid


def test_a_rate_grid_is_not_tuned_per_algorithm(tmp_path: Path) -> None:
    grid_runs(tmp_path)
    assert not tuned_per_algorithm(RunSet.load(tmp_path))


# (algorithm, lr, server_lr) -> (test accuracy, train loss) per seed 0, 1; None: failed.
# The highest mean accuracy and the lowest mean loss pick different pairs.
SCORES = {
    ("fedawe", "0.1", "0.5"): [(0.80, 0.3), (0.60, 0.3)],  # accuracy 0.70; the lowest loss
    ("fedawe", "0.05", "1.0"): [(0.72, 0.5), (0.74, 0.5)],  # accuracy 0.73: chosen on it
    ("fedawe", "0.01", "1.0"): [(0.95, 0.1), None],  # the best seed, but seed 1 failed
    ("fedavg", "0.1", "1.0"): [(0.60, 0.2), (0.60, 0.2)],  # accuracy 0.60
    ("fedavg", "0.05", "0.5"): [(0.50, 0.4), (0.70, 0.4)],  # 0.60 too: first in sorted order
}


def score_runs(root: Path) -> None:
    for (name, lr, server_lr), per_seed in SCORES.items():
        rows = [
            {"round": 10, "accuracy": 0.5, "train-loss": 1.0}
            if x is None
            else {"round": 10, "accuracy": x[0], "train-loss": x[1]}
            for x in per_seed
        ]
        failed = [seed for seed, x in enumerate(per_seed) if x is None]
        rate_runs(root, name, lr, server_lr, rows, failed)


def test_the_highest_mean_accuracy_is_chosen_when_selecting_on_it(tmp_path: Path) -> None:
    score_runs(tmp_path)
    rs = RunSet.load(tmp_path)
    assert chosen_rates(rs, "accuracy") == {"fedawe": ("0.05", "1.0"), "fedavg": ("0.05", "0.5")}
    assert chosen_rates(rs, "train-loss") == {"fedawe": ("0.1", "0.5"), "fedavg": ("0.1", "1.0")}
    section = rate_grid_section(rs, "accuracy")
    assert "the highest `accuracy` (test accuracy)" in section
    assert "**0.7300 ± 0.0141**" in section  # shown as accuracy, not negated
    assert "failed or diverged (1/2)" in section
    for select, pair in ((None, (0.1, 0.5)), ("accuracy", (0.05, 1.0))):  # train-loss by default
        kwargs = {} if select is None else {"select": select}
        rows = swept_values(chosen_sweep(write_report(tmp_path, **kwargs).read_text()))
        fedawe = next(r for r in rows if r["algorithm.name"] == "fedawe")
        assert (fedawe["training.lr"], fedawe["algorithm.server_lr"]) == pair


def test_an_unknown_selection_metric_names_the_allowed_ones(tmp_path: Path) -> None:
    score_runs(tmp_path)
    with pytest.raises(ValueError, match="allowed values: train-loss, train-accuracy, accuracy"):
        chosen_rates(RunSet.load(tmp_path), "loss")


def test_the_cli_offers_exactly_the_selection_metrics() -> None:
    assert SELECT_METRICS == tuple(CRITERIA)
