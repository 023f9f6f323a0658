"""Reports on time: accuracy against simulated hours beside accuracy
against rounds, and the rounds and simulated hours each variant takes to reach a target
accuracy (``fedram report --target-accuracy 0.7``).

A run on the simulated clock (a scenario with a ``time:`` section) records each round's
end as ``sim-seconds`` (:meth:`~fedram_flwr.rundir.outputs.RoundRecorder.record_time`); round
0, the initial model's evaluation, is at 0 s. A run without a clock has no hours: its
rounds to target are shown, its hours as "–".
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fedram_flwr.report.run_plots import Drawn, plt, save
from fedram_flwr.report.runs import RunSet
from fedram_flwr.report.tables import mean_std, scale_of
from fedram_flwr.scenario.schema import ScenarioError

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


def updates_computed(row: dict[str, Any]) -> int:
    """Client updates computed in one recorded round: the clients a synchronous round
    started (``started``: dropped and late ones too, their work is spent) or the updates a
    FedBuff step took from its buffer (``buffer-clients``); 0 in a row with neither."""
    if "started" in row:
        return int(row["started"])
    return len(row.get("buffer-clients", ()))


def within_budget(rows: list[dict[str, Any]], hours: float) -> list[dict[str, Any]]:
    """The rows of rounds that end at or before ``hours`` simulated hours (round 0
    included); the run must reach the budget: a run that ends before it is an error,
    since its accuracy at the budget is unknown."""
    end = max((r["sim-seconds"] for r in rows if "sim-seconds" in r), default=0.0)
    if end < hours * HOUR:
        raise ValueError(
            f"a run ends at {end / HOUR:.3f} simulated hours, before the budget of {hours:g} h; "
            "give it more rounds or lower --time-budget"
        )
    return [r for r in rows if r["round"] == 0 or r.get("sim-seconds", np.inf) <= hours * HOUR]


def budget_table(rs: RunSet, hours: float, target: float, key: str = "accuracy") -> str:
    """One row per variant of the runs on a clock, each run cut at ``hours`` simulated
    hours: the seeds that reach ``target`` within it, their hours and client updates
    computed to it, and, at the budget, the last evaluation's ``key`` and the client
    updates computed and dropped (mean ± std over seeds; hours and updates to target over
    the seeds that reach it)."""
    header = [
        "variant",
        "reached",
        "hours to target",
        "updates to target",
        f"{key} at {hours:g} h (%)",
        f"updates in {hours:g} h",
        "dropped",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    by_variant: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for run in rs.complete:
        if has_clock(run.rows):
            try:
                by_variant[run.label].append(within_budget(run.rows, hours))
            except ValueError as err:  # the run named: which one to give more rounds
                raise ScenarioError(f"--time-budget: {run.path}: {err}") from None
    for variant in sorted(by_variant):
        seeds = by_variant[variant]
        hits, work = [], []
        for rows in seeds:
            if hit := time_to_target(rows, target, key):
                hits.append(hit[1])
                work.append(sum(updates_computed(r) for r in rows if r["round"] <= hit[0]))
        final = [[r[key] for r in rows if key in r][-1] for rows in seeds]
        spent = [sum(updates_computed(r) for r in rows) for rows in seeds]
        dropped = [sum(int(r.get("dropped", 0)) for r in rows) for rows in seeds]
        cells = [
            variant,
            f"{len(hits)} of {len(seeds)}",
            mean_std(hits, scale=1.0, digits=2) if hits else NOT_REACHED,
            mean_std(work, scale=1.0, digits=0) if work else NOT_REACHED,
            mean_std(final, scale=scale_of(key)),
            mean_std(spent, scale=1.0, digits=0),
            mean_std(dropped, scale=1.0, digits=0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_time_curves(
    rs: RunSet, out: Path, key: str = "accuracy", budget: float | None = None
) -> Drawn | None:
    """Mean test accuracy against rounds (left) and against simulated hours (right), one
    line per variant of the runs on a clock (the seeds' curves interpolated on a common
    grid of hours, up to the shortest seed's end or ``budget`` hours, the earlier); None
    without such runs."""
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
        end = min(min(s[-1][0] for s in series), np.inf if budget is None else budget)
        grid = np.linspace(0.0, end, 200)
        ys = [np.interp(grid, [h for h, _ in s], [v for _, v in s]) for s in series]
        by_hour.plot(grid, np.mean(ys, axis=0), label=label)
    by_round.set(xlabel="round", ylabel=f"test {key}")
    by_hour.set(xlabel="simulated hours")
    for ax in (by_round, by_hour):
        ax.grid(alpha=0.3)
    by_hour.legend(fontsize=7)
    return save(fig, out)


def time_section(
    rs: RunSet, root: Path, target: float | None, budget: float | None = None
) -> list[str]:
    """The report's lines on time: the time-to-target table (``target`` given), the
    same within a budget of simulated hours with the client work (``budget`` and
    ``target`` given) and the accuracy-against-hours figure (runs on a clock)."""
    text: list[str] = []
    if target is not None:
        text += [
            f"\n## Time to {100 * target:g}% test accuracy\n",
            "The first evaluation at or above the target; rounds and simulated hours "
            "(runs on a clock) are mean ± std over the seeds that reach it.\n",
            target_table(rs, target),
        ]
    if target is not None and budget is not None:
        text += [
            f"\n## Within {budget:g} simulated hours\n",
            "Each run cut at the budget. Hours and client updates to the target: mean ± std "
            "over the seeds that reach it within the budget; accuracy (last evaluation at or "
            "before the budget), updates computed (clients started by a synchronous round, "
            "dropped and late ones included; updates a FedBuff step buffered) and updates "
            "dropped: mean ± std over seeds.\n",
            budget_table(rs, budget, target),
        ]
    if plot_time_curves(rs, root / "curves_time.png", budget=budget) is not None:
        text += [
            "\n## Accuracy against simulated time\n",
            "![test accuracy against rounds and simulated hours](curves_time.png)\n",
        ]
    return text
