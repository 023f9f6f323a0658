"""Our FedAWE Table 2 beside the paper's (fedram_flwr/report/fedawe_paper.py): the paper's
rows as printed, ranks, the agreement measures by hand, and the section on run folders
written by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedram_flwr.report import RunSet
from fedram_flwr.report.fedawe_paper import (
    TABLE7,
    agreement,
    comparison_section,
    paper_table2,
    ranks,
)
from fedram_flwr.report.last_rounds import ALGORITHMS, DYNAMICS
from tests.report.test_last_rounds import table2_run


def test_the_papers_rows_as_printed() -> None:
    table = paper_table2()
    assert set(table) == {(d, a) for d in DYNAMICS for a in ALGORITHMS}
    assert table[("stationary", "fedawe")]["SVHN"] == (86.5, 86.1)
    assert table[("interleaved-sine", "fedvarp")]["CINIC-10"] == (47.7, 47.2)
    assert table[("sine", "fedavg-is")]["CIFAR-10"] == (69.1, 67.3)
    assert TABLE7["fedawe"] == (0.1, 1.0) and TABLE7["mifa"] == (0.05, 1.0)


def test_ranks_put_the_highest_first_and_share_ties() -> None:
    assert ranks({"a": 0.5, "b": 0.9, "c": 0.5, "d": 0.1}) == {"a": 2, "b": 1, "c": 2, "d": 4}


def test_agreement_by_hand() -> None:
    """Ours a > b > c > d, the paper's b > a > c > d: 5 of 6 pairs alike, tau = (5-1)/6."""
    ours = {"fedawe": 4.0, "fedavg": 3.0, "mifa": 2.0, "fedavg-all": 1.0}
    paper = {"fedawe": 3.0, "fedavg": 4.0, "mifa": 2.0, "fedavg-all": 1.0}
    a = agreement(ours, paper)
    assert (a["alike"], a["pairs"]) == (5, 6)
    assert a["tau"] == pytest.approx(4 / 6)
    assert a["best1"] == ("fedawe", "fedavg")  # mifa is not in group (1)
    assert a["worst"] == ("fedavg-all", "fedavg-all")


def test_our_rows_beside_the_papers(tmp_path: Path) -> None:
    """Stationary: FedAWE 80%, FedAvg 70% test (window means, 2 seeds each) against the
    paper's 86.1 and 82.4 on SVHN: the same order, tau 1."""
    for seed in (0, 1):
        table2_run(tmp_path, seed, "stationary", "fedawe", {35: 0.8, 40: 0.8})
        table2_run(tmp_path, seed, "stationary", "fedavg", {35: 0.7, 40: 0.7})
    text = comparison_section(RunSet.load(tmp_path))
    assert (
        "| Stationary | FedAWE | 90.0 % | 80.0 % (1) | 86.1 % (1) | 66.3 % (1) | 47.3 % (1) |"
        in text
    )
    assert "| Stationary | FedAvg over active | 80.0 % | 70.0 % (2) | 82.4 % (2) |" in text
    assert (
        "| Stationary | SVHN | 1.00 | 1 of 1 | FedAWE / FedAWE | "
        "FedAvg over active / FedAvg over active |" in text
    )
    assert comparison_section(RunSet.load(tmp_path / "none")) == ""
