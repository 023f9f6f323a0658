"""PNG plots of one run: accuracy curves, global t, relay frequencies, availability
heatmap (with the inclusion/exclusion heatmap and the cumulative weight per client group
when the strategy records aggregation weights), estimator errors, 2-D boundaries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from fedram_flwr.outputs import availability_from_rows  # noqa: E402

if TYPE_CHECKING:
    from fedram_flwr.experiment import Experiment


def plot_run(path: Path, rows: list[dict[str, Any]], exp: Experiment) -> None:
    """Write every plot that applies to this run into ``path``."""
    plot_accuracy(path / "accuracy.png", rows, exp.data.rare_classes, exp.rare_clients)
    if any("fit-t" in r for r in rows):
        plot_series(path / "t.png", rows, "fit-t", "global t")
    if any("train-loss" in r for r in rows):
        plot_series(path / "train_loss.png", rows, "train-loss", "global training loss")
    final_clients = next((r["client-accuracy"] for r in rows if "client-accuracy" in r), None)
    if final_clients is not None:
        plot_client_histogram(path / "client_accuracy_hist.png", final_clients)
    plot_relays(path / "relays.png", rows, exp.hidden_law())
    plot_availability(path / "availability.png", rows, exp.scenario.data.num_clients)
    weights_file = path / "weights.npy"
    if weights_file.is_file():
        weights = np.load(weights_file)
        plot_inclusion(path / "inclusion.png", rows, weights)
        law = exp.client_manager().hidden_law()
        if law.lam is not None:
            fig, ax = plt.subplots(figsize=(6, 3.6))
            plot_group_weights(ax, weights, client_groups(law.pi, law.lam))
            fig.tight_layout()
            fig.savefig(path / "group_weights.png", dpi=110)
            plt.close(fig)
    if any("pi-error" in r for r in rows):
        plot_estimator_errors(path / "estimator_errors.png", rows)
    if exp.data.input_shape == (2,):
        model = exp.new_model()
        from fedram_flwr.models import set_weights

        final = read_final_model(path)
        if final is not None:
            set_weights(model, final[: len(model.state_dict())])  # drop t if present
            plot_decision_boundary(path / "decision_boundary.png", model, exp)


def read_final_model(path: Path) -> list[np.ndarray] | None:
    """The global parameter arrays saved after the last round."""
    f = path / "final_model.npz"
    if not f.is_file():
        return None
    with np.load(f) as z:
        return [z[k] for k in sorted(z.files, key=lambda s: int(s.split("_")[1]))]


def plot_accuracy(
    out: Path,
    rows: list[dict[str, Any]],
    rare_classes: tuple[int, ...],
    rare_clients: tuple[int, ...] = (),
) -> None:
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
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_series(out: Path, rows: list[dict[str, Any]], key: str, label: str) -> None:
    pts = [(r["round"], r[key]) for r in rows if key in r]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(*zip(*pts), lw=1)
    ax.set(xlabel="round", ylabel=label)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_client_histogram(out: Path, accuracies: list[float], title: str = "") -> None:
    """Histogram of the final global model's accuracy on each client's own data."""
    acc = 100 * np.asarray(accuracies, dtype=float)
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.hist(acc, bins=np.linspace(0, 100, 21), edgecolor="k", alpha=0.8)
    ax.axvline(acc.mean(), color="r", ls="--", label=f"mean {acc.mean():.1f}%")
    ax.set(xlabel="accuracy on the client's data (%)", ylabel="clients", title=title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_relays(out: Path, rows: list[dict[str, Any]], law: np.ndarray) -> None:
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
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_availability(out: Path, rows: list[dict[str, Any]], num_clients: int) -> None:
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
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


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


def plot_inclusion(out: Path, rows: list[dict[str, Any]], weights: np.ndarray) -> None:
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
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_estimator_errors(out: Path, rows: list[dict[str, Any]]) -> None:
    """Mean over clients of |pi_hat - pi| and |lambda_hat - lambda| per round."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for key, label in (("pi-error", "|pi_hat - pi|"), ("lambda-error", "|lambda_hat - lambda|")):
        pts = [(r["round"], r[key]) for r in rows if key in r]
        if pts:
            ax.plot(*zip(*pts), label=label)
    ax.set(xlabel="round", ylabel="mean error over clients", yscale="log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def plot_decision_boundary(out: Path, model, exp: Experiment, ax=None, title: str = "") -> None:
    """Test points coloured by class over the model's predicted regions (Fig. 2)."""
    from fedram_flwr.training import predict_logits

    d = exp.data
    lo, hi = d.test_x.min(0) - 1.0, d.test_x.max(0) + 1.0
    gx, gy = np.meshgrid(np.linspace(lo[0], hi[0], 300), np.linspace(lo[1], hi[1], 300))
    grid = np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float32)
    pred = predict_logits(model, grid).argmax(1).numpy().reshape(gx.shape)
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(4.2, 4))
    cmap = plt.get_cmap("tab10")
    ax.contourf(
        gx,
        gy,
        pred,
        levels=np.arange(d.num_classes + 1) - 0.5,
        cmap=cmap,
        vmin=0,
        vmax=9,
        alpha=0.25,
    )
    for c in range(d.num_classes):
        m = d.test_y == c
        tag = " (rare)" if c in d.rare_classes else ""
        ax.scatter(*d.test_x[m].T, s=6, color=cmap(c), label=f"class {c}{tag}")
    ax.set_title(title or out.stem, fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    if own:
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
