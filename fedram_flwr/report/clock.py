"""Reports on time (issue 28, item 5): accuracy against simulated hours beside accuracy
against rounds, and the rounds and simulated hours each variant takes to reach a target
accuracy (``fedram report --target-accuracy 0.7``).

A run on the simulated clock (a scenario with a ``time:`` section) records each round's
end as ``sim-seconds`` (:meth:`~fedram_flwr.outputs.RoundRecorder.record_time`); round
0, the initial model's evaluation, is at 0 s. A run without a clock has no hours: its
rounds to target are shown, its hours as "–".
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fedram_flwr.plots import Drawn, plt, save
from fedram_flwr.report.runs import RunSet
from fedram_flwr.report.tables import mean_std

HOUR = 3600.0
NOT_REACHED = "not reached"


def has_clock(rows: list[dict[str, Any]]) -> bool:
    """Whether a run's rows carry the simulated clock."""
    return any("sim-seconds" in r for r in rows)


def hours_series(rows: list[dict[str, Any]], key: str = "accuracy") -> list[tuple[float, float]]:
    """(simulated hours at the round's end, ``key``) of every evaluated row; round 0 at
    0 h."""
    out = []
    for r in rows:
        if key in r and (r["round"] == 0 or "sim-seconds" in r):
            out.append((r.get("sim-seconds", 0.0) / HOUR if r["round"] else 0.0, r[key]))
    return out


def time_to_target(
    rows: list[dict[str, Any]], target: float, key: str = "accuracy"
) -> tuple[int, float | None] | None:
    """The first evaluation at which ``key`` >= ``target``: (round, simulated hours,
    None without a clock); None when no evaluation reaches it."""
    for r in rows:
        if key in r and r[key] >= target:
            if r["round"] == 0:
                return 0, 0.0 if has_clock(rows) else None
            seconds = r.get("sim-seconds")
            return r["round"], None if seconds is None else seconds / HOUR
    return None


def target_table(rs: RunSet, target: float, key: str = "accuracy") -> str:
    """One row per variant: how many seeds reach ``target``, and their rounds and
    simulated hours to it (mean ± std over the seeds that reach it)."""
    header = ["variant", "seeds", "reached", "rounds to target", "simulated hours to target"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    by_variant: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for run in rs.complete:
        by_variant[run.label].append(run.rows)
    for variant in sorted(by_variant, reverse=True):
        seeds = by_variant[variant]
        hits = [h for h in (time_to_target(rows, target, key) for rows in seeds) if h]
        rounds = mean_std([h[0] for h in hits], scale=1.0, digits=1) if hits else NOT_REACHED
        hours = [h[1] for h in hits if h[1] is not None]
        if not any(has_clock(rows) for rows in seeds):
            shown = "–"
        elif not hits:
            shown = NOT_REACHED
        else:
            shown = mean_std(hours, scale=1.0, digits=3)
        cells = [variant, str(len(seeds)), f"{len(hits)} of {len(seeds)}", rounds, shown]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_time_curves(rs: RunSet, out: Path, key: str = "accuracy") -> Drawn | None:
    """Mean test accuracy against rounds (left) and against simulated hours (right), one
    line per variant of the runs on a clock (the seeds' curves interpolated on a common
    grid of hours, up to the shortest seed's end); None without such runs."""
    by_variant: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for run in rs.complete:
        if has_clock(run.rows):
            by_variant[run.label].append(run.rows)
    if not by_variant:
        return None
    fig, (by_round, by_hour) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for variant, seeds in sorted(by_variant.items()):
        label = f"{variant} ({len(seeds)} seeds)"
        evals = [[r for r in rows if key in r] for rows in seeds]
        n = min(len(e) for e in evals)
        by_round.plot(
            [r["round"] for r in evals[0][:n]],
            np.mean([[r[key] for r in e[:n]] for e in evals], axis=0),
            label=label,
        )
        series = [hours_series(rows, key) for rows in seeds]
        end = min(s[-1][0] for s in series)
        grid = np.linspace(0.0, end, 200)
        ys = [np.interp(grid, [h for h, _ in s], [v for _, v in s]) for s in series]
        by_hour.plot(grid, np.mean(ys, axis=0), label=label)
    by_round.set(xlabel="round", ylabel=f"test {key}")
    by_hour.set(xlabel="simulated hours")
    for ax in (by_round, by_hour):
        ax.grid(alpha=0.3)
    by_hour.legend(fontsize=7)
    return save(fig, out)


def time_section(rs: RunSet, root: Path, target: float | None) -> list[str]:
    """The report's lines on time: the time-to-target table (``target`` given) and the
    accuracy-against-hours figure (runs on a clock)."""
    text: list[str] = []
    if target is not None:
        text += [
            f"\n## Time to {100 * target:g}% test accuracy\n",
            "The first evaluation at or above the target; rounds and simulated hours "
            "(runs on a clock) are mean ± std over the seeds that reach it.\n",
            target_table(rs, target),
        ]
    if plot_time_curves(rs, root / "curves_time.png") is not None:
        text += [
            "\n## Accuracy against simulated time\n",
            "![test accuracy against rounds and simulated hours](curves_time.png)\n",
        ]
    return text
