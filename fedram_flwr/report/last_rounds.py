"""FedAWE's Table 2 layout (Xiang et al. 2024, Sec. 7): per availability dynamics and
algorithm, the train and test accuracy as mean ± std over seeds of each run's mean over
its last rounds.

- **Rows**: grouped by ``availability.params.dynamics`` (read from each run's resolved
  scenario, however the sweep writes it; the paper's order stationary, staircase, sine,
  interleaved sine first), then the algorithm (``algorithm.name``) in the paper's order:
  FedAWE, FedAvg over active, FedAvg over all, FedAU, F3AST, FedAvg with known p_i^t,
  MIFA, FedVARP; other algorithms after them by name. Two variants of one algorithm under
  one dynamics (e.g. two FedAU cut-offs) get a row each, named by their variant label.
- **Window**: the paper averages the last 50 of 2000 rounds; a run of T rounds here
  averages its last W = min(50, max(1, T // 4)) rounds (:func:`window_of`: the paper's 50
  where the run is long enough, at most a quarter of a scaled-down run), unless
  ``window`` is given.
- **Evaluated rounds only**: a run evaluates every ``eval_every`` rounds and at its last
  round, so its window mean is over the evaluated rounds in (T - W, T] (the ``evals``
  column: how many; at least the last round). Pick ``eval_every`` dividing W for several.
- **Cells**: Test is ``accuracy`` (the server's test set), Train is ``train-accuracy``
  (the global model on the union of the clients' training data, recorded with
  ``client_metrics: true``; "–" without it); "mean ± std %" over the seeds, std with
  ddof = 1 as the report's other tables (:func:`~fedram_flwr.report.tables.mean_std`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedram_flwr.report.runs import Run, RunSet
from fedram_flwr.report.tables import mean_std

PAPER_WINDOW = 50
"""Rounds the paper's Table 2 averages over (of its 2000)."""

ALGORITHMS = {
    "fedawe": "FedAWE",
    "fedavg": "FedAvg over active",
    "fedavg-all": "FedAvg over all",
    "fedau": "FedAU",
    "f3ast": "F3AST",
    "fedavg-is": "FedAvg with known p_i^t",
    "mifa": "MIFA",
    "fedvarp": "FedVARP",
}
"""Our algorithm names -> the paper's, in Table 2's row order."""

DYNAMICS = {
    "stationary": "Stationary",
    "staircase": "Non-stationary (staircase)",
    "sine": "Non-stationary (sine)",
    "interleaved-sine": "Non-stationary (interleaved sine)",
}
"""``availability.params.dynamics`` values -> Table 2's group titles, in its order."""


def window_of(rounds: int) -> int:
    """W for a run of ``rounds`` rounds: the paper's 50, at most a quarter of the run."""
    return min(PAPER_WINDOW, max(1, rounds // 4))


def dynamics_of(run: Run) -> str | None:
    """The run's ``availability.params.dynamics`` (its ``name`` if a mapping), or None."""
    params = run.scenario.get("availability", {}).get("params") or {}
    value = params.get("dynamics")
    if isinstance(value, Mapping):
        value = value.get("name")
    return None if value is None else str(value)


def window_means(run: Run, window: int | None = None) -> dict[str, Any]:
    """One run's means of ``accuracy`` and ``train-accuracy`` over its evaluated rounds
    in (T - W, T], T its last recorded round (nan where none recorded), and ``evals``,
    the number of evaluated rounds in the window."""
    last = max((int(r["round"]) for r in run.rows), default=0)
    w = window_of(last) if window is None else window
    tail = [r for r in run.rows if last - w < int(r["round"]) <= last and "accuracy" in r]
    out: dict[str, Any] = {"evals": len(tail)}
    for key in ("accuracy", "train-accuracy"):
        values = [float(r[key]) for r in tail if key in r]
        out[key] = float(np.mean(values)) if values else float("nan")
    return out


def rank(name: str, known: Mapping[str, str]) -> tuple[int, str]:
    """Names of ``known`` (``DYNAMICS`` or ``ALGORITHMS``) first in its order, then others."""
    return (list(known).index(name), "") if name in known else (len(known), name)


def cell(values: list[float]) -> str:
    """mean ± std % over seeds (1 decimal, as the paper), "–" when no run recorded it."""
    values = [v for v in values if not np.isnan(v)]
    return f"{mean_std(values, digits=1)} %" if values else "–"


def last_rounds_table(rs: RunSet, window: int | None = None) -> str:
    """FedAWE Table 2's layout over the complete runs whose scenario has
    ``availability.params.dynamics`` ("" when none has): one row per (dynamics,
    algorithm), Train and Test as mean ± std % over seeds of each run's last-W-rounds
    mean (:func:`window_means`); ``window`` W, default :func:`window_of` each run's T."""
    groups: dict[tuple[str, str], dict[str, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for run in rs.complete:
        if (dynamics := dynamics_of(run)) is not None:
            name = str(run.scenario.get("algorithm", {}).get("name", "?"))
            groups[(dynamics, name)][run.label].append(run)
    if not groups:
        return ""
    lines = [
        "| dynamics | algorithm | seeds | evals | Train | Test |",
        "|---|---|---|---|---|---|",
    ]
    windows: set[int] = set()
    for dynamics, name in sorted(
        groups, key=lambda k: (rank(k[0], DYNAMICS), rank(k[1], ALGORITHMS))
    ):
        labels = groups[(dynamics, name)]
        for label in sorted(labels):
            runs = labels[label]
            means = [window_means(r, window) for r in runs]
            lasts = [max(int(row["round"]) for row in r.rows) for r in runs]
            windows |= {window_of(t) if window is None else window for t in lasts}
            evals = sorted({m["evals"] for m in means})
            algorithm = f"{ALGORITHMS.get(name, name)} (`{name}`)"
            if len(labels) > 1:
                algorithm += f" [{label}]"
            cells = [
                DYNAMICS.get(dynamics, dynamics),
                algorithm,
                str(len(runs)),
                "-".join(map(str, (evals[0], evals[-1]) if len(evals) > 1 else evals)),
                cell([m["train-accuracy"] for m in means]),
                cell([m["accuracy"] for m in means]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    w = ", ".join(map(str, sorted(windows)))
    return (
        f"Accuracy averaged over each run's last W = {w} rounds (its evaluated rounds in "
        "them: `evals`), then mean ± std over seeds; Train: the global model on the "
        "clients' training data (`client_metrics: true`), Test: on the test set.\n\n"
        + "\n".join(lines)
        + "\n"
    )
