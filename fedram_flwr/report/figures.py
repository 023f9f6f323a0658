"""The report's multi-run figures from a :class:`RunSet`: accuracy curves, training loss,
per-client histograms and test accuracies, CA-Fed's group weights per variant and the
2-D decision boundaries side by side. Each returns what it drew (see
:func:`fedram_flwr.report.run_plots.drawn`), or None when no run has the data."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fedram_flwr.report.run_plots import (
    Drawn,
    client_groups,
    plot_decision_boundary,
    plot_group_weights,
    plt,
    save,
)
from fedram_flwr.report.runs import RunSet
from fedram_flwr.report.tables import client_test_accuracies, sort_key


def plot_client_test_accuracy(rs: RunSet, out: Path, max_clients: int = 10) -> Drawn | None:
    """RC-FL Fig. 1: bars of each client's test accuracy per variant (mean ± std over
    seeds), for runs with at most ``max_clients`` clients."""
    rows = client_test_accuracies(rs, max_clients=max_clients)
    if not rows:
        return None
    names = sorted(rows, key=sort_key)
    n = max(a.shape[1] for a in rows.values())
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * n, 3.6))
    for j, name in enumerate(names):
        a = 100 * rows[name]
        x = np.arange(a.shape[1]) + (j - (len(names) - 1) / 2) * width
        ax.bar(x, a.mean(0), width, yerr=a.std(0), capsize=2, label=f"{name} ({len(a)} seeds)")
    ax.set(xticks=range(n), xlabel="client", ylabel="test accuracy (%)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    return save(fig, out)


def plot_client_histograms(rs: RunSet, out: Path) -> Drawn | None:
    """Fig. 3 layout: per comparison group, the distribution of the final per-client
    accuracies of each algorithm (pooled over seeds)."""
    groups: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for variant, finals in rs.finals().items():
        accs = [a for f in finals for a in f.get("client-accuracy", [])]
        if accs:
            group, name = rs.split(variant)
            groups[group][name or variant] = accs
    if not groups:
        return None
    fig, axes = plt.subplots(
        1, len(groups), figsize=(5.5 * len(groups), 3.8), squeeze=False, sharey=True
    )
    bins = np.linspace(0, 100, 21)
    counts: Drawn = {}
    for ax, group in zip(axes[0], sorted(groups, key=sort_key), strict=True):
        for name, accs in sorted(groups[group].items()):
            n, _, _ = ax.hist(
                100 * np.asarray(accs), bins=bins, histtype="step", lw=1.5, label=name
            )
            counts[f"{group}/{name}"] = n
        ax.set(title=group, xlabel="accuracy on the client's data (%)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("clients (pooled over seeds)")
    axes[0][-1].legend(fontsize=7)
    return {**save(fig, out), **counts}


def plot_mean_band(ax, seeds: list[list[tuple[int, float]]], label: str) -> None:
    """Mean over seeds of (round, value) series, with a ± std band (common rounds only)."""
    n = min(len(s) for s in seeds)
    x = [r for r, _ in seeds[0][:n]]
    vals = np.array([[v for _, v in s[:n]] for s in seeds], dtype=float)
    m, sd = vals.mean(0), vals.std(0)
    ax.plot(x, m, label=label)
    ax.fill_between(x, m - sd, m + sd, alpha=0.2)


def plot_train_loss(rs: RunSet, out: Path) -> Drawn | None:
    """Mean global training loss over rounds, one line per variant (± std over seeds)."""
    curves: dict[str, list[list[tuple[int, float]]]] = defaultdict(list)
    for variant, seeds in rs.by_seed().items():
        for run in seeds.values():
            pts = [(r["round"], r["train-loss"]) for r in run.rows if "train-loss" in r]
            if pts:
                curves[variant].append(pts)
    if not curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for variant, seeds in sorted(curves.items()):
        plot_mean_band(ax, seeds, f"{variant} ({len(seeds)} seeds)")
    ax.set(xlabel="round", ylabel="global training loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    return save(fig, out)


def plot_curves(rs: RunSet, out: Path) -> Drawn | None:
    """Mean overall and rare-pattern test accuracy over rounds, one line per variant."""
    by_variant: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for run in rs.complete:
        by_variant[run.label].append([r for r in run.rows if "accuracy" in r])
    if not by_variant:
        return None
    keys = [("accuracy", "overall"), ("rare-accuracy", "rare patterns")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for variant, seeds in sorted(by_variant.items()):
        for ax, (key, title) in zip(axes, keys, strict=True):
            series = [[(r["round"], r.get(key, np.nan)) for r in s] for s in seeds]
            plot_mean_band(ax, series, f"{variant} ({len(seeds)} seeds)")
            ax.set_title(title)
            ax.set_xlabel("round")
            ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[1].legend(fontsize=7)
    return save(fig, out)


def plot_boundaries(rs: RunSet, out: Path, seed: int = 0) -> Drawn | None:
    """Fig. 2 layout: decision boundaries of each variant (one seed) side by side, from
    each run's ``plot_inputs.npz``."""
    runs = [
        r for r in rs.complete if r.seed == seed and r.scenario["data"]["dataset"] == "gaussian2d"
    ]
    runs = [r for r in runs if "grid_pred" in r.plot_inputs]
    runs.sort(key=lambda r: r.label, reverse=True)
    if not runs:
        return None
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 4), squeeze=False)
    for ax, run in zip(axes[0], runs, strict=True):
        final = run.summary["final"]
        title = (
            f"{run.label}\noverall {final['accuracy']:.2f}, "
            f"rare {final.get('rare-accuracy', float('nan')):.2f}"
        )
        plot_decision_boundary(out, run.plot_inputs, ax=ax, title=title)
    return save(fig, out)


def group_weights(
    rs: RunSet,
) -> tuple[dict[str, list[np.ndarray]], dict[str, dict[str, np.ndarray]]]:
    """Per variant, the seeds' ``weights.npy`` and the client groups (CA-Fed Fig. 1d) of
    the oracle's hidden pi and lambda of its first run (a plot, not the strategy, reads
    them), for the complete runs that recorded both."""
    weights: dict[str, list[np.ndarray]] = defaultdict(list)
    groups: dict[str, dict[str, np.ndarray]] = {}
    for run in rs.complete:
        if run.weights is None:
            continue
        if run.label not in groups:
            if "lam" not in run.plot_inputs:
                continue
            groups[run.label] = client_groups(run.plot_inputs["pi"], run.plot_inputs["lam"])
        weights[run.label].append(run.weights)
    return dict(weights), groups


def plot_group_weights_by_variant(
    weights: dict[str, list[np.ndarray]], groups: dict[str, dict[str, np.ndarray]], out: Path
) -> Drawn:
    """CA-Fed Fig. 1d, one panel per variant: cumulative aggregation weight of each
    client group (mean over the seeds of :func:`group_weights`)."""
    names = sorted(weights)
    fig, axes = plt.subplots(
        1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False, sharey=True
    )
    for ax, name in zip(axes[0], names, strict=True):
        seeds = weights[name]
        plot_group_weights(ax, seeds, groups[name], title=f"{name} ({len(seeds)} seeds)")
    for ax in axes[0][1:]:
        ax.set_ylabel("")
        ax.get_legend().remove()
    return save(fig, out)
