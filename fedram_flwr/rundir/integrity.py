"""Whether a complete run's result files are whole: each check returns what is wrong
with one file (``None``: nothing), for :meth:`RunDirectory.damage
<fedram_flwr.rundir.directory.RunDirectory.damage>`, which a rerun (run again) and the
report (listed apart) read. Pure functions of a file or of values read from one."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

FINAL_MODEL_FILE = "final_model.npz"
SUMMARY_STATS = ("final", "tail-mean", "time-mean")
"""The summary's per-run statistics (metric -> value), as :func:`summarise
<fedram_flwr.rundir.outputs.summarise>` writes them."""


def summary_damage(summary: Any) -> str | None:
    """What is wrong with ``summary.json``'s value: not an object, a statistic that is
    not an object of metrics, or ``warnings`` that are not a list of strings."""
    if not isinstance(summary, dict):
        return "summary.json is garbled"
    for stat in SUMMARY_STATS:
        if stat in summary and not isinstance(summary[stat], dict):
            return f"summary.json's {stat!r} is not an object of metrics"
    warnings = summary.get("warnings", [])
    if not (isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)):
        return "summary.json's 'warnings' is not a list of strings"
    return None


def metrics_damage(rows: list[Any], rounds: Any) -> str | None:
    """What is wrong with ``metrics.jsonl``'s rows for a run of ``rounds`` rounds: not
    every row an object with an integer ``round``, rounds not increasing, or the last
    not ``rounds`` (when known)."""
    if not rows or not all(isinstance(r, dict) for r in rows):
        return "metrics.jsonl is empty or garbled"
    numbers = [r.get("round") for r in rows]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        return "metrics.jsonl has a row without a round number"
    if any(b <= a for a, b in zip(numbers, numbers[1:])):
        return "metrics.jsonl has rounds out of order or twice"
    if rounds is not None and numbers[-1] != rounds:
        return f"metrics.jsonl ends at round {numbers[-1]} of {rounds}"
    return None


def final_model_damage(path: Path) -> str | None:
    """What is wrong with ``final_model.npz``: missing, unreadable, or not the arrays
    ``arr_0 .. arr_{n-1}`` (n >= 1) of numbers that :func:`numpy.savez` writes."""
    if not path.is_file():
        return f"{FINAL_MODEL_FILE} is missing"
    try:
        with np.load(path, allow_pickle=False) as npz:
            names = sorted(npz.files)
            if not names or names != sorted(f"arr_{i}" for i in range(len(names))):
                return f"{FINAL_MODEL_FILE} holds {names[:4]}, not arr_0 .."
            for name in names:
                if npz[name].dtype.kind not in "biuf":
                    return f"{FINAL_MODEL_FILE}'s {name} is not numeric"
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        return f"{FINAL_MODEL_FILE} is unreadable ({type(err).__name__})"
    return None


def weights_damage(path: Path, rounds: Any) -> str | None:
    """What is wrong with ``weights.npy`` when the run has one: unreadable, or not a
    rounds x clients array of floats (``rounds``: when known)."""
    if not path.exists():
        return None
    try:
        weights = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        return f"{path.name} is unreadable ({type(err).__name__})"
    if weights.ndim != 2 or weights.dtype.kind != "f" or rounds not in (None, weights.shape[0]):
        return f"{path.name} is {weights.dtype} {weights.shape}, not {rounds} rounds x clients"
    return None
