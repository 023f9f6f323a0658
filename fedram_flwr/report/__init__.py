"""Turn a folder of run directories into the papers' tables (mean ± std over seeds) and
figures: ``report.md`` and PNGs beside it. The folder is read once into a
:class:`RunSet`; :mod:`.tables`, :mod:`.last_rounds` (FedAWE's Table 2, added when runs
have ``availability.params.dynamics``), :mod:`.rate_grid` (learning rates chosen per
algorithm, added for a sweep of them), :mod:`.clock` (time to a target accuracy, accuracy
against simulated hours) and :mod:`.figures` work on it."""

from __future__ import annotations

from pathlib import Path

from fedram_flwr.report.clock import time_section
from fedram_flwr.report.figures import (
    group_weights,
    plot_boundaries,
    plot_client_histograms,
    plot_client_test_accuracy,
    plot_curves,
    plot_group_weights_by_variant,
    plot_train_loss,
)
from fedram_flwr.report.last_rounds import last_rounds_table
from fedram_flwr.report.rate_grid import RATES, rate_grid_section, tuned_per_algorithm
from fedram_flwr.report.runs import OPTIONAL_STATS, Run, RunSet
from fedram_flwr.report.tables import (
    client_accuracy_table,
    fairness_table,
    group_weight_table,
    markdown_table,
    per_client_test_table,
    pivot_table,
    ttest_table,
)
from fedram_flwr.rundir.nofollow import write_atomic

__all__ = ["STATS", "Run", "RunSet", "write_report"]

STATS = {
    "final": "Final model (last round)",
    "tail-mean": "Mean over the evaluations of the last 20% of rounds",
    "time-mean": "Time-averaged: mean over every evaluation after round 0",
}


def damaged_section(damaged: list[tuple[str, str]]) -> str:
    """The report's list of complete runs whose files are not whole (not in any table)."""
    lines = [
        "\n## Damaged runs (not in any table; `fedram run` runs them again)\n",
        *[f"- {path}: {why}" for path, why in damaged],
    ]
    return "\n".join(lines) + "\n"


def write_report(
    root: str | Path,
    target_accuracy: float | None = None,
    time_budget: float | None = None,
    select: str = "train-loss",
) -> Path:
    """``report.md`` plus comparison figures in ``root``; returns the report path.
    ``target_accuracy`` (in [0, 1]): a table of the rounds and simulated hours each
    variant takes to reach it; with ``time_budget`` (simulated hours) too, the same
    within the budget with the accuracy and client work at it (:mod:`.clock`);
    ``select``: the metric a grid of learning rates is chosen on
    (:data:`.rate_grid.CRITERIA`)."""
    root = Path(root)
    rs = RunSet.load(root)
    runs = rs.finals()
    fields = [rs.fields(v) for v in runs]
    swept = sorted({k for f in fields for k in f})
    grid = len(swept) == 2 and all(len(f) == 2 for f in fields)  # not mixed labels
    text = [f"# Results under {root}\n"]
    for stat, title in STATS.items():
        if stat in OPTIONAL_STATS and not rs.finals(stat):
            continue
        text += [f"\n## {title}\n", markdown_table(rs, stat)]
        if grid and len(runs) > 2:
            text += ["\nPaper layout:\n", pivot_table(rs, swept[1], swept[0], stat)]
    if table := last_rounds_table(rs):  # runs under non-stationary availability
        text += ["\n## Last rounds by availability dynamics (FedAWE Table 2)\n", table]
    if section := rate_grid_section(rs, select):  # a sweep of algorithms and learning rates
        text += ["\n## Learning rates by grid search (CA-Fed Sec. V-A)\n", section]
    names = {rs.split(v)[1] for v in runs}
    ignore = tuple(RATES) if tuned_per_algorithm(rs) else ()  # rows of a zipped sweep
    if "fedar" in names and len(names) > 1:
        for key in ("accuracy", "train-loss"):
            text += [f"\n## Paired t-test on `{key}` (Table 2)\n"]
            text += [
                ttest_table(rs, key=key, over=over, ignore=ignore) for over in ("rounds", "seeds")
            ]
    if "ca-fed" in names and ignore:
        text += ["\n## Paired t-test of CA-Fed, each algorithm at its tuned rates\n"]
        text += [
            ttest_table(rs, "ca-fed", over=over, ignore=ignore) for over in ("rounds", "seeds")
        ]
    if any("client-accuracy" in f for fs in runs.values() for f in fs):
        text += ["\n## Per-client accuracy of the final model (Table 3)\n"]
        text += [client_accuracy_table(rs)]
        plot_client_histograms(rs, root / "client_accuracy_hist.png")
        plot_train_loss(rs, root / "train_loss.png")
    if table := fairness_table(rs):
        text += [
            "\n## Fairness of the final model on the clients' test data (RC-FL Table 1)\n",
            "Accuracy over the clients' test sets: average, worst and best 10% of the "
            "clients (at least one), variance over clients; HCVaR of the clients' test "
            "losses with the scenario's `hcvar_alpha` and p_i = m_i / m, and the largest "
            "client test loss. Mean ± std over seeds.\n",
            table,
        ]
        if avg := fairness_table(rs, "avg-"):
            text += ["\nThe same for rFedFair's running average omega_tilde_T:\n", avg]
        if clients := per_client_test_table(rs):
            text += ["\nTest accuracy (%) of each client (RC-FL Fig. 1):\n", clients]
            plot_client_test_accuracy(rs, root / "client_test_accuracy.png")
            text += ["![per-client test accuracy](client_test_accuracy.png)\n"]
    plot_curves(rs, root / "curves.png")
    text += time_section(rs, root, target_accuracy, time_budget)
    plot_boundaries(rs, root / "decision_boundaries.png")
    weights, groups = group_weights(rs)
    if weights:
        plot_group_weights_by_variant(weights, groups, root / "group_weights.png")
        text += [
            "\n## Cumulative aggregation weight per client group (CA-Fed Fig. 1d)\n",
            "![cumulative aggregation weight per group](group_weights.png)\n",
            "Groups by the oracle's pi_k (>= 1/2: more available) and |lambda_k| (>= 1/2: "
            "correlated); the weight a client's update received each round it took part "
            "(0 otherwise). End of training, (1/T) sum_t sum_{k in group} q_k^(t) "
            "(mean ± std over seeds; the number of clients in each group is in the "
            "figure's legend):\n",
            group_weight_table(weights, groups),
        ]
    if damaged := rs.damaged():
        text += [damaged_section(damaged)]
    report = root / "report.md"
    write_atomic(report, "\n".join(text).encode())  # never through a link planted there
    return report
