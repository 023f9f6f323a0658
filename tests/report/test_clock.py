"""Reports on time (fedram_flwr/report/clock.py, plots.plot_accuracy_time) on metrics
written by hand: time to a target accuracy, accuracy against simulated hours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.plots import plot_accuracy_time
from fedram_flwr.report import RunSet, write_report
from fedram_flwr.report.clock import hours_series, plot_time_curves, target_table, time_to_target
from tests.helpers import write_run


def clocked(accs: list[float], hours: list[float]) -> list[dict]:
    """Rows of rounds 0, 1, 2, ...: accuracy ``accs``, rounds ending at ``hours[r - 1]``."""
    rows = [{"round": 0, "accuracy": accs[0]}]
    rows += [
        {"round": r, "accuracy": a, "sim-seconds": 3600.0 * h}
        for r, (a, h) in enumerate(zip(accs[1:], hours, strict=True), start=1)
    ]
    return rows


def test_time_to_target_is_the_first_evaluation_at_or_above_it() -> None:
    rows = clocked([0.1, 0.5, 0.7, 0.65, 0.9], [0.5, 1.25, 2.0, 3.0])
    assert time_to_target(rows, 0.7) == (2, 1.25)  # equal to the target counts
    assert time_to_target(rows, 0.8) == (4, 3.0)
    assert time_to_target(rows, 0.05) == (0, 0.0)
    assert time_to_target(rows, 0.95) is None
    plain = [{k: v for k, v in r.items() if k != "sim-seconds"} for r in rows]
    assert time_to_target(plain, 0.7) == (2, None)  # no clock, no hours
    # rows between evaluations carry no accuracy: they never reach it
    assert time_to_target([{"round": 1, "sim-seconds": 10.0}, *rows[1:]], 0.5) == (1, 0.5)


def test_the_target_table_averages_the_seeds_that_reach_it(tmp_path: Path) -> None:
    write_run(tmp_path, "deadline", 0, clocked([0.1, 0.6, 0.8], [1.0, 2.0]))
    write_run(tmp_path, "deadline", 1, clocked([0.1, 0.8, 0.9], [1.5, 2.5]))
    write_run(tmp_path, "deadline", 2, clocked([0.1, 0.2, 0.3], [1.0, 2.0]))
    write_run(tmp_path, "wait-all", 0, clocked([0.1, 0.2, 0.3], [4.0, 8.0]))
    write_run(
        tmp_path, "rounds", 0, [{"round": 0, "accuracy": 0.1}, {"round": 5, "accuracy": 0.75}]
    )
    table = target_table(RunSet.load(tmp_path), 0.7)
    # deadline: seed 0 at round 2 (2.0 h), seed 1 at round 1 (1.5 h), seed 2 never
    assert "| deadline | 3 | 2 of 3 | 1.5 ± 0.7 | 1.750 ± 0.354 |" in table
    assert "| wait-all | 1 | 0 of 1 | not reached | not reached |" in table
    assert "| rounds | 1 | 1 of 1 | 5.0 ± 0.0 | – |" in table
    report = write_report(tmp_path, target_accuracy=0.7).read_text()
    assert "## Time to 70% test accuracy" in report and table in report
    assert "![test accuracy against rounds and simulated hours](curves_time.png)" in report
    assert "Time to" not in write_report(tmp_path).read_text()  # no target: no table


def test_accuracy_against_hours_beside_rounds(tmp_path: Path) -> None:
    rows = clocked([0.2, 0.4, 0.8], [1.0, 3.0])
    assert hours_series(rows) == [(0.0, 0.2), (1.0, 0.4), (3.0, 0.8)]
    shown = plot_accuracy_time(tmp_path / "a.png", rows)
    assert np.allclose(shown["0:overall"], [[0, 0.2], [1, 0.4], [2, 0.8]])
    assert np.allclose(shown["1:overall"], [[0.0, 0.2], [1.0, 0.4], [3.0, 0.8]])
    write_run(tmp_path / "runs", "v", 0, rows)
    write_run(tmp_path / "runs", "v", 1, clocked([0.4, 0.6, 0.8], [2.0, 4.0]))
    curves = plot_time_curves(RunSet.load(tmp_path / "runs"), tmp_path / "c.png")
    assert np.allclose(curves["0:v (2 seeds)"], [[0, 0.3], [1, 0.5], [2, 0.8]])
    hours = curves["1:v (2 seeds)"]  # on a grid up to the shorter run's 3 h
    assert hours[-1, 0] == pytest.approx(3.0)
    # at 3 h: seed 0 at 0.8, seed 1 halfway from (2 h, 0.6) to (4 h, 0.8): 0.7
    assert hours[-1, 1] == pytest.approx(0.75)


def test_runs_without_a_clock_get_no_time_figure(tmp_path: Path) -> None:
    write_run(tmp_path, "v", 0, [{"round": 0, "accuracy": 0.1}, {"round": 5, "accuracy": 0.5}])
    assert plot_time_curves(RunSet.load(tmp_path), tmp_path / "c.png") is None
    assert "simulated" not in write_report(tmp_path).read_text()
