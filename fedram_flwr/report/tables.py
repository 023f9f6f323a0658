"""The papers' tables from a :class:`RunSet`: mean ± std over seeds per variant, the
paper's two-key layout, FedAR's paired t-tests (Table 2) and per-client accuracy (Table
3), RC-FL's fairness tables (Table 1) and CA-Fed's per-group aggregation weight."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
from scipy.stats import ttest_rel

from fedram_flwr.report.runs import Run, RunSet


def mean_std(values: list[float], scale: float = 100.0, digits: int = 2) -> str:
    v = scale * np.asarray(values, dtype=float)
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.{digits}f}"


def fmt_metric(values: list[float], key: str) -> str:
    """mean ± std over seeds: accuracies in % (2 decimals), losses as they are (3)."""
    return mean_std(values, scale_of(key), digits=3 if "loss" in key else 2)


def scale_of(key: str) -> float:
    """Accuracies are shown in %, losses as they are."""
    return 1.0 if "loss" in key else 100.0


def metric_columns(finals: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(key, header) of the columns: overall, rare patterns, each rare class, the global
    training loss when recorded."""
    cols = [("accuracy", "overall acc (%)")]
    if "rare-accuracy" in finals[0]:
        cols.append(("rare-accuracy", "rare-pattern acc (%)"))
    cols += [(f"accuracy-class-{c}", f"rare class {c} (%)") for c in finals[0]["rare-classes"]]
    if "train-loss" in finals[0]:
        cols.append(("train-loss", "train loss"))
    return cols


def sort_key(value: str) -> tuple[int, float | str]:
    """Numbers in numeric order before words."""
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


def markdown_table(rs: RunSet, stat: str = "final") -> str:
    """One row per variant: metrics as mean ± std over the complete seeds."""
    runs, incomplete = rs.finals(stat), rs.incomplete(stat)
    if not runs:
        return f"No complete runs under {rs.root}.\n" + incomplete_list(incomplete)
    lines = []
    any_finals = next(iter(runs.values()))
    cols = metric_columns(any_finals)
    header = ["variant", "seeds", *[h for _, h in cols]]
    has_t = "t" in any_finals[0]
    if has_t:
        header.append("t")
    warned = any(rs.warnings(v) for v in runs)
    if warned:  # e.g. a run in which nobody was ever available
        header.append("warnings")
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for variant in sorted(runs, reverse=True):  # alpha=1.0 (FedAvg) first
        finals = runs[variant]
        cells = [variant, str(len(finals))]
        cells += [fmt_metric([f.get(k, np.nan) for f in finals], k) for k, _ in cols]
        if has_t:
            cells.append(mean_std([f.get("t", np.nan) for f in finals], scale=1.0))
        if warned:
            warnings = rs.warnings(variant)
            cells.append("; ".join(f"{w} ({n} of {len(finals)})" for w, n in warnings.items()))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + incomplete_list(incomplete)


def incomplete_list(incomplete: list[tuple[str, str]]) -> str:
    """The runs left out of a table and why (failed, interrupted, damaged: ...)."""
    if not incomplete:
        return ""
    lines = ["", "Incomplete runs (not in the table):", *[f"- {p}: {s}" for p, s in incomplete]]
    return "\n".join(lines) + "\n"


def pivot_table(rs: RunSet, row_key: str, col_key: str, stat: str = "final") -> str:
    """The paper's Table 1 layout: rows ``row_key`` values, columns ``col_key`` values,
    each cell "overall | rare class a | rare class b" (mean ± std over seeds)."""
    runs = rs.finals(stat)
    if not runs:
        return f"No complete runs under {rs.root}.\n"
    fields = {v: rs.fields(v) for v in runs}
    rows = sorted({fields[v].get(row_key, "?") for v in runs}, key=sort_key)
    cols = sorted({fields[v].get(col_key, "?") for v in runs}, key=sort_key, reverse=True)
    keys = [k for k, _ in metric_columns(next(iter(runs.values()))) if k != "rare-accuracy"]
    lines = [
        f"| {row_key} \\ {col_key} | " + " | ".join(f"{col_key}={c}" for c in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for r in rows:
        cells = []
        for c in cols:
            match = [
                f
                for v, fs in runs.items()
                if fields[v].get(row_key) == r and fields[v].get(col_key) == c
                for f in fs
            ]
            cells.append(
                " \\| ".join(fmt_metric([f.get(k, np.nan) for f in match], k) for k in keys)
                if match
                else "–"
            )
        lines.append(f"| {row_key}={r} | " + " | ".join(cells) + " |")
    header = " | ".join(keys)
    return f"Cells: {header} (accuracies in %, mean ± std over seeds)\n\n" + "\n".join(lines) + "\n"


# ------------------------------------------------ FedAR: paired t-tests, per-client table
def paired_samples(
    ref: dict[int, Run], other: dict[int, Run], key: str, over: str
) -> tuple[np.ndarray, np.ndarray]:
    """Paired values of ``key`` of two algorithms on the same seeds. ``over="rounds"``:
    one pair per (seed, evaluation round > 0), as the paper's Table 2 pairs the test
    accuracies along training; ``over="seeds"``: one pair per seed (final model)."""
    a: list[float] = []
    b: list[float] = []
    for seed in sorted(set(ref) & set(other)):
        if over == "seeds":
            fa, fb = ref[seed].summary["final"], other[seed].summary["final"]
            if key in fa and key in fb:
                a.append(fa[key])
                b.append(fb[key])
            continue
        ra = {r["round"]: r[key] for r in ref[seed].rows if key in r}
        rb = {r["round"]: r[key] for r in other[seed].rows if key in r}
        for rnd in sorted(set(ra) & set(rb) - {0}):
            a.append(ra[rnd])
            b.append(rb[rnd])
    return np.asarray(a, dtype=float), np.asarray(b, dtype=float)


def paired_ttest(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of scipy's paired t-test (nan with < 2 pairs or no spread)."""
    if len(a) < 2 or np.allclose(a - b, (a - b)[0]):
        return float("nan")
    return float(ttest_rel(a, b).pvalue)


def ttest_table(
    rs: RunSet,
    reference: str = "fedar",
    key: str = "accuracy",
    over: str = "rounds",
    ignore: tuple[str, ...] = (),
) -> str:
    """Table 2: p-value of the paired t-test of ``reference`` against each other
    algorithm in each comparison group (the variant's fields other than ``name`` and
    ``ignore``); each cell also gives the mean difference reference - baseline (in
    points for accuracies) and the number of pairs."""
    groups: dict[str, dict[str, dict[int, Run]]] = defaultdict(dict)
    for label, seeds in rs.by_seed().items():
        group, name = rs.split(label, ignore=ignore)
        if name is not None:
            groups[group][name] = seeds
    groups = {g: algos for g, algos in groups.items() if reference in algos and len(algos) > 1}
    if not groups:
        return f"No complete `{reference}` runs with baselines under {rs.root}.\n"
    baselines = sorted({n for algos in groups.values() for n in algos} - {reference})
    lines = [
        "| group | " + " | ".join(baselines) + " |",
        "|---|" + "---|" * len(baselines),
    ]
    for group in sorted(groups, key=sort_key):
        cells = []
        for base in baselines:
            if base not in groups[group]:
                cells.append("–")
                continue
            a, b = paired_samples(groups[group][reference], groups[group][base], key, over)
            p = paired_ttest(a, b)
            diff = scale_of(key) * float(np.mean(a - b)) if len(a) else float("nan")
            digits = 3 if "loss" in key else 2
            cells.append(f"{p:.2g} ({diff:+.{digits}f}, n={len(a)})")
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    what = (
        "pairs: (seed, evaluation round) over the whole run"
        if over == "rounds"
        else "pairs: seeds (final model)"
    )
    return (
        f"Paired t-test (two-sided, scipy.stats.ttest_rel) of `{reference}` against each "
        f"baseline on `{key}`; {what}. Cell: p-value (mean {reference} - baseline, "
        f"{'points' if scale_of(key) == 100 else 'loss'}; pairs).\n\n" + "\n".join(lines) + "\n"
    )


def client_stats(accuracies: list[float]) -> dict[str, float]:
    """Table 3 of one run: mean and std over clients, variance, and mean and std inside
    the worst and the best 10% of the clients (accuracies in %)."""
    acc = np.sort(100 * np.asarray(accuracies, dtype=float))
    k = max(1, int(round(0.1 * len(acc))))
    worst, best = acc[:k], acc[-k:]
    return {
        "mean": float(acc.mean()),
        "std": float(acc.std()),
        "var": float(acc.var()),
        "worst": float(worst.mean()),
        "worst-std": float(worst.std()),
        "best": float(best.mean()),
        "best-std": float(best.std()),
    }


def client_accuracy_table(rs: RunSet) -> str:
    """Table 3: the final global model's accuracy on each client's data, per variant;
    each statistic computed on one seed's clients, then averaged over the seeds."""
    rows = {
        v: [f["client-accuracy"] for f in fs if "client-accuracy" in f]
        for v, fs in rs.finals().items()
    }
    rows = {v: accs for v, accs in rows.items() if accs}
    if not rows:
        return f"No per-client accuracies under {rs.root} (set client_metrics: true).\n"
    lines = [
        "| variant | seeds | Mean (%) | Var | Worst 10% | Best 10% |",
        "|---|---|---|---|---|---|",
    ]
    for variant in sorted(rows, key=lambda v: [sort_key(x) for x in rs.split(v)[0]]):
        stats = [client_stats(a) for a in rows[variant]]

        def avg(name: str, stats: list[dict[str, float]] = stats) -> float:
            return float(np.mean([st[name] for st in stats]))

        lines.append(
            f"| {variant} | {len(stats)} | {avg('mean'):.1f} ± {avg('std'):.1f} "
            f"| {avg('var'):.1f} | {avg('worst'):.1f} ± {avg('worst-std'):.1f} "
            f"| {avg('best'):.1f} ± {avg('best-std'):.1f} |"
        )
    return (
        "Accuracy of the final global model on each client's own training data: mean ± "
        "std over clients, variance (%²), mean ± std inside the worst and the best 10% of "
        "the clients; each computed per seed, then averaged over the seeds.\n\n"
        + "\n".join(lines)
        + "\n"
    )


FAIRNESS_COLUMNS = (
    ("client-test-acc-mean", "Average (%)", 100.0, 2),
    ("client-test-acc-worst10", "Worst 10% (%)", 100.0, 2),
    ("client-test-acc-best10", "Best 10% (%)", 100.0, 2),
    ("client-test-acc-var", "Variance (%²)", 1.0, 1),
    ("client-test-hcvar", "HCVaR of test losses", 1.0, 3),
    ("client-test-loss-max", "Max test loss", 1.0, 3),
)


def fairness_table(rs: RunSet, prefix: str = "") -> str:
    """RC-FL Table 1: the distribution of the final model's accuracy over the clients'
    test sets (average, worst and best 10% of the clients, variance) and the HCVaR of
    the clients' test losses, each mean ± std over seeds. ``prefix="avg-"``: the same
    for rFedFair's running average omega_tilde_T (rows of the runs that have it)."""
    key0 = prefix + FAIRNESS_COLUMNS[0][0]
    rows = {v: fs for v, fs in rs.finals().items() if any(key0 in f for f in fs)}
    if not rows:
        return ""
    lines = [
        "| variant | seeds | " + " | ".join(h for _, h, _, _ in FAIRNESS_COLUMNS) + " |",
        "|---|---|" + "---|" * len(FAIRNESS_COLUMNS),
    ]
    for variant in sorted(rows, key=sort_key):
        finals = [f for f in rows[variant] if key0 in f]
        cells = [
            mean_std([f.get(prefix + k, np.nan) for f in finals], scale, digits)
            for k, _, scale, digits in FAIRNESS_COLUMNS
        ]
        lines.append(f"| {variant} | {len(finals)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def client_test_accuracies(
    rs: RunSet, prefix: str = "", max_clients: int = 10
) -> dict[str, np.ndarray]:
    """Seeds x clients test accuracies of the final model per variant, for the variants
    whose runs have at most ``max_clients`` clients (RC-FL Fig. 1's data)."""
    key = prefix + "client-test-accuracy"
    rows = {v: [f[key] for f in fs if key in f] for v, fs in rs.finals().items()}
    return {v: np.array(a, dtype=float) for v, a in rows.items() if a and len(a[0]) <= max_clients}


def per_client_test_table(rs: RunSet, prefix: str = "", max_clients: int = 10) -> str:
    """Each client's test accuracy (%) of the final model, mean ± std over seeds (RC-FL
    Fig. 1), for runs with at most ``max_clients`` clients."""
    rows = client_test_accuracies(rs, prefix, max_clients)
    if not rows:
        return ""
    n = max(a.shape[1] for a in rows.values())
    lines = [
        "| variant | seeds | " + " | ".join(f"client {k}" for k in range(n)) + " |",
        "|---|---|" + "---|" * n,
    ]
    for variant in sorted(rows, key=sort_key):
        accs = rows[variant]
        cells = [mean_std(list(accs[:, k])) for k in range(accs.shape[1])]
        lines.append(f"| {variant} | {len(accs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def group_weight_table(
    weights: dict[str, list[np.ndarray]], groups: dict[str, dict[str, np.ndarray]]
) -> str:
    """CA-Fed Fig. 1d at the end of training: (1/T) sum_t sum_{k in group} q_k^(t) per
    client group and variant, mean ± std over the seeds' ``weights.npy``."""
    group_names = list(next(iter(groups.values())))
    lines = [
        "| variant | seeds | " + " | ".join(group_names) + " |",
        "|---|---|" + "---|" * len(group_names),
    ]
    for name in sorted(weights):
        seeds = weights[name]
        cells = [
            mean_std([w[:, groups[name][g]].sum() / w.shape[0] for w in seeds], scale=1.0)
            for g in group_names
        ]
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
