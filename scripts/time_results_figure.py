"""The figure of docs/time-results.md: mean test accuracy over the seeds against server
steps, simulated hours and client updates computed, up to a time budget.

    .venv/bin/python scripts/time_results_figure.py runs/time_results/time_results_fashion_mnist \
        --budget 6 --out docs/results/time_results/accuracy_time_work.png

``fedram report --time-budget`` draws accuracy against rounds and hours (curves_time.png)
for any runs; this adds the client-work axis FedBuff's efficiency claim is about and
zooms on the accuracies the variants differ by. Every seed's curve is interpolated on a
common grid up to the budget (hours) or to the fewest updates any seed computed in it.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedram_flwr.report import RunSet
from fedram_flwr.report.clock import HOUR, has_clock, updates_computed, within_budget
from fedram_flwr.report.run_plots import plt, save


def curves(rows: list[dict], key: str = "accuracy") -> np.ndarray:
    """(round, hours, cumulative updates computed, ``key``) of each evaluated row."""
    out, work = [], 0
    for r in rows:
        work += updates_computed(r)
        if key in r:
            out.append((r["round"], r.get("sim-seconds", 0.0) / HOUR, work, r[key]))
    return np.array(out, dtype=float)


def mean_on_grid(series: list[np.ndarray], column: int) -> tuple[np.ndarray, np.ndarray]:
    """The seeds' accuracy interpolated on a grid of ``column`` up to the shortest end."""
    grid = np.linspace(0.0, min(s[-1, column] for s in series), 300)
    return grid, np.mean([np.interp(grid, s[:, column], s[:, 3]) for s in series], axis=0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path)
    p.add_argument("--budget", type=float, required=True, help="simulated hours")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    by_variant: dict[str, list[np.ndarray]] = defaultdict(list)
    for run in RunSet.load(args.runs).complete:
        if has_clock(run.rows):
            fields = run.fields
            name = fields.get("name", run.label)  # FedBuff's own loop reads no policy
            name += "" if name == "fedbuff" else f", {fields.get('policy', '')}".rstrip(", ")
            by_variant[name].append(curves(within_budget(run.rows, args.budget)))
    if not by_variant:
        raise SystemExit(f"{args.runs}: no complete runs on a clock")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    for name, series in sorted(by_variant.items()):
        style = "--" if "keep" in name else "-"
        n = min(len(s) for s in series)
        label = f"{name} ({len(series)} seeds)"
        mean = np.mean([s[1:n, 3] for s in series], axis=0)
        axes[0].plot(series[0][1:n, 0], mean, style, label=label)
        for ax, column in ((axes[1], 1), (axes[2], 2)):
            ax.plot(*mean_on_grid(series, column), style)
    axes[0].set(xscale="log", xlabel="round (FedBuff: server step), log scale")
    axes[0].set_ylabel("test accuracy, mean over seeds")
    axes[1].set(xlabel=f"simulated hours (budget {args.budget:g} h)")
    axes[2].set(xlabel="client updates computed (dropped and late included)")
    for ax in axes:
        ax.set_ylim(0.65, 0.85)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="upper left")
    save(fig, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
