"""The CA-Fed benchmark scripts under bench/ (Fig. 4a estimator errors, selection time)
on tiny inputs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_estimator_error_bench_decreases_with_observations() -> None:
    bench = load_bench("ca_fed_estimators")
    rows = bench.estimator_errors([100, 3000], seeds=2, num_clients=20)
    by = {(r["observations"], r["group"]): r for r in rows}
    for key in ("pi_error_mean", "lambda_error_mean"):
        assert by[(3000, "all")][key] < by[(100, "all")][key]
    assert "| 3,000 | all |" in bench.markdown(rows)


def test_selection_bench_times_one_selection() -> None:
    """The row's shape and order only: how long a selection takes is the bench's to
    report (bench/results), not a test's to bound on a loaded machine."""
    bench = load_bench("ca_fed_selection")
    row = bench.selection_times(200, repeats=2, warmup=3)
    assert row["clients"] == 200 and row["repeats"] == 2 and 0 < row["included"] <= 200
    for part in ("estimators", "get", "total", "total_cpu"):
        assert 0 <= row[f"{part}_min_s"] <= row[f"{part}_median_s"]
