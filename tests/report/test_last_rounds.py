"""FedAWE Table 2's layout (fedram_flwr/report/last_rounds.py) on run folders written by
hand: per (dynamics, algorithm), mean ± std over seeds of each run's mean accuracy over
the evaluated rounds of its last W rounds."""

from __future__ import annotations

from pathlib import Path

import yaml

from fedram_flwr.report import RunSet, write_report
from fedram_flwr.report.last_rounds import last_rounds_table, window_of
from tests.helpers import write_run

T = 40  # rounds: W = min(50, 40 // 4) = 10, the window is rounds 31..40


def table2_run(
    root: Path,
    seed: int,
    dynamics: str | None,
    name: str,
    tests: dict[int, float],
    train: bool = True,
    label: str | None = None,
) -> None:
    """A complete run of T rounds, evaluated every 5 rounds: test accuracy ``tests[r]``
    (0 where not given), train accuracy 0.1 above it; rows between evaluations have no
    accuracy. Its scenario names the dynamics (unless None) and the algorithm."""
    rows = []
    for rnd in range(T + 1):
        row = {"round": rnd, "active": [0]}
        if rnd % 5 == 0:
            row["accuracy"] = tests.get(rnd, 0.0)
            if train:
                row["train-accuracy"] = tests.get(rnd, 0.0) + 0.1
        rows.append(row)
    label = label or f"dynamics={dynamics}_name={name}"
    run = write_run(root, label, seed, rows)
    scenario = {"rounds": T, "seed": seed, "data": {"dataset": "fashion-mnist"}}
    scenario["algorithm"] = {"name": name, "params": {}}
    params = {} if dynamics is None else {"dynamics": dynamics}
    scenario["availability"] = {"oracle": "nonstationary", "params": params}
    run.write("scenario.yaml", yaml.safe_dump(scenario))


SEED_TESTS = {  # seed -> test accuracy at rounds 25, 30 (outside W = 10), 35 and 40
    0: {25: 0.0, 30: 0.0, 35: 0.60, 40: 0.70},
    1: {25: 0.0, 30: 0.0, 35: 0.70, 40: 0.80},
    2: {25: 0.0, 30: 0.0, 35: 0.80, 40: 0.90},
}


def test_window_rule() -> None:
    assert [window_of(t) for t in (2000, 400, 200, 100, 40, 3)] == [50, 50, 50, 25, 10, 1]


def test_cells_are_mean_and_std_over_seeds_of_the_window_means(tmp_path: Path) -> None:
    """Window means 0.65, 0.75, 0.85 (rounds 35 and 40 only: round 30's 0 is outside):
    75.0 ± 10.0 (std ddof 1); train 0.1 above: 85.0 ± 10.0."""
    for seed, tests in SEED_TESTS.items():
        table2_run(tmp_path, seed, "sine", "fedawe", tests)
    table = last_rounds_table(RunSet.load(tmp_path))
    row = "| Non-stationary (sine) | FedAWE (`fedawe`) | 3 | 2 | 85.0 ± 10.0 % | 75.0 ± 10.0 % |"
    assert row in table and "last W = 10 rounds" in table


def test_a_given_window_cuts_there(tmp_path: Path) -> None:
    """W = 20: rounds 25, 30, 35, 40; means 0.325, 0.375, 0.425 -> 37.5 ± 5.0."""
    for seed, tests in SEED_TESTS.items():
        table2_run(tmp_path, seed, "staircase", "mifa", tests)
    table = last_rounds_table(RunSet.load(tmp_path), window=20)
    assert "| MIFA (`mifa`) | 3 | 4 | 47.5 ± 5.0 % | 37.5 ± 5.0 % |" in table
    assert "last W = 20 rounds" in table


def test_rows_in_the_papers_order_and_train_needs_client_metrics(tmp_path: Path) -> None:
    for dynamics in ("sine", "stationary"):
        for name in ("fedvarp", "fedstale", "fedavg-all", "fedawe", "mifa"):
            table2_run(tmp_path, 0, dynamics, name, {40: 0.5}, train=False)
    rows = [line for line in last_rounds_table(RunSet.load(tmp_path)).splitlines()[4:] if line]
    order = ["FedAWE", "FedAvg over all", "MIFA", "FedVARP", "fedstale"]
    assert [r.split(" | ")[1].split(" (`")[0] for r in rows] == order * 2
    assert all(r.startswith("| Stationary |") for r in rows[:5])
    assert all(r.startswith("| Non-stationary (sine) |") for r in rows[5:])
    # rounds 35 (0) and 40 (0.5); one seed: std 0; no train-accuracy recorded
    assert rows[0].endswith("| 1 | 2 | – | 25.0 ± 0.0 % |")


def test_two_variants_of_one_algorithm_get_a_row_each(tmp_path: Path) -> None:
    for label, acc in (("cutoff=50", 0.4), ("cutoff=0", 0.6)):
        table2_run(tmp_path, 0, "sine", "fedau", {40: acc}, label=label)
    table = last_rounds_table(RunSet.load(tmp_path))  # rounds 35 (0, train 0.1) and 40
    assert "| FedAU (`fedau`) [cutoff=0] | 1 | 2 | 40.0 ± 0.0 % | 30.0 ± 0.0 % |" in table
    assert "| FedAU (`fedau`) [cutoff=50] | 1 | 2 | 30.0 ± 0.0 % | 20.0 ± 0.0 % |" in table


def test_the_report_has_the_table_only_under_dynamics(tmp_path: Path) -> None:
    table2_run(tmp_path / "plain", 0, None, "fedavg", {40: 0.5})
    assert last_rounds_table(RunSet.load(tmp_path / "plain")) == ""
    assert "FedAWE Table 2" not in write_report(tmp_path / "plain").read_text()
    for seed, tests in SEED_TESTS.items():
        table2_run(tmp_path / "t2", seed, "interleaved-sine", "fedavg-is", tests)
    text = write_report(tmp_path / "t2").read_text()
    assert "## Last rounds by availability dynamics (FedAWE Table 2)" in text
    assert "| Non-stationary (interleaved sine) | FedAvg with known p_i^t (`fedavg-is`) |" in text
