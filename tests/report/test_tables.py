"""The report's tables (fedram_flwr/report/tables.py) on run folders written by hand:
mean ± std over seeds, the paper's two-key layout, FedAR's paired t-tests (Table 2) and
per-client accuracy (Table 3), RC-FL's fairness tables (Table 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ttest_rel

from fedram_flwr.report import RunSet, write_report
from fedram_flwr.report.tables import (
    client_accuracy_table,
    client_stats,
    fairness_table,
    markdown_table,
    per_client_test_table,
    ttest_table,
)
from tests.helpers import write_run


def test_client_stats_table3_columns() -> None:
    acc = np.linspace(0.0, 1.0, 10)  # 10 clients: worst/best 10% = one client
    st = client_stats(list(acc))
    assert st["mean"] == pytest.approx(50.0)
    assert st["var"] == pytest.approx(np.var(100 * acc))
    assert st["worst"] == 0.0 and st["best"] == 100.0 and st["worst-std"] == 0.0


def test_markdown_table_is_mean_and_std_over_seeds_and_lists_incomplete_runs(
    tmp_path: Path,
) -> None:
    for seed, acc in ((0, 0.5), (1, 0.7)):
        row = {"round": 10, "accuracy": acc, "train-loss": 1.0 + acc}
        write_run(tmp_path, "alpha=1.0", seed, [row], summary={"final": {**row}})
    write_run(tmp_path, "alpha=1.0", 2, [{"round": 3}], status="running")
    table = markdown_table(RunSet.load(tmp_path))
    # accuracy 50 and 70: mean 60, std (ddof 1) 14.14; loss 1.5 and 1.7: 1.6 ± 0.141
    assert "| alpha=1.0 | 2 | 60.00 ± 14.14 | 1.600 ± 0.141 |" in table
    assert f"- {tmp_path / 'alpha=1.0' / 'seed2'}: running" in table


def fedar_run(root: Path, label: str, seed: int, accs: list[float], clients: list[float]):
    """A complete run with test accuracies ``accs`` at rounds 0, 5, 10, ..."""
    rows = [
        {"round": 5 * i, "accuracy": a, "train-loss": 2.0 - a, "loss": 2.0 - a}
        for i, a in enumerate(accs)
    ]
    final = {**rows[-1], "client-accuracy": clients}
    summary = {"rounds": rows[-1]["round"], "final": final, "tail-mean": final}
    return write_run(root, label, seed, rows, summary=summary)


@pytest.fixture
def fedar_runs(tmp_path: Path) -> tuple[Path, dict[str, dict[int, list[float]]]]:
    rng = np.random.default_rng(1)
    curves: dict[str, dict[int, list[float]]] = {}
    for label, shift in (("p_min=0.1_name=fedar", 0.05), ("p_min=0.1_name=mifa", 0.0)):
        curves[label] = {}
        for seed in range(3):
            accs = list(np.round(0.5 + shift + 0.05 * rng.random(4), 4))
            curves[label][seed] = accs
            fedar_run(tmp_path, label, seed, accs, list(rng.random(20)))
    return tmp_path, curves


def test_ttest_table_matches_scipy_over_rounds_and_seeds(fedar_runs) -> None:
    root, curves = fedar_runs
    ref, base = curves["p_min=0.1_name=fedar"], curves["p_min=0.1_name=mifa"]
    # Over rounds: pairs (seed, round > 0), round 0 excluded.
    a = [x for s in range(3) for x in ref[s][1:]]
    b = [x for s in range(3) for x in base[s][1:]]
    p_rounds = ttest_rel(a, b).pvalue
    rs = RunSet.load(root)
    table = ttest_table(rs, over="rounds")
    assert f"{p_rounds:.2g} (" in table and "n=9)" in table
    assert "| p_min=0.1 |" in table and "mifa" in table
    p_seeds = ttest_rel([ref[s][-1] for s in range(3)], [base[s][-1] for s in range(3)]).pvalue
    assert f"{p_seeds:.2g} (" in ttest_table(rs, over="seeds")


def test_report_has_the_fedar_sections(fedar_runs) -> None:
    root, _ = fedar_runs
    fedar_run(root, "p_min=0.5_name=fedar", 0, [0.5, 0.6], [0.5, 0.7])
    assert "| p_min=0.1_name=fedar | 3 |" in client_accuracy_table(RunSet.load(root))
    text = write_report(root).read_text()
    assert "Paired t-test on `accuracy`" in text and "train loss" in text
    assert "Per-client accuracy of the final model (Table 3)" in text
    assert "| p_min \\ name | name=mifa | name=fedar |" in text  # pivot sorts names


def test_report_pivots_only_a_full_grid_of_two_keys(tmp_path: Path) -> None:
    row = {"round": 4, "accuracy": 0.5}
    for label in ("name=a_kappa2=1", "name=a_kappa2=2", "name=b_kappa2=1", "name=b_kappa2=2"):
        write_run(tmp_path / "grid", label, 0, [row])  # two swept keys: the paper's layout
    assert "Paper layout" in write_report(tmp_path / "grid").read_text()
    for label in ("name=a", "name=b", "loss_floor=x"):  # two keys, but mixed labels
        write_run(tmp_path / "mixed", label, 0, [row])
    assert "Paper layout" not in write_report(tmp_path / "mixed").read_text()


def rcfl_run(root: Path, label: str, seed: int, accs: list[float], hcvar_value: float) -> None:
    final = {
        "round": 10,
        "accuracy": float(np.mean(accs)),
        "client-test-accuracy": accs,
        "client-test-acc-mean": float(np.mean(accs)),
        "client-test-acc-worst10": min(accs),
        "client-test-acc-best10": max(accs),
        "client-test-acc-var": float(np.var(100 * np.array(accs))),
        "client-test-hcvar": hcvar_value,
        "client-test-loss-max": 1.0,
    }
    write_run(root, label, seed, [final], summary={"rounds": 10, "final": final})


def test_fairness_tables_are_mean_and_std_over_seeds(tmp_path: Path) -> None:
    rcfl_run(tmp_path, "name=fedavg", 0, [0.9, 0.5, 0.7], 0.8)
    rcfl_run(tmp_path, "name=fedavg", 1, [0.9, 0.7, 0.8], 0.6)
    rs = RunSet.load(tmp_path)
    table = fairness_table(rs)
    # averages 70% and 80%, worst clients 50% and 70%, HCVaR 0.8 and 0.6 (std: ddof 1)
    assert "| name=fedavg | 2 | 75.00 ± 7.07 | 60.00 ± 14.14 | 90.00 ± 0.00 |" in table
    assert "0.700 ± 0.141" in table
    assert "| name=fedavg | 2 | 90.00 ± 0.00 | 60.00 ± 14.14 | 75.00 ± 7.07 |" in (
        per_client_test_table(rs)
    )
    text = write_report(tmp_path).read_text()
    assert "RC-FL Table 1" in text and "![per-client test accuracy]" in text


def test_tables_do_not_read_the_disk_again(fedar_runs) -> None:
    root, _ = fedar_runs
    rs = RunSet.load(root)
    expected = ttest_table(rs), markdown_table(rs), client_accuracy_table(rs)
    shutil.rmtree(root)
    assert (ttest_table(rs), markdown_table(rs), client_accuracy_table(rs)) == expected
