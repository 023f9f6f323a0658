"""PNG plots of one run: accuracy curves (against simulated hours too, for a run on the
simulated clock), global t, relay frequencies, availability heatmap (with the
inclusion/exclusion heatmap and the cumulative weight per client group when the strategy
records aggregation weights), estimator errors, 2-D boundaries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from fedram_flwr.rundir.nofollow import encoded, write_atomic  # noqa: E402
from fedram_flwr.rundir.outputs import RunDirectory, availability_from_rows, boundary_grid  # noqa: E402

Drawn = dict[str, np.ndarray]


def drawn(fig) -> Drawn:
    """What ``fig`` shows, read back from its artists: each line's (x, y) points, each bar
    group's heights, each image's array and each scatter's points, keyed by their legend
    label (``line<k>`` / ``bars<k>`` when unlabelled, ``image<k>``), prefixed by
    ``"<axes index>:"`` when the figure has several axes. Every plot function returns
    this, so tests check what is drawn."""
    out: Drawn = {}
    axes = fig.get_axes()
    for i, ax in enumerate(axes):
        pre = f"{i}:" if len(axes) > 1 else ""

        def name(artist, kind: str, k: int, pre: str = pre) -> str:
            label = artist.get_label() or "_"
            return pre + (f"{kind}{k}" if label.startswith("_") else label)

        for k, line in enumerate(ax.get_lines()):
            out[name(line, "line", k)] = np.asarray(line.get_xydata())
        for k, bars in enumerate(c for c in ax.containers if isinstance(c, BarContainer)):
            out[name(bars, "bars", k)] = np.array([p.get_height() for p in bars])
        for k, image in enumerate(ax.images):
            out[f"{pre}image{k}"] = np.asarray(image.get_array())
        for k, points in enumerate(ax.collections):
            if not (points.get_label() or "_").startswith("_"):
                out[name(points, "points", k)] = np.asarray(points.get_offsets())
    return out


def save(fig, out: Path) -> Drawn:
    """Write ``fig`` to ``out`` (110 dpi), close it and return what it showed."""
    fig.tight_layout()
    write_atomic(out, encoded(fig.savefig, dpi=110, format=out.suffix[1:] or "png"))
    shown = drawn(fig)
    plt.close(fig)
    return shown


def plot_run(path: str | Path) -> dict[str, Drawn]:
    """Write every plot that applies to the run in folder ``path``, from its files alone
    (``scenario.yaml``, ``metrics.jsonl``, ``summary.json``, ``weights.npy``,
    ``plot_inputs.npz``); returns what each PNG shows, by file name."""
    run = RunDirectory(path)
    path = run.path
    rows = run.read_metrics()
    summary = run.read_summary()
    extra = run.read_plot_inputs() or {}
    num_clients = int(run.scenario()["data"]["num_clients"])
    out: dict[str, Drawn | None] = {}
    out["accuracy.png"] = plot_accuracy(
        path / "accuracy.png",
        rows,
        tuple(summary.get("rare-classes", ())),
        tuple(summary.get("rare-clients", ())),
    )
    if clock_key(rows):  # a run on the simulated clock or on the wall clock
        out["accuracy_time.png"] = plot_accuracy_time(path / "accuracy_time.png", rows)
    if any("fit-t" in r for r in rows):
        out["t.png"] = plot_series(path / "t.png", rows, "fit-t", "global t")
    if any("train-loss" in r for r in rows):
        out["train_loss.png"] = plot_series(
            path / "train_loss.png", rows, "train-loss", "global training loss"
        )
    final_clients = next((r["client-accuracy"] for r in rows if "client-accuracy" in r), None)
    if final_clients is not None:
        out["client_accuracy_hist.png"] = plot_client_histogram(
            path / "client_accuracy_hist.png", final_clients
        )
    if "relay_law" in extra:
        out["relays.png"] = plot_relays(path / "relays.png", rows, extra["relay_law"])
    out["availability.png"] = plot_availability(path / "availability.png", rows, num_clients)
    weights = run.read_weights()
    if weights is not None:
        out["inclusion.png"] = plot_inclusion(path / "inclusion.png", rows, weights)
        if "lam" in extra:
            fig, ax = plt.subplots(figsize=(6, 3.6))
            plot_group_weights(ax, weights, client_groups(extra["pi"], extra["lam"]))
            out["group_weights.png"] = save(fig, path / "group_weights.png")
    if any("pi-error" in r for r in rows):
        out["estimator_errors.png"] = plot_estimator_errors(path / "estimator_errors.png", rows)
    if "grid_pred" in extra:
        out["decision_boundary.png"] = plot_decision_boundary(path / "decision_boundary.png", extra)
    return {k: v for k, v in out.items() if v is not None}


def plot_accuracy(
    out: Path,
    rows: list[dict[str, Any]],
    rare_classes: tuple[int, ...],
    rare_clients: tuple[int, ...] = (),
) -> Drawn | None:
    """Test accuracy over rounds; ticks at the rounds a rare client was relayed."""
    evals = [r for r in rows if "accuracy" in r]
    if not evals:
        return
    x = [r["round"] for r in evals]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(x, [r["accuracy"] for r in evals], label="overall", lw=2)
    if "rare-accuracy" in evals[0]:
        ax.plot(x, [r["rare-accuracy"] for r in evals], label="rare patterns", lw=2)
    for c in rare_classes:
        key = f"accuracy-class-{c}"
        ax.plot(x, [r.get(key, np.nan) for r in evals], "--", lw=1, label=f"class {c} (rare)")
    rare_rounds = [r["round"] for r in rows if set(r.get("relayed", ())) & set(rare_clients)]
    if rare_rounds:
        ax.plot(rare_rounds, [0.01] * len(rare_rounds), "k|", ms=8, label="rare client relayed")
    ax.set(xlabel="round", ylabel="test accuracy", ylim=(0, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out)


CLOCKS = {"sim-seconds": ("simulated hours", 3600.0), "wall-seconds": ("wall-clock minutes", 60.0)}
"""A round's clock in its row, its axis label and its unit in seconds: the simulated clock's
end of the round, or the wall clock's seconds since the run's first push
(``time.clock: wall``)."""


def clock_key(rows: list[dict[str, Any]]) -> str | None:
    """The clock a run's rows carry (a key of :data:`CLOCKS`), None for a run without one."""
    return next((k for k in CLOCKS if any(k in r for r in rows)), None)


def plot_accuracy_time(out: Path, rows: list[dict[str, Any]]) -> Drawn | None:
    """Test accuracy against rounds (left) and the run's clock (right): simulated hours,
    or wall-clock minutes on the wall clock (round 0 at 0)."""
    key = clock_key(rows)
    evals = [r for r in rows if "accuracy" in r and (r["round"] == 0 or (key and key in r))]
    if key is None or not evals:
        return None
    label, unit = CLOCKS[key]
    times = [r.get(key, 0.0) / unit if r["round"] else 0.0 for r in evals]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    xs = ([r["round"] for r in evals], times)
    for ax, x, xlabel in zip(axes, xs, ("round", label), strict=True):
        ax.plot(x, [r["accuracy"] for r in evals], label="overall", lw=2)
        if "rare-accuracy" in evals[0]:
            ax.plot(x, [r["rare-accuracy"] for r in evals], label="rare patterns", lw=2)
        ax.set(xlabel=xlabel, ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    axes[1].legend(fontsize=8)
    return save(fig, out)


def plot_series(out: Path, rows: list[dict[str, Any]], key: str, label: str) -> Drawn:
    pts = [(r["round"], r[key]) for r in rows if key in r]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(*zip(*pts), lw=1)
    ax.set(xlabel="round", ylabel=label)
    ax.grid(alpha=0.3)
    return save(fig, out)


def plot_client_histogram(out: Path, accuracies: list[float], title: str = "") -> Drawn:
    """Histogram of the final global model's accuracy on each client's own data."""
    acc = 100 * np.asarray(accuracies, dtype=float)
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.hist(acc, bins=np.linspace(0, 100, 21), edgecolor="k", alpha=0.8)
    ax.axvline(acc.mean(), color="r", ls="--", label=f"mean {acc.mean():.1f}%")
    ax.set(xlabel="accuracy on the client's data (%)", ylabel="clients", title=title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, out)


def plot_relays(out: Path, rows: list[dict[str, Any]], law: np.ndarray) -> Drawn | None:
    """Empirical relay frequency of each client against the oracle's law."""
    counts = np.zeros(len(law))
    for r in rows:
        for pid in r.get("relayed", []):
            counts[pid] += 1
    total = counts.sum()
    if total == 0:
        return
    ids = np.arange(len(law))
    fig, ax = plt.subplots(figsize=(max(4, 0.25 * len(law) + 2), 3.2))
    ax.bar(ids, counts / total, color="tab:blue", alpha=0.7, label="relayed (empirical)")
    ax.plot(ids, law / law.sum(), "k_", markersize=12, mew=2, label="rho")
    ax.set(xlabel="client (partition id)", ylabel="share of relays", title=f"{int(total)} relays")
    ax.legend(fontsize=8)
    return save(fig, out)


def plot_availability(out: Path, rows: list[dict[str, Any]], num_clients: int) -> Drawn | None:
    """Round x client heatmap: inactive, active (the oracle's draw), relayed (trained)."""
    relayed = availability_from_rows(rows, num_clients, "relayed")
    active = availability_from_rows(rows, num_clients, "active") | relayed
    if not active.size:
        return
    colours = ListedColormap(["white", "#9ecae1", "#08306b"])
    fig, ax = plt.subplots(figsize=(7, min(8.0, 1.6 + 0.05 * num_clients)))
    extent = (0.5, len(active) + 0.5, num_clients - 0.5, -0.5)
    image = (active.astype(int) + relayed).T
    ax.imshow(
        image, aspect="auto", interpolation="nearest", cmap=colours, vmin=0, vmax=2, extent=extent
    )
    ax.set(xlabel="round", ylabel="client (partition id)")
    ax.set_title(f"{active.sum(1).mean():.1f} of {num_clients} active per round", loc="left")
    ax.legend(
        handles=[Patch(color=colours(1), label="active"), Patch(color=colours(2), label="relayed")],
        fontsize=8,
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        ncol=2,
        frameon=False,
    )
    return save(fig, out)


def client_groups(
    pi: np.ndarray, lam: np.ndarray, pi_split: float = 0.5, lam_split: float = 0.5
) -> dict[str, np.ndarray]:
    """CA-Fed Fig. 1d's four groups: more (pi_k >= ``pi_split``) or less available, and
    correlated (|lambda_k| >= ``lam_split``) or weakly correlated; empty groups dropped."""
    more, corr = np.asarray(pi) >= pi_split, np.abs(np.asarray(lam)) >= lam_split
    groups = {
        "more available, correlated": more & corr,
        "more available, weakly corr.": more & ~corr,
        "less available, correlated": ~more & corr,
        "less available, weakly corr.": ~more & ~corr,
    }
    return {k: np.flatnonzero(v) for k, v in groups.items() if v.any()}


def cumulative_group_weights(
    weights: np.ndarray, groups: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Per group, the cumulative sum over rounds of the weights its clients' updates
    received (sum_{s <= t} sum_{k in group} q_k^(s) 1{k participated})."""
    return {
        k: np.cumsum(weights[:, ids].sum(axis=1, dtype=np.float64)) for k, ids in groups.items()
    }


def plot_group_weights(
    ax, weights: np.ndarray | list[np.ndarray], groups: dict[str, np.ndarray], title: str = ""
) -> None:
    """CA-Fed Fig. 1d: cumulative aggregation weight per client group over rounds; a
    list of (rounds x clients) arrays (seeds) gives the mean with a +-std band."""
    runs = weights if isinstance(weights, list) else [weights]
    x = np.arange(1, runs[0].shape[0] + 1)
    for name in groups:
        curves = np.array([cumulative_group_weights(w, groups)[name] for w in runs])
        m, sd = curves.mean(0), curves.std(0)
        ax.plot(x, m, label=f"{name} ({groups[name].size})")
        if len(runs) > 1:
            ax.fill_between(x, m - sd, m + sd, alpha=0.2)
    ax.set(xlabel="round", ylabel="cumulative aggregation weight")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot_inclusion(out: Path, rows: list[dict[str, Any]], weights: np.ndarray) -> Drawn | None:
    """CA-Fed Fig. 5: the activity heatmap (inactive / active) beside the inclusion
    heatmap (active but excluded, q_k = 0 / included, q_k > 0), round x client."""
    num_clients = weights.shape[1]
    relayed = availability_from_rows(rows, num_clients, "relayed")
    active = availability_from_rows(rows, num_clients, "active") | relayed
    if not active.size:
        return
    included = weights[: len(active)] > 0
    extent = (0.5, len(active) + 0.5, num_clients - 0.5, -0.5)
    fig, axes = plt.subplots(
        1, 2, figsize=(12, min(8.0, 1.8 + 0.05 * num_clients)), sharey=True, squeeze=True
    )
    panels = [
        (active.astype(int), ["white", "#9ecae1"], ["inactive", "active"], "activity"),
        (
            active.astype(int) + included,
            ["white", "#fdae6b", "#08306b"],
            ["inactive", "active, excluded", "included"],
            f"inclusion: {included.sum(1).mean():.1f} of {active.sum(1).mean():.1f} active "
            "included per round",
        ),
    ]
    for ax, (image, colours, labels, title) in zip(axes, panels, strict=True):
        cmap = ListedColormap(colours)
        ax.imshow(
            image.T,
            aspect="auto",
            interpolation="nearest",
            cmap=cmap,
            vmin=0,
            vmax=len(colours) - 1,
            extent=extent,
        )
        ax.set_xlabel("round")
        ax.set_title(title, loc="left", fontsize=9)
        ax.legend(
            handles=[Patch(color=c, label=lab) for c, lab in zip(colours[1:], labels[1:])],
            fontsize=8,
            loc="lower right",
            bbox_to_anchor=(1.0, 1.05),
            ncol=2,
            frameon=False,
        )
    axes[0].set_ylabel("client (partition id)")
    return save(fig, out)


def plot_estimator_errors(out: Path, rows: list[dict[str, Any]]) -> Drawn:
    """Mean over clients of |pi_hat - pi| and |lambda_hat - lambda| per round."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for key, label in (("pi-error", "|pi_hat - pi|"), ("lambda-error", "|lambda_hat - lambda|")):
        pts = [(r["round"], r[key]) for r in rows if key in r]
        if pts:
            ax.plot(*zip(*pts), label=label)
    ax.set(xlabel="round", ylabel="mean error over clients", yscale="log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out)


def plot_decision_boundary(
    out: Path, inputs: dict[str, np.ndarray], ax=None, title: str = ""
) -> Drawn | None:
    """Test points coloured by class over the model's predicted regions (Fig. 2), from
    a run's ``plot_inputs.npz`` (test points, grid corners, predicted class on the grid)."""
    gx, gy = boundary_grid(inputs["grid_lo"], inputs["grid_hi"])
    num_classes, rare = int(inputs["num_classes"]), set(inputs["rare_classes"].tolist())
    test_x, test_y = inputs["test_x"], inputs["test_y"]
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(4.2, 4))
    cmap = plt.get_cmap("tab10")
    ax.contourf(
        gx,
        gy,
        inputs["grid_pred"],
        levels=np.arange(num_classes + 1) - 0.5,
        cmap=cmap,
        vmin=0,
        vmax=9,
        alpha=0.25,
    )
    for c in range(num_classes):
        m = test_y == c
        tag = " (rare)" if c in rare else ""
        ax.scatter(*test_x[m].T, s=6, color=cmap(c), label=f"class {c}{tag}")
    ax.set_title(title or out.stem, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    return save(fig, out) if own else None
