"""Our FedAWE Table 2 beside the paper's (Xiang et al., NeurIPS 2024, Table 2 and App. J
Table 7), row by row, and where the rankings agree.

- **The paper's rows**: mean train and test accuracy (%) on SVHN, CIFAR-10 and CINIC-10
  (the ± std is left out), 2000 rounds, the last 50 averaged, 3 seeds; per dynamics and
  algorithm in Table 2's order (:data:`~fedram_flwr.report.last_rounds.ALGORITHMS`).
- **Ours**: each (dynamics, algorithm)'s test and train accuracy from
  :func:`~fedram_flwr.report.last_rounds.window_means` (the last W rounds of each complete
  run), averaged over seeds; the data set is another (Fashion-MNIST), so only rankings are
  compared, never the numbers.
- **Ranks**: 1 is the highest test accuracy among the algorithms we ran (the paper's rows
  ranked among the same algorithms; ties share the better rank). Agreement per dynamics
  and paper data set: Kendall's tau-b of the two test-accuracy orders, the algorithm
  pairs ordered alike, and whether the best of the paper's group (1) (no memory, no known
  statistics) and the worst algorithm are the same.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations

import numpy as np
import scipy.stats

from fedram_flwr.report.last_rounds import ALGORITHMS, DYNAMICS, dynamics_of, window_means
from fedram_flwr.report.runs import RunSet

DATASETS = ("SVHN", "CIFAR-10", "CINIC-10")

GROUP1 = ("fedawe", "fedavg", "fedavg-all", "fedau", "f3ast")
"""Table 2's group (1): not aided by memory or known statistics (its bold marks the best)."""

TABLE7 = {
    name: (0.1, 1.0) if name in ("fedawe", "fedavg-is") else (0.05, 1.0) for name in ALGORITHMS
}
"""App. J Table 7: (eta_0, eta_g) per algorithm, the same on all three data sets."""

_TABLE2 = """
stationary       fedawe     86.5 86.1 68.1 66.3 47.9 47.3
stationary       fedavg     82.6 82.4 64.1 62.9 43.6 43.1
stationary       fedavg-all 76.1 76.1 55.8 55.4 38.4 38.0
stationary       fedau      83.4 83.2 65.4 64.1 45.6 45.2
stationary       f3ast      83.2 83.2 64.4 63.5 45.3 44.8
stationary       fedavg-is  86.1 85.6 65.4 63.1 45.0 44.6
stationary       mifa       84.2 84.1 66.6 65.3 47.5 46.9
stationary       fedvarp    84.6 84.3 67.5 66.3 47.8 47.2
staircase        fedawe     85.9 85.6 67.7 66.0 47.5 46.9
staircase        fedavg     82.5 82.4 64.2 63.0 43.7 42.3
staircase        fedavg-all 75.9 75.9 55.7 55.4 38.4 37.9
staircase        fedau      83.6 83.4 65.2 63.9 45.7 45.1
staircase        f3ast      83.1 83.1 64.3 63.3 45.2 44.8
staircase        fedavg-is  85.8 85.2 68.0 66.1 45.0 44.7
staircase        mifa       84.2 84.0 66.7 65.3 47.5 46.9
staircase        fedvarp    84.6 84.3 67.3 66.1 47.7 47.2
sine             fedawe     85.7 85.6 64.9 63.5 46.4 45.8
sine             fedavg     82.1 82.0 63.3 62.1 43.1 42.6
sine             fedavg-all 71.3 71.3 52.2 52.1 36.4 36.0
sine             fedau      82.5 82.5 64.2 63.0 44.4 43.9
sine             f3ast      82.3 82.3 63.1 62.3 44.1 43.7
sine             fedavg-is  86.3 86.0 69.1 67.3 47.9 47.4
sine             mifa       84.2 84.1 66.6 65.5 47.4 46.9
sine             fedvarp    84.5 84.3 67.4 66.0 47.7 47.1
interleaved-sine fedawe     85.2 84.6 64.8 63.3 47.1 46.6
interleaved-sine fedavg     80.9 80.7 61.9 60.7 41.9 41.5
interleaved-sine fedavg-all 69.5 69.5 51.3 51.3 35.9 35.6
interleaved-sine fedau      82.6 82.4 63.9 62.8 44.2 43.8
interleaved-sine f3ast      81.3 81.3 62.2 61.3 43.1 42.7
interleaved-sine fedavg-is  85.8 85.2 68.7 66.5 47.2 46.8
interleaved-sine mifa       83.8 83.7 65.8 64.6 46.5 45.9
interleaved-sine fedvarp    84.5 84.1 67.3 65.7 47.7 47.2
"""
"""Table 2's means: dynamics, algorithm, then (train, test) % for each of DATASETS."""


def paper_table2() -> dict[tuple[str, str], dict[str, tuple[float, float]]]:
    """{(dynamics, algorithm): {data set: (train %, test %)}} of the paper's Table 2."""
    out = {}
    for line in _TABLE2.strip().splitlines():
        dynamics, name, *numbers = line.split()
        values = list(map(float, numbers))
        out[(dynamics, name)] = {
            d: (values[2 * i], values[2 * i + 1]) for i, d in enumerate(DATASETS)
        }
    return out


def our_table2(rs: RunSet, window: int | None = None) -> dict[tuple[str, str], tuple[float, float]]:
    """{(dynamics, algorithm): (train %, test %)} over the complete runs, each run's
    last-W-rounds mean averaged over its seeds (nan where not recorded)."""
    runs = defaultdict(list)
    for run in rs.complete:
        if (dynamics := dynamics_of(run)) is not None:
            runs[(dynamics, str(run.scenario.get("algorithm", {}).get("name")))].append(run)
    out = {}
    for key, group in runs.items():
        means = [window_means(r, window) for r in group]
        out[key] = tuple(
            100 * float(np.mean([m[k] for m in means])) for k in ("train-accuracy", "accuracy")
        )
    return out


def ranks(values: dict[str, float]) -> dict[str, int]:
    """1 for the highest value; ties share the better rank."""
    return {k: 1 + sum(other > v for other in values.values()) for k, v in values.items()}


def agreement(ours: dict[str, float], paper: dict[str, float]) -> dict[str, object]:
    """How two orders of the same algorithms agree: Kendall's tau-b, the pairs ordered
    alike (of all pairs), and the best of group (1) and the worst, each side's."""
    names = sorted(ours)
    pairs = list(combinations(names, 2))
    alike = sum(np.sign(ours[a] - ours[b]) == np.sign(paper[a] - paper[b]) for a, b in pairs)
    tau = scipy.stats.kendalltau([ours[n] for n in names], [paper[n] for n in names]).statistic
    group = [n for n in names if n in GROUP1]

    def best(values: dict[str, float]) -> str | None:
        return max(group, key=lambda n: values[n]) if group else None

    return {
        "tau": float(tau),
        "alike": int(alike),
        "pairs": len(pairs),
        "best1": (best(ours), best(paper)),
        "worst": (min(names, key=ours.get), min(names, key=paper.get)),
    }


def comparison_section(rs: RunSet, window: int | None = None) -> str:
    """Markdown: our rows beside the paper's, row by row (test accuracy and its rank among
    the algorithms run), then the ranking agreement per dynamics and paper data set;
    "" when no complete run has a dynamics."""
    ours = our_table2(rs, window)
    if not ours:
        return ""
    paper = paper_table2()
    head = ["dynamics", "algorithm", "ours Train", "ours Test (rank)"]
    head += [f"{d} Test (rank)" for d in DATASETS]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    summary = [
        "\n| dynamics | paper data set | Kendall tau-b | pairs ordered alike | best of group (1): "
        "ours / paper | worst: ours / paper |",
        "|---|---|---|---|---|---|",
    ]
    dynamics_order = [d for d in DYNAMICS if any(k[0] == d for k in ours)]
    for dynamics in dynamics_order:
        names = [n for n in ALGORITHMS if (dynamics, n) in ours]
        our_test = {n: ours[(dynamics, n)][1] for n in names}
        our_rank = ranks(our_test)
        theirs = {d: {n: paper[(dynamics, n)][d][1] for n in names} for d in DATASETS}
        their_rank = {d: ranks(theirs[d]) for d in DATASETS}
        for n in names:
            train, test = ours[(dynamics, n)]
            cells = [DYNAMICS[dynamics], ALGORITHMS[n], f"{train:.1f} %"]
            cells.append(f"{test:.1f} % ({our_rank[n]})")
            cells += [f"{theirs[d][n]:.1f} % ({their_rank[d][n]})" for d in DATASETS]
            lines.append("| " + " | ".join(cells) + " |")
        if len(names) < 2:
            continue
        for d in DATASETS:
            a = agreement(our_test, theirs[d])
            best = " / ".join(ALGORITHMS.get(x, "–") if x else "–" for x in a["best1"])
            worst = " / ".join(ALGORITHMS[x] for x in a["worst"])
            summary.append(
                f"| {DYNAMICS[dynamics]} | {d} | {a['tau']:.2f} | {a['alike']} of {a['pairs']} "
                f"| {best} | {worst} |"
            )
    return "\n".join(lines) + "\n" + "\n".join(summary) + "\n"
