"""The run set a report reads once (fedram_flwr/report/runs.py), and a variant's label
and swept fields round-tripping from a scenario's sweep through the CLI's run folders to
the report's table rows."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.report import RunSet, write_report
from fedram_flwr.report.runs import parse_label
from tests.helpers import TINY_GAUSSIAN, write_run


def test_run_set_reads_each_run_once_into_plain_values(tmp_path: Path) -> None:
    rows = [{"round": 0, "accuracy": 0.1}, {"round": 5, "accuracy": 0.6}]
    done = write_run(tmp_path, "a=1", 0, rows, variant={"x.a": 1})
    np.save(done.path / "weights.npy", np.ones((5, 2), np.float32))
    write_run(tmp_path, "a=1", 1, rows, status="failed")
    write_run(tmp_path, "", 3, rows)  # a run straight under the root
    rs = RunSet.load(tmp_path)
    assert [(r.label, r.status) for r in rs.runs] == [
        ("a=1", "complete"),
        ("a=1", "failed"),
        ("default", "complete"),
    ]
    first = rs.runs[0]
    assert [r for r in first.rows if "accuracy" in r] == rows  # rounds 1-4: not evaluated
    assert [r["round"] for r in first.rows] == [0, 1, 2, 3, 4, 5]
    assert first.seed == 0 and first.fields == {"a": "1"}
    assert first.weights.tolist() == [[1.0, 1.0]] * 5
    assert rs.runs[1].rows == [] and rs.incomplete() == [(str(rs.runs[1].path), "failed")]
    assert list(rs.by_seed()) == ["a=1", "default"]
    assert rs.finals()["a=1"] == [{"round": 5, "accuracy": 0.6, "seed": 0, "rare-classes": []}]


def test_older_folders_without_a_record_fall_back_to_the_label(tmp_path: Path) -> None:
    assert parse_label("p_min=0.1_name=fedavg-is") == {"p_min": "0.1", "name": "fedavg-is"}
    assert parse_label("default") == {}
    write_run(tmp_path, "p_min=0.1_name=fedar", 0, [{"round": 1, "accuracy": 0.5}])
    rs = RunSet.load(tmp_path)
    assert rs.split("p_min=0.1_name=fedar") == ("p_min=0.1", "fedar")


def test_swept_fields_round_trip_from_the_sweep_to_the_report(tmp_path: Path) -> None:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(rounds=2, eval_every=1)
    raw["sweep"] = {"algorithm.alpha": [1.0, 0.1], "training.local_epochs": [1, 2]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    chosen = ["alpha=1.0_local_epochs=1", "alpha=0.1_local_epochs=1", "alpha=0.1_local_epochs=2"]
    args = ["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "runs")]
    assert main([*args, *(f"--variant={v}" for v in chosen)]) == 0
    root = tmp_path / "runs" / "tiny-gaussian"
    record = json.loads((root / "alpha=0.1_local_epochs=2" / "seed0" / "variant.json").read_text())
    assert record == {
        "label": "alpha=0.1_local_epochs=2",
        "sweep": {"algorithm.alpha": 0.1, "training.local_epochs": 2},
        "fields": {"alpha": "0.1", "local_epochs": "2"},
    }
    text = write_report(root).read_text()
    for label in ("alpha=1.0_local_epochs=1", "alpha=0.1_local_epochs=2"):
        assert f"| {label} | 1 |" in text
    pivot = "| local_epochs \\ alpha | alpha=1.0 | alpha=0.1 |"
    assert pivot in text and "| local_epochs=2 | – |" in text  # alpha=1.0 not run
    # The fields are data, not parsed from folder names: renamed folders still pivot.
    for k, folder in enumerate(sorted(p for p in root.iterdir() if p.is_dir())):
        folder.rename(root / f"v{k}")
    renamed = write_report(root).read_text()
    assert pivot in renamed and "| local_epochs=1 |" in renamed and "| v0 | 1 |" in renamed


def test_damaged_runs_are_listed_apart_from_incomplete_ones(tmp_path: Path) -> None:
    """A complete run without its final model is damaged (not complete, not in any
    table) and listed apart from the runs that did not complete."""
    rows = [{"round": 0, "accuracy": 0.1}, {"round": 5, "accuracy": 0.6}]
    write_run(tmp_path, "a=1", 0, rows)
    lost = write_run(tmp_path, "a=1", 1, rows)
    (lost.path / "final_model.npz").unlink()
    failed = write_run(tmp_path, "a=1", 2, rows, status="failed")
    rs = RunSet.load(tmp_path)
    assert [r.seed for r in rs.complete] == [0]
    assert rs.damaged() == [(str(lost.path), "final_model.npz is missing")]
    assert rs.incomplete() == [(str(failed.path), "failed")]
    assert list(rs.finals()["a=1"][0]) and len(rs.finals()["a=1"]) == 1
