"""What one run's figures need beyond its metrics, written into its run folder when the
run ends (``plot_inputs.npz``), so :func:`fedram_flwr.report.run_plots.plot_run` and the report draw
from the run folder alone, never rebuilding an Experiment."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np

from fedram_flwr.clients.evaluation import predict_logits
from fedram_flwr.clients.models import set_weights
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.rundir.nofollow import encoded, write_atomic
from fedram_flwr.rundir.outputs import PLOT_INPUTS_FILE, RunDirectory, boundary_grid


def write_plot_inputs(path: Path, exp: Experiment) -> None:
    """``plot_inputs.npz``: what one run's figures need besides its metrics, so they are
    drawn from the run folder alone. ``relay_law``: the oracle's hidden per-client relay
    probabilities; ``pi`` and ``lam`` when the oracle defines both (Markov); for 2-D data
    the test points, the grid's corners and the final model's predicted class on it."""
    out: dict[str, np.ndarray] = {"relay_law": np.asarray(exp.availability_law(), dtype=float)}
    law = exp.client_manager().hidden_law()
    if law.lam is not None:
        out.update(pi=np.asarray(law.pi, dtype=float), lam=np.asarray(law.lam, dtype=float))
    d = exp.data
    final = RunDirectory(path).read_final_model()
    if d.input_shape == (2,) and final is not None:
        model = exp.new_model()
        set_weights(model, final[: len(model.state_dict())])  # drop t if present
        lo, hi = d.test_x.min(0) - 1.0, d.test_x.max(0) + 1.0
        gx, gy = boundary_grid(lo, hi)
        grid = np.stack([gx.ravel(), gy.ravel()], 1).astype(np.float32)
        pred = predict_logits(model, grid).argmax(1).numpy().reshape(gx.shape)
        out.update(
            test_x=d.test_x,
            test_y=d.test_y,
            grid_lo=lo,
            grid_hi=hi,
            grid_pred=pred.astype(np.int16),
            num_classes=np.array(d.num_classes),
            rare_classes=np.array(d.rare_classes, dtype=int),
        )
    write_atomic(path / PLOT_INPUTS_FILE, encoded(np.savez_compressed, **out))


def complete_plot_inputs(root: Path) -> None:
    """Write ``plot_inputs.npz`` into the complete, whole runs under ``root`` that lack it
    (run folders made before it existed, or by Flower's engines) or whose copy does not
    read, by rebuilding each run's Experiment once (saying so on stderr)."""
    for status in sorted(Path(root).rglob("status.json")):
        run = RunDirectory(status.parent)
        if run.status() != "complete" or run.damage() is not None:
            continue
        state = plot_inputs_state(run)
        if state == "whole":
            continue
        raw = run.scenario()
        seed = raw.pop("seed")
        write_plot_inputs(run.path, Experiment(scenario_from_dict(raw), seed))
        if state != "missing":
            print(f"fedram: {run.path}: {state}; written again", file=sys.stderr)


def plot_inputs_state(run: RunDirectory) -> str:
    """``whole``, ``missing`` or what is wrong with ``run``'s ``plot_inputs.npz``."""
    try:
        return "missing" if run.read_plot_inputs() is None else "whole"
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        return f"{PLOT_INPUTS_FILE} was unreadable ({type(err).__name__})"
