"""The bias atlas's rows, columns, theory and page: which algorithm reaches the true
optimum under which availability law (:mod:`fedram_flwr.engines.bias_atlas` measures).

Each cell (:func:`summarise`): the distance to w* of the model averaged over the second
half of the rounds and over the seeds (averaging removes the jitter of random
participation, not a bias), relative to the start's, and its trend against the same
average over rounds T/4..T/2: ``reaches`` (below :data:`REACHED`), ``stalled`` (a bias:
the distance fell by less than :data:`STALLED` over the second half) or ``shrinking``.
Beside it, what theory predicts (:data:`THEORY`) and whether the measurement agrees.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedram_flwr.engines.bias_atlas import N, Problem, run_cell, trace_file

REACHED = 0.01
"""A cell reaches w* when its averaged distance is below this share of the start's."""
STALLED = 0.8
"""A cell above :data:`REACHED` has stalled (a bias) when its distance over the second
half fell by less than this factor; otherwise it is still shrinking."""

SPREAD = [round(1.0 - 0.8 * i / (N - 1), 3) for i in range(N)]  # 1.0 down to 0.2

ALGORITHMS: dict[str, dict[str, Any]] = {
    "FedAvg": {"name": "fedavg"},
    "FedAvg-IS (known p)": {"name": "fedavg-is", "params": {"availability": "oracle"}},
    "FedAU": {"name": "fedau"},
    "MIFA": {"name": "mifa"},
    "FedVARP": {"name": "fedvarp"},
    "FedAR": {"name": "fedar"},
    "FedStale": {"name": "fedstale"},
    "FedAWE": {"name": "fedawe"},
    "F3AST": {"name": "f3ast"},
    "CA-Fed": {"name": "ca-fed"},
    "Debiasing FedAvg": {"name": "debiasing-fedavg"},
    "SCAFFOLD": {"name": "scaffold"},
    "Amplified SCAFFOLD": {"name": "amplified-scaffold"},
    "FOCUS": {"name": "focus"},
    "Fed-CVaR-Avg (alpha=1)": {"name": "fed-cvar-avg", "params": {"alpha": 1.0}},
    "FedBuff (clock)": {"name": "fedbuff", "params": {"buffer_size": 3, "concurrency": 4}},
}

LAWS: dict[str, Callable[[int], dict[str, Any]]] = {
    "Bernoulli, uniform": lambda r: {"oracle": "bernoulli", "params": {"p": [0.5] * N}},
    "Bernoulli, heterogeneous": lambda r: {"oracle": "bernoulli", "params": {"p": SPREAD}},
    "Markov": lambda r: {"oracle": "markov", "params": {}},
    "cyclic": lambda r: {"oracle": "cyclic", "params": {"period": 12, "window": 4}},
    "min-separation": lambda r: {
        "oracle": "min-separation",
        "params": {"separation": 1, "clients_per_round": 3},
    },
    "non-stationary (sine)": lambda r: {"oracle": "nonstationary", "params": {"p": SPREAD}},
    "trace (diurnal)": lambda r: {
        "oracle": "trace",
        "params": {"path": str(trace_file(r)), "past_end": "wrap"},
    },
}
EQUAL_RATES = ("Bernoulli, uniform", "cyclic")
"""The laws under which every client is available at the same long-run rate."""

U, B, K = "unbiased", "biased", "unknown"


def _rates(equal: str, unequal: str) -> dict[str, str]:
    return {law: equal if law in EQUAL_RATES else unequal for law in LAWS}


BERNOULLI = ("Bernoulli, uniform", "Bernoulli, heterogeneous")


def _only(unbiased: Sequence[str], source: str, rest: str = K) -> tuple[dict[str, str], str]:
    return {law: U if law in unbiased else rest for law in LAWS}, source


THEORY: dict[str, tuple[dict[str, str], str]] = {
    "FedAvg": (_rates(U, B), "FedAvg minimises sum_i p_i f_i: Wang and Ji, ICLR 2024, Sec. 3"),
    "FedAvg-IS (known p)": _only(LAWS, "1/p_i weights with the true p: unbiased in expectation"),
    "FedAU": _only(
        (*BERNOULLI, "cyclic"), "Wang and Ji, ICLR 2024: independent participation analysed"
    ),
    "MIFA": _only(LAWS, "Gu et al., NeurIPS 2021: arbitrary unavailability, bounded gaps"),
    "FedVARP": _only(LAWS, "Jhunjhunwala et al., UAI 2022: every client's latest update"),
    "FedAR": _only(LAWS, "Jiang et al., FedAR: every client's rectified latest update"),
    "FedStale": _only(BERNOULLI, "Rodio and Neglia 2024: FedAU-weighted, independent laws"),
    "FedAWE": _only(
        (*BERNOULLI, "non-stationary (sine)"),
        "Xiang et al., NeurIPS 2024: independent, heterogeneous, non-stationary",
    ),
    "F3AST": _only(
        (*BERNOULLI, "Markov", "cyclic"), "Ribero et al., JSTSP 2023: stationary rates, tracked"
    ),
    "CA-Fed": (_rates(K, B), "Rodio et al., ToN 2024: biased by design once it excludes"),
    "Debiasing FedAvg": _only(
        (*BERNOULLI, "Markov", "cyclic", "min-separation"),
        "Sun et al., ICLR 2025: min-separation and stationary laws, 1/pi_hat",
    ),
    "SCAFFOLD": _only(EQUAL_RATES, "Karimireddy et al., ICML 2020: uniform sampling analysed"),
    "Amplified SCAFFOLD": _only(("cyclic",), "Crawshaw and Liu, NeurIPS 2024: periodic laws"),
    "FOCUS": _only(LAWS, "Ying et al., NeurIPS 2025: exact under any participation"),
    "Fed-CVaR-Avg (alpha=1)": (_rates(U, B), "alpha = 1: CVaR is the mean, FedAvg's rule"),
    "FedBuff (clock)": _only((), "Nguyen et al., AISTATS 2022: bias not analysed"),
}


@dataclass(frozen=True)
class Cell:
    """One (algorithm, law) over seeds: the relative tail distance, its trend, the
    verdict, or why it was not run."""

    distance: float = float("nan")
    trend: float = float("nan")
    verdict: str = "not run"
    why: str = ""


def summarise(problem: Problem, runs: Sequence[np.ndarray]) -> Cell:
    """The cell of the runs (one per seed, each the models w_0..w_T): the mean over the
    seeds of the model averaged over rounds T/2..T (a bias is the same in every seed, the
    jitter of the draws is not), its distance to w* relative to the start's, and the
    trend against the same over rounds T/4..T/2."""
    start = float(np.linalg.norm(runs[0][0] - problem.optimum))
    t = len(runs[0]) - 1
    end = np.mean([w[t // 2 :].mean(0) for w in runs], 0)
    mid = np.mean([w[t // 4 : t // 2].mean(0) for w in runs], 0)
    end_d = float(np.linalg.norm(end - problem.optimum)) / start
    mid_d = float(np.linalg.norm(mid - problem.optimum)) / start
    trend = end_d / mid_d if mid_d > 0 else 0.0
    verdict = "reaches" if end_d < REACHED else "stalled" if trend >= STALLED else "shrinking"
    return Cell(end_d, trend, verdict)


def agrees(predicted: str, verdict: str) -> str:
    """Whether a measured verdict agrees with the prediction (``-`` when none is made)."""
    if predicted == K or verdict == "not run":
        return "-"
    if verdict == "shrinking":
        return "open"
    return "yes" if (predicted == U) == (verdict == "reaches") else "no"


def build(
    algorithms: Mapping[str, dict[str, Any]],
    laws: Sequence[str],
    seeds: Sequence[int],
    rounds: int,
    problem: Problem,
) -> tuple[dict[tuple[str, str], Cell], float]:
    """Measure every (algorithm, law) cell over ``seeds``; the cells and the CPU seconds."""
    start = time.process_time()
    cells = {}
    for label, algorithm in algorithms.items():
        for law in laws:
            try:
                runs = [run_cell(problem, algorithm, LAWS[law](rounds), s, rounds) for s in seeds]
            except ValueError as err:
                cells[label, law] = Cell(why=str(err).splitlines()[0][:160])
                continue
            cells[label, law] = summarise(problem, runs)
    return cells, time.process_time() - start


def markdown(
    cells: Mapping[tuple[str, str], Cell],
    laws: Sequence[str],
    header: str,
) -> str:
    """The atlas page: the distance table, the verdict/theory table, the reasons."""
    algorithms = list(dict.fromkeys(a for a, _ in cells))
    lines = [header, "", "## Distance to w* (tail average / start) and trend", ""]
    lines.append("| algorithm | " + " | ".join(laws) + " |")
    lines.append("|---" * (len(laws) + 1) + "|")
    for a in algorithms:
        row = []
        for law in laws:
            c = cells[a, law]
            row.append("n/a" if c.verdict == "not run" else f"{c.distance:.3g} ({c.trend:.2f})")
        lines.append(f"| {a} | " + " | ".join(row) + " |")
    lines += ["", "## Measured verdict / theory / agreement", ""]
    lines.append("| algorithm | " + " | ".join(laws) + " | theory from |")
    lines.append("|---" * (len(laws) + 2) + "|")
    for a in algorithms:
        theory, source = THEORY[a]
        row = []
        for law in laws:
            verdict = cells[a, law].verdict
            row.append(f"{verdict} / {theory[law]} / {agrees(theory[law], verdict)}")
        lines.append(f"| {a} | " + " | ".join(row) + f" | {source} |")
    skipped = sorted({(a, c.why) for (a, _), c in cells.items() if c.why})
    if skipped:
        lines += ["", "## Cells not run", ""]
        lines += [f"- {a}: {why}" for a, why in skipped]
    return "\n".join(lines) + "\n"


def heat_map(cells: Mapping[tuple[str, str], Cell], laws: Sequence[str], path: Path) -> None:
    """A heat map of log10 of the relative tail distance (grey: not run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    algorithms = list(dict.fromkeys(a for a, _ in cells))
    grid = np.array([[cells[a, law].distance for law in laws] for a in algorithms])
    fig, ax = plt.subplots(figsize=(1.3 * len(laws) + 3, 0.42 * len(algorithms) + 1.5))
    shown = np.ma.masked_invalid(np.log10(np.maximum(grid, 1e-6)))
    image = ax.imshow(shown, cmap="RdYlGn_r", vmin=-4, vmax=0, aspect="auto")
    ax.set_xticks(range(len(laws)), laws, rotation=30, ha="right")
    ax.set_yticks(range(len(algorithms)), algorithms)
    for (r, c), v in np.ndenumerate(grid):
        ax.text(c, r, "n/a" if np.isnan(v) else f"{v:.2g}", ha="center", va="center", fontsize=7)
    fig.colorbar(image, ax=ax, label="log10 |w - w*| / |w0 - w*| (tail average)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
