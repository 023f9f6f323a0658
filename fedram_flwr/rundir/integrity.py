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


def metrics_damage(
    rows: list[Any], last: Any, *, every: Any = None, rounds: Any = None
) -> str | None:
    """What is wrong with ``metrics.jsonl``'s rows, which must be rounds 0, 1, ..,
    ``last`` (when known), one row each, in order: not every row an object with an
    integer ``round``, rounds out of order or twice, a round missing at the start, in
    the middle or at the end, or (``every``: the scenario's ``eval_every``) an
    evaluation round (a multiple of ``every``, and ``rounds``, the run's last) whose row
    has no ``loss``."""
    if not rows or not all(isinstance(r, dict) for r in rows):
        return "metrics.jsonl is empty or garbled"
    numbers = [r.get("round") for r in rows]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        return "metrics.jsonl has a row without a round number"
    if any(b <= a for a, b in zip(numbers, numbers[1:])):
        return "metrics.jsonl has rounds out of order or twice"
    if numbers[0] != 0:
        return f"metrics.jsonl starts at round {numbers[0]}, not 0"
    gap = next((a for a, b in zip(numbers, numbers[1:]) if b != a + 1), None)
    if gap is not None:
        after = numbers[numbers.index(gap) + 1]
        missing = f"round {gap + 1}" if after == gap + 2 else f"rounds {gap + 1}-{after - 1}"
        return f"metrics.jsonl lacks {missing} (it has {gap} and {after})"
    if last is not None and numbers[-1] != last:
        return f"metrics.jsonl ends at round {numbers[-1]} of {last}"
    if _count(every) and every > 0:
        unevaluated = [
            n
            for n, row in zip(numbers, rows)
            if (n % every == 0 or n == rounds) and "loss" not in row
        ]
        if unevaluated:
            return (
                f"metrics.jsonl's round {unevaluated[0]} has no evaluation "
                f"(eval_every {every}: every {every}th round and the last have one)"
            )
    return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
