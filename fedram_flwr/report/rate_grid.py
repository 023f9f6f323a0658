"""Learning rates chosen per algorithm by grid search on the training objective (CA-Fed
Sec. V-A: "for all algorithms, we tuned the learning rates eta, eta_bar via grid search";
the paper gives neither the grid nor the rule).

- **Runs**: a sweep over ``algorithm.name`` and the rates (``training.lr``, and
  ``algorithm.server_lr`` where swept), recorded with ``client_metrics: true`` so each
  evaluation has the global training loss ``train-loss`` (the union of the clients'
  training data, example-weighted: F = sum_k alpha_k F_k).
- **Rule**: per algorithm, the rates with the best value of one metric (a
  :data:`CRITERIA` key: by default the lowest ``train-loss``; FedAWE's App. J protocol
  picks the best accuracy, ``train-accuracy`` or ``accuracy``) in the summary's
  ``tail-mean`` (the mean over the evaluations of the last 20% of rounds), averaged over
  the seeds; a run that failed or whose value is not finite (it diverged) counts as the
  worst. Only the chosen metric is read. Tune on seeds that the reported runs do not use.
- **Output**: each algorithm's grid of mean losses with the choice marked, and the
  chosen rows as a zipped sweep (:mod:`fedram_flwr.scenario.sweep`) to paste into the scenario
  that reports them.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from fedram_flwr.report.runs import RunSet

RATES = {"lr": "training.lr", "server_lr": "algorithm.server_lr"}
"""Label fields of the tuned rates -> their scenario fields."""

METRIC, STAT = "train-loss", "tail-mean"

CRITERIA = {
    "train-loss": (1.0, "global training loss"),
    "train-accuracy": (-1.0, "global training accuracy"),
    "accuracy": (-1.0, "test accuracy"),
}
"""Metrics the grid can select on -> (sign, words): the choice minimises sign x value
(the lowest loss, the highest accuracy)."""


def check_metric(metric: str) -> float:
    """The sign of ``metric`` (:data:`CRITERIA`), or an error naming the allowed ones."""
    if metric not in CRITERIA:
        raise ValueError(
            f"select: {metric!r} is not allowed; allowed values: {', '.join(CRITERIA)}"
        )
    return CRITERIA[metric][0]


def grid_losses(rs: RunSet, metric: str = METRIC) -> dict[str, dict[tuple[str, ...], list[float]]]:
    """{algorithm: {rates: [sign x metric per seed]}} over the runs of a rate sweep (rates
    in the order of :data:`RATES` present in the labels; lower is better, so accuracy is
    negated); {} when the runs are not one."""
    sign = check_metric(metric)
    out: dict[str, dict[tuple[str, ...], list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in rs.runs:
        f = run.fields
        rates = tuple(f[k] for k in RATES if k in f)
        if "name" not in f or not rates or set(f) - {"name", *RATES}:
            return {}
        if run.complete:
            value = run.summary.get(STAT, {}).get(metric)
            if value is None:
                return {}  # recorded without client_metrics: nothing to select on
            loss = sign * float(value) if math.isfinite(float(value)) else math.inf
        elif run.status.startswith("failed"):
            loss = math.inf
        else:
            continue  # not finished: the pair is judged on the seeds that are
        out[f["name"]][rates].append(loss)
    return {k: dict(v) for k, v in out.items()}


def tuned_per_algorithm(rs: RunSet) -> bool:
    """Whether the runs hold one rate setting per algorithm (the chosen rows run on the
    reported seeds), so that the rates do not separate the algorithms' comparisons."""
    settings = defaultdict(set)
    for run in rs.runs:
        if "name" not in run.fields or not set(run.fields) & set(RATES):
            return False
        settings[run.fields["name"]].add(tuple(run.fields.get(k) for k in RATES))
    return len(settings) > 1 and all(len(s) == 1 for s in settings.values())


def choose(losses: dict[tuple[str, ...], list[float]]) -> tuple[str, ...]:
    """The rates with the lowest mean loss over seeds (ties: the first in sorted order)."""
    return min(sorted(losses, key=lambda r: tuple(map(float, r))), key=lambda r: np.mean(losses[r]))


def chosen_rates(rs: RunSet, metric: str = METRIC) -> dict[str, tuple[str, ...]]:
    """{algorithm: its chosen rates} (:func:`choose` on :func:`grid_losses`)."""
    return {a: choose(losses) for a, losses in grid_losses(rs, metric).items()}


def rate_grid_section(rs: RunSet, metric: str = METRIC) -> str:
    """The report's grid-search section: one table per algorithm (rows ``lr``, columns
    the other rate, cells mean ± std of ``metric`` over seeds, ** on the choice) and the
    chosen rows as a zipped sweep; "" when the runs are not a rate sweep."""
    sign = check_metric(metric)
    grid = grid_losses(rs, metric)
    if not grid:
        return ""
    names = [k for k in RATES if any(k in r.fields for r in rs.runs)]
    best_word = "lowest" if sign > 0 else "highest"
    text = [
        f"Selection: per algorithm, the {best_word} `{metric}` ({CRITERIA[metric][1]}) "
        "averaged over the evaluations of the last 20% of rounds and over the seeds; "
        "failed or diverged runs count as the worst. No other metric is used.\n"
    ]
    chosen = {}
    for algorithm, losses in grid.items():
        best = chosen[algorithm] = choose(losses)
        rows = sorted({r[0] for r in losses}, key=float)
        cols = sorted({r[1:] for r in losses}, key=lambda c: tuple(map(float, c)))
        corner = " \\ ".join([names[0], "/".join(names[1:])]) if len(names) > 1 else names[0]
        head = [corner, *("/".join(c) or metric for c in cols)]
        text += [f"\n**{algorithm}**:\n", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for lr in rows:
            cells = [_loss_cell(losses.get((lr, *c)), sign) for c in cols]
            cells = [f"**{x}**" if (lr, *c) == best else x for x, c in zip(cells, cols)]
            text.append("| " + " | ".join([lr, *cells]) + " |")
    fields = ", ".join(["algorithm.name", *(RATES[k] for k in names)])
    text += ["\nChosen, as a sweep for the scenario that reports them:\n", "```yaml", "sweep:"]
    text += [f"  {fields}:"]
    text += [f"    - [{', '.join([a, *best])}]" for a, best in chosen.items()]
    return "\n".join([*text, "```", ""])


def _loss_cell(seeds: list[float] | None, sign: float = 1.0) -> str:
    if seeds is None:
        return "–"
    if bad := sum(not math.isfinite(x) for x in seeds):
        return f"failed or diverged ({bad}/{len(seeds)})"
    return f"{sign * np.mean(seeds):.4f} ± {np.std(seeds, ddof=1) if len(seeds) > 1 else 0.0:.4f}"
