"""Reports on time (fedram_flwr/report/clock.py, plots.plot_accuracy_time) on metrics
written by hand: time to a target accuracy, accuracy against simulated hours."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.report import RunSet, write_report
from fedram_flwr.report.clock import (
    budget_table,
    hours_series,
    plot_time_curves,
    target_table,
    time_to_target,
    within_budget,
)
from fedram_flwr.report.run_plots import plot_accuracy_time
from fedram_flwr.scenario.schema import ScenarioError
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
    cut = plot_time_curves(RunSet.load(tmp_path / "runs"), tmp_path / "c.png", budget=2.0)
    # at 2 h: seed 0 halfway from (1 h, 0.4) to (3 h, 0.8), seed 1 at (2 h, 0.6)
    assert cut["1:v (2 seeds)"][-1] == pytest.approx([2.0, 0.6])


def test_a_wall_clock_run_is_plotted_against_wall_minutes(tmp_path: Path) -> None:
    rows = [{"round": 0, "accuracy": 0.2}, {"round": 1, "accuracy": 0.5, "wall-seconds": 90.0}]
    rows.append({"round": 2, "accuracy": 0.7, "wall-seconds": 150.0})
    shown = plot_accuracy_time(tmp_path / "a.png", rows)
    assert np.allclose(shown["1:overall"], [[0.0, 0.2], [1.5, 0.5], [2.5, 0.7]])
    assert plot_accuracy_time(tmp_path / "b.png", [{"round": 1, "accuracy": 0.5}]) is None


def test_runs_without_a_clock_get_no_time_figure(tmp_path: Path) -> None:
    write_run(tmp_path, "v", 0, [{"round": 0, "accuracy": 0.1}, {"round": 5, "accuracy": 0.5}])
    assert plot_time_curves(RunSet.load(tmp_path), tmp_path / "c.png") is None
    assert "simulated" not in write_report(tmp_path).read_text()


def work(rows: list[dict], key: str, counts: list) -> list[dict]:
    """``rows`` with round r's ``key`` set to ``counts[r - 1]`` (round 0 unchanged)."""
    return [rows[0], *({**r, key: c} for r, c in zip(rows[1:], counts, strict=True))]


def test_the_budget_table_cuts_each_run_at_the_budget_and_counts_client_work(
    tmp_path: Path,
) -> None:
    # wait-all: 3 started a round, reaches 0.7 at round 2 (2 h), 0.9 at 4 h: past a 3 h budget
    sync = work(clocked([0.1, 0.5, 0.7, 0.8, 0.9], [1.0, 2.0, 3.0, 4.0]), "started", [3] * 4)
    write_run(tmp_path, "wait-all", 0, sync)
    # deadline: 4 started, 1 dropped a round; seed 0 reaches 0.7 at 1.5 h, seed 1 never
    late = clocked([0.1, 0.6, 0.7, 0.72], [1.0, 1.5, 3.5])
    late = work(work(late, "started", [4, 4, 4]), "dropped", [1, 1, 1])
    write_run(tmp_path, "deadline", 0, late)
    write_run(
        tmp_path, "deadline", 1, work(work(late, "accuracy", [0.5, 0.6, 0.9]), "dropped", [0, 2, 0])
    )
    # FedBuff: K = 2 updates a step, 0.7 at step 3 (0.75 h)
    steps = clocked([0.1, 0.3, 0.6, 0.7, 0.75], [0.25, 0.5, 0.75, 3.0])
    write_run(tmp_path, "fedbuff", 0, work(steps, "buffer-clients", [[0, 1]] * 4))
    table = budget_table(RunSet.load(tmp_path), 3.0, 0.7)
    # hours to target | updates to target | accuracy at 3 h | updates in 3 h | dropped
    assert "| wait-all | 1 of 1 | 2.00 ± 0.00 | 6 ± 0 | 80.00 ± 0.00 | 9 ± 0 | 0 ± 0 |" in table
    # seed 1's 0.9 comes at 3.5 h, past the budget; both at 3 h read round 2's evaluation
    assert "| deadline | 1 of 2 | 1.50 ± 0.00 | 8 ± 0 | 65.00 ± 7.07 | 8 ± 0 | 2 ± 0 |" in table
    assert "| fedbuff | 1 of 1 | 0.75 ± 0.00 | 6 ± 0 | 75.00 ± 0.00 | 8 ± 0 | 0 ± 0 |" in table
    assert "| wait-all | 0 of 1 | not reached | not reached |" in budget_table(
        RunSet.load(tmp_path), 3.0, 0.85
    )
    # a budget past the shortest run's end: an error naming that run (deadline's seed 0
    # and 1 end at 3.5 h, wait-all's at 4 h, FedBuff's at 3 h)
    with pytest.raises(ScenarioError, match=f"--time-budget: {tmp_path}/fedbuff/seed0: a run "):
        budget_table(RunSet.load(tmp_path), 3.2, 0.7)
    report = write_report(tmp_path, target_accuracy=0.7, time_budget=3.0).read_text()
    assert "## Within 3 simulated hours" in report and table in report
    assert "Within" not in write_report(tmp_path, target_accuracy=0.7).read_text()


def test_a_run_that_ends_before_the_budget_is_an_error() -> None:
    rows = clocked([0.1, 0.5, 0.7], [1.0, 2.0])
    assert [r["round"] for r in within_budget(rows, 1.5)] == [0, 1]
    assert [r["round"] for r in within_budget(rows, 2.0)] == [0, 1, 2]
    with pytest.raises(ValueError, match="ends at 2.000 simulated hours, before the budget of 2.5"):
        within_budget(rows, 2.5)


def test_the_results_page_figure_counts_work_cumulatively() -> None:
    """scripts/time_results_figure.py (docs/time-results.md): accuracy against the client
    updates computed so far, on a grid up to the fewest any seed computed."""
    path = Path(__file__).resolve().parents[2] / "scripts" / "time_results_figure.py"
    spec = importlib.util.spec_from_file_location("time_results_figure", path)
    figure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figure)
    rows = work(clocked([0.1, 0.5, 0.7], [1.0, 2.0]), "started", [4, 6])
    rows.insert(2, {"round": 2, "started": 3, "sim-seconds": 5400.0})  # not evaluated
    got = figure.curves(rows)
    assert got.tolist() == [[0, 0.0, 0, 0.1], [1, 1.0, 4, 0.5], [2, 2.0, 13, 0.7]]
    other = figure.curves(work(clocked([0.3, 0.5, 0.9], [1.0, 2.0]), "started", [2, 2]))
    grid, mean = figure.mean_on_grid([got, other], column=2)
    assert grid[-1] == 4 and mean[-1] == pytest.approx((0.5 + 0.9) / 2)
