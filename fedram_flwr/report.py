"""Turn run directories into the papers' tables (mean +- std over seeds) and figures."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from fedram_flwr.outputs import RunDirectory

STATS = {
    "final": "Final model (last round)",
    "tail-mean": "Mean over the evaluations of the last 20% of rounds",
    "time-mean": "Time-averaged: mean over every evaluation after round 0",
}


# Stats that older summaries lack: their tables are left out rather than flagged.
OPTIONAL_STATS = ("time-mean",)


def find_runs(root: Path) -> list[RunDirectory]:
    return [RunDirectory(p.parent) for p in sorted(Path(root).rglob("status.json"))]


def variant_of(run: RunDirectory, root: Path) -> str:
    """Runs live in ``<root>/<variant>/seed<k>``; the variant is the label."""
    rel = run.path.relative_to(root)
    return str(rel.parent) if len(rel.parts) > 1 else "default"


def collect(
    root: Path, stat: str = "final"
) -> tuple[dict[str, list[dict[str, Any]]], list[tuple[str, str]]]:
    """``stat`` metrics (``final`` or ``tail-mean``) of complete runs per variant, and
    (path, status) of the others."""
    complete: dict[str, list[dict[str, Any]]] = defaultdict(list)
    incomplete = []
    for run in find_runs(root):
        status = run.status()
        if status != "complete":
            incomplete.append((str(run.path), status))
            continue
        summary = run.read_summary()
        if stat not in summary:
            if stat not in OPTIONAL_STATS:
                incomplete.append((str(run.path), f"summary has no '{stat}' (older format)"))
            continue
        final = dict(summary[stat])
        final["seed"] = run.scenario().get("seed")
        final["rare-classes"] = summary.get("rare-classes", [])
        complete[variant_of(run, root)].append(final)
    return dict(complete), incomplete


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


def _sort_key(value: str) -> tuple[int, float | str]:
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


def markdown_table(root: Path, stat: str = "final") -> str:
    """One row per variant: metrics as mean ± std over the complete seeds."""
    runs, incomplete = collect(root, stat)
    if not runs:
        return f"No complete runs under {root}.\n"
    lines = []
    any_finals = next(iter(runs.values()))
    cols = metric_columns(any_finals)
    header = ["variant", "seeds", *[h for _, h in cols]]
    has_t = "t" in any_finals[0]
    if has_t:
        header.append("t")
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for variant in sorted(runs, reverse=True):  # alpha=1.0 (FedAvg) first
        finals = runs[variant]
        cells = [variant, str(len(finals))]
        cells += [fmt_metric([f.get(k, np.nan) for f in finals], k) for k, _ in cols]
        if has_t:
            cells.append(mean_std([f.get("t", np.nan) for f in finals], scale=1.0))
        lines.append("| " + " | ".join(cells) + " |")
    if incomplete:
        lines.append("")
        lines.append("Incomplete runs (not in the table):")
        lines += [f"- {p}: {s}" for p, s in incomplete]
    return "\n".join(lines) + "\n"


def pivot_table(root: Path, row_key: str, col_key: str, stat: str = "final") -> str:
    """The paper's Table 1 layout: rows ``row_key`` values, columns ``col_key`` values,
    each cell "overall | rare class a | rare class b" (mean ± std over seeds)."""
    runs, _ = collect(root, stat)
    if not runs:
        return f"No complete runs under {root}.\n"

    parse = parse_label

    rows = sorted({parse(v).get(row_key, "?") for v in runs}, key=_sort_key)
    cols = sorted({parse(v).get(col_key, "?") for v in runs}, key=_sort_key, reverse=True)
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
                if parse(v).get(row_key) == r and parse(v).get(col_key) == c
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
def parse_label(label: str) -> dict[str, str]:
    """``p_min=0.1_name=fedar`` -> {"p_min": "0.1", "name": "fedar"}."""
    out: dict[str, str] = {}
    pending: list[str] = []  # pieces of a key holding "_" (p_min)
    for part in label.split("_"):
        if "=" in part:
            key, value = part.split("=", 1)
            out["_".join([*pending, key])] = value
            pending = []
        else:
            pending.append(part)
    if pending and out:  # a trailing value holding "_"
        last = next(reversed(out))
        out[last] += "_" + "_".join(pending)
    return out


def split_label(label: str, key: str = "name") -> tuple[str, str | None]:
    """(the label without ``key=...``, the value of ``key``): the comparison group and
    the algorithm of a variant."""
    parsed = parse_label(label)
    value = parsed.pop(key, None)
    group = "_".join(f"{k}={v}" for k, v in parsed.items()) or "all"
    return group, value


def complete_runs(root: Path) -> dict[str, dict[int, RunDirectory]]:
    """Complete runs per variant, keyed by seed."""
    out: dict[str, dict[int, RunDirectory]] = defaultdict(dict)
    for run in find_runs(root):
        if run.status() == "complete":
            out[variant_of(run, root)][int(run.scenario().get("seed", 0))] = run
    return dict(out)


def paired_samples(
    ref: dict[int, RunDirectory], other: dict[int, RunDirectory], key: str, over: str
) -> tuple[np.ndarray, np.ndarray]:
    """Paired values of ``key`` of two algorithms on the same seeds. ``over="rounds"``:
    one pair per (seed, evaluation round > 0), as the paper's Table 2 pairs the test
    accuracies along training; ``over="seeds"``: one pair per seed (final model)."""
    a: list[float] = []
    b: list[float] = []
    for seed in sorted(set(ref) & set(other)):
        if over == "seeds":
            fa, fb = ref[seed].read_summary()["final"], other[seed].read_summary()["final"]
            if key in fa and key in fb:
                a.append(fa[key])
                b.append(fb[key])
            continue
        ra = {r["round"]: r[key] for r in ref[seed].read_metrics() if key in r}
        rb = {r["round"]: r[key] for r in other[seed].read_metrics() if key in r}
        for rnd in sorted(set(ra) & set(rb) - {0}):
            a.append(ra[rnd])
            b.append(rb[rnd])
    return np.asarray(a, dtype=float), np.asarray(b, dtype=float)


def paired_ttest(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of scipy's paired t-test (nan with < 2 pairs or no spread)."""
    from scipy.stats import ttest_rel

    if len(a) < 2 or np.allclose(a - b, (a - b)[0]):
        return float("nan")
    return float(ttest_rel(a, b).pvalue)


def ttest_table(
    root: Path, reference: str = "fedar", key: str = "accuracy", over: str = "rounds"
) -> str:
    """Table 2: p-value of the paired t-test of ``reference`` against each other
    algorithm in each comparison group (the variant label without ``name=``); each cell
    also gives the mean difference reference - baseline (in points for accuracies) and
    the number of pairs."""
    runs = complete_runs(root)
    groups: dict[str, dict[str, dict[int, RunDirectory]]] = defaultdict(dict)
    for label, seeds in runs.items():
        group, name = split_label(label)
        if name is not None:
            groups[group][name] = seeds
    groups = {g: algos for g, algos in groups.items() if reference in algos and len(algos) > 1}
    if not groups:
        return f"No complete `{reference}` runs with baselines under {root}.\n"
    baselines = sorted({n for algos in groups.values() for n in algos} - {reference})
    lines = [
        "| group | " + " | ".join(baselines) + " |",
        "|---|" + "---|" * len(baselines),
    ]
    for group in sorted(groups, key=_sort_key):
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


def client_accuracy_table(root: Path) -> str:
    """Table 3: the final global model's accuracy on each client's data, per variant;
    each statistic computed on one seed's clients, then averaged over the seeds."""
    runs, _ = collect(root)
    rows = {
        v: [f["client-accuracy"] for f in fs if "client-accuracy" in f] for v, fs in runs.items()
    }
    rows = {v: accs for v, accs in rows.items() if accs}
    if not rows:
        return f"No per-client accuracies under {root} (set client_metrics: true).\n"
    lines = [
        "| variant | seeds | Mean (%) | Var | Worst 10% | Best 10% |",
        "|---|---|---|---|---|---|",
    ]
    for variant in sorted(rows, key=lambda v: [_sort_key(x) for x in split_label(v)[0]]):
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


def fairness_table(root: Path, prefix: str = "") -> str:
    """RC-FL Table 1: the distribution of the final model's accuracy over the clients'
    test sets (average, worst and best 10% of the clients, variance) and the HCVaR of
    the clients' test losses, each mean ± std over seeds. ``prefix="avg-"``: the same
    for rFedFair's running average omega_tilde_T (rows of the runs that have it)."""
    runs, _ = collect(root)
    key0 = prefix + FAIRNESS_COLUMNS[0][0]
    rows = {v: fs for v, fs in runs.items() if any(key0 in f for f in fs)}
    if not rows:
        return ""
    lines = [
        "| variant | seeds | " + " | ".join(h for _, h, _, _ in FAIRNESS_COLUMNS) + " |",
        "|---|---|" + "---|" * len(FAIRNESS_COLUMNS),
    ]
    for variant in sorted(rows, key=_sort_key):
        finals = [f for f in rows[variant] if key0 in f]
        cells = [
            mean_std([f.get(prefix + k, np.nan) for f in finals], scale, digits)
            for k, _, scale, digits in FAIRNESS_COLUMNS
        ]
        lines.append(f"| {variant} | {len(finals)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def per_client_test_table(root: Path, prefix: str = "", max_clients: int = 10) -> str:
    """Each client's test accuracy (%) of the final model, mean ± std over seeds (RC-FL
    Fig. 1), for runs with at most ``max_clients`` clients."""
    runs, _ = collect(root)
    key = prefix + "client-test-accuracy"
    rows = {v: [f[key] for f in fs if key in f] for v, fs in runs.items()}
    rows = {v: a for v, a in rows.items() if a and len(a[0]) <= max_clients}
    if not rows:
        return ""
    n = max(len(a[0]) for a in rows.values())
    lines = [
        "| variant | seeds | " + " | ".join(f"client {k}" for k in range(n)) + " |",
        "|---|---|" + "---|" * n,
    ]
    for variant in sorted(rows, key=_sort_key):
        accs = np.array(rows[variant], dtype=float)
        cells = [mean_std(list(accs[:, k])) for k in range(accs.shape[1])]
        lines.append(f"| {variant} | {len(accs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_client_test_accuracy(root: Path, out: Path, max_clients: int = 10) -> None:
    """RC-FL Fig. 1: bars of each client's test accuracy per variant (mean ± std over
    seeds), for runs with at most ``max_clients`` clients."""
    runs, _ = collect(root)
    rows = {
        v: np.array([f["client-test-accuracy"] for f in fs if "client-test-accuracy" in f])
        for v, fs in runs.items()
    }
    rows = {v: a for v, a in rows.items() if a.size and a.shape[1] <= max_clients}
    if not rows:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(rows, key=_sort_key)
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
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_client_histograms(root: Path, out: Path) -> None:
    """Fig. 3 layout: per comparison group, the distribution of the final per-client
    accuracies of each algorithm (pooled over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, _ = collect(root)
    groups: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for variant, finals in runs.items():
        accs = [a for f in finals for a in f.get("client-accuracy", [])]
        if accs:
            group, name = split_label(variant)
            groups[group][name or variant] = accs
    if not groups:
        return
    fig, axes = plt.subplots(
        1, len(groups), figsize=(5.5 * len(groups), 3.8), squeeze=False, sharey=True
    )
    bins = np.linspace(0, 100, 21)
    for ax, group in zip(axes[0], sorted(groups, key=_sort_key), strict=True):
        for name, accs in sorted(groups[group].items()):
            ax.hist(100 * np.asarray(accs), bins=bins, histtype="step", lw=1.5, label=name)
        ax.set(title=group, xlabel="accuracy on the client's data (%)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("clients (pooled over seeds)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_mean_band(ax, seeds: list[list[tuple[int, float]]], label: str) -> None:
    """Mean over seeds of (round, value) series, with a ± std band (common rounds only)."""
    n = min(len(s) for s in seeds)
    x = [r for r, _ in seeds[0][:n]]
    vals = np.array([[v for _, v in s[:n]] for s in seeds], dtype=float)
    m, sd = vals.mean(0), vals.std(0)
    ax.plot(x, m, label=label)
    ax.fill_between(x, m - sd, m + sd, alpha=0.2)


def plot_train_loss(root: Path, out: Path) -> None:
    """Mean global training loss over rounds, one line per variant (± std over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves: dict[str, list[list[tuple[int, float]]]] = defaultdict(list)
    for variant, seeds in complete_runs(root).items():
        for run in seeds.values():
            pts = [(r["round"], r["train-loss"]) for r in run.read_metrics() if "train-loss" in r]
            if pts:
                curves[variant].append(pts)
    if not curves:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for variant, seeds in sorted(curves.items()):
        plot_mean_band(ax, seeds, f"{variant} ({len(seeds)} seeds)")
    ax.set(xlabel="round", ylabel="global training loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_curves(root: Path, out: Path) -> None:
    """Mean overall and rare-pattern test accuracy over rounds, one line per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_variant: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for run in find_runs(root):
        if run.status() == "complete":
            by_variant[variant_of(run, root)].append(
                [r for r in run.read_metrics() if "accuracy" in r]
            )
    if not by_variant:
        return
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
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_boundaries(root: Path, out: Path, seed: int = 0) -> None:
    """Fig. 2 layout: decision boundaries of each variant (one seed) side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedram_flwr.experiment import Experiment
    from fedram_flwr.models import set_weights
    from fedram_flwr.plots import plot_decision_boundary, read_final_model
    from fedram_flwr.registry import scenario_from_dict

    runs = [
        r for r in find_runs(root) if r.status() == "complete" and r.scenario().get("seed") == seed
    ]
    runs = [r for r in runs if r.scenario()["data"]["dataset"] == "gaussian2d"]
    runs.sort(key=lambda r: variant_of(r, root), reverse=True)
    if not runs:
        return
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 4), squeeze=False)
    for ax, run in zip(axes[0], runs, strict=True):
        raw = run.scenario()
        raw.pop("seed")
        exp = Experiment(scenario_from_dict(raw), seed)
        model = exp.new_model()
        set_weights(model, read_final_model(run.path)[: len(model.state_dict())])
        final = run.read_summary()["final"]
        title = (
            f"{variant_of(run, root)}\noverall {final['accuracy']:.2f}, "
            f"rare {final.get('rare-accuracy', float('nan')):.2f}"
        )
        plot_decision_boundary(out, model, exp, ax=ax, title=title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_group_weights_by_variant(root: Path, out: Path) -> str:
    """CA-Fed Fig. 1d, one panel per variant: cumulative aggregation weight of each
    client group (mean over the seeds' ``weights.npy``). Groups come from the oracle's
    hidden law, rebuilt from each run's scenario (a plot, not the strategy, reads it).
    Returns the table of the paper's end-of-training importance
    (1/T) sum_t sum_{k in group} q_k^(t) per group, mean ± std over seeds ("" when no
    complete run recorded weights)."""
    from fedram_flwr.experiment import Experiment
    from fedram_flwr.plots import client_groups, plot_group_weights
    from fedram_flwr.registry import scenario_from_dict

    by_variant: dict[str, list[np.ndarray]] = defaultdict(list)
    groups: dict[str, dict[str, np.ndarray]] = {}
    for run in find_runs(root):
        if run.status() != "complete" or (w := run.read_weights()) is None:
            continue
        variant = variant_of(run, root)
        if variant not in groups:
            raw = run.scenario()
            seed = raw.pop("seed")
            law = Experiment(scenario_from_dict(raw), seed).client_manager().hidden_law()
            if law.lam is None:
                continue
            groups[variant] = client_groups(law.pi, law.lam)
        by_variant[variant].append(w)
    if not by_variant:
        return ""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted(by_variant)
    fig, axes = plt.subplots(
        1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False, sharey=True
    )
    for ax, name in zip(axes[0], names, strict=True):
        seeds = by_variant[name]
        plot_group_weights(ax, seeds, groups[name], title=f"{name} ({len(seeds)} seeds)")
    for ax in axes[0][1:]:
        ax.set_ylabel("")
        ax.get_legend().remove()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    group_names = list(next(iter(groups.values())))
    lines = [
        "| variant | seeds | " + " | ".join(group_names) + " |",
        "|---|---|" + "---|" * len(group_names),
    ]
    for name in names:
        seeds = by_variant[name]
        cells = [
            mean_std([w[:, groups[name][g]].sum() / w.shape[0] for w in seeds], scale=1.0)
            for g in group_names
        ]
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(root: Path) -> Path:
    """``report.md`` plus comparison figures in ``root``; returns the report path."""
    root = Path(root)
    runs, _ = collect(root)
    swept = sorted({k for v in runs for k in parse_label(v)})
    grid = len(swept) == 2 and all(len(parse_label(v)) == 2 for v in runs)  # not mixed labels
    text = [f"# Results under {root}\n"]
    for stat, title in STATS.items():
        if stat in OPTIONAL_STATS and not collect(root, stat)[0]:
            continue
        text += [f"\n## {title}\n", markdown_table(root, stat)]
        if grid and len(runs) > 2:
            text += ["\nPaper layout:\n", pivot_table(root, swept[1], swept[0], stat)]
    labels = {split_label(v)[1] for v in runs}
    if "fedar" in labels and len(labels) > 1:
        for key in ("accuracy", "train-loss"):
            text += [f"\n## Paired t-test on `{key}` (Table 2)\n"]
            text += [ttest_table(root, key=key, over=over) for over in ("rounds", "seeds")]
    if any("client-accuracy" in f for fs in runs.values() for f in fs):
        text += ["\n## Per-client accuracy of the final model (Table 3)\n"]
        text += [client_accuracy_table(root)]
        plot_client_histograms(root, root / "client_accuracy_hist.png")
        plot_train_loss(root, root / "train_loss.png")
    if table := fairness_table(root):
        text += [
            "\n## Fairness of the final model on the clients' test data (RC-FL Table 1)\n",
            "Accuracy over the clients' test sets: average, worst and best 10% of the "
            "clients (at least one), variance over clients; HCVaR of the clients' test "
            "losses with the scenario's `hcvar_alpha` and p_i = m_i / m, and the largest "
            "client test loss. Mean ± std over seeds.\n",
            table,
        ]
        if avg := fairness_table(root, "avg-"):
            text += ["\nThe same for rFedFair's running average omega_tilde_T:\n", avg]
        if clients := per_client_test_table(root):
            text += ["\nTest accuracy (%) of each client (RC-FL Fig. 1):\n", clients]
            plot_client_test_accuracy(root, root / "client_test_accuracy.png")
            text += ["![per-client test accuracy](client_test_accuracy.png)\n"]
    plot_curves(root, root / "curves.png")
    plot_boundaries(root, root / "decision_boundaries.png")
    group_table = plot_group_weights_by_variant(root, root / "group_weights.png")
    if group_table:
        text += [
            "\n## Cumulative aggregation weight per client group (CA-Fed Fig. 1d)\n",
            "![cumulative aggregation weight per group](group_weights.png)\n",
            "Groups by the oracle's pi_k (>= 1/2: more available) and |lambda_k| (>= 1/2: "
            "correlated); the weight a client's update received each round it took part "
            "(0 otherwise). End of training, (1/T) sum_t sum_{k in group} q_k^(t) "
            "(mean ± std over seeds; the number of clients in each group is in the "
            "figure's legend):\n",
            group_table,
        ]
    report = root / "report.md"
    report.write_text("\n".join(text))
    return report
