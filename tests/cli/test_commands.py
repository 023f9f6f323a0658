"""``fedram run / report / show`` on the tiny scenario swept over two alphas: resuming a
sweep, ``--variant``, the report and the resolved scenario, exit codes, and the status a
failing run leaves."""

from __future__ import annotations

import copy
import json
import logging
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.message_api import FedCVaRAvg as MessageFedCVaRAvg
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.strategies import FedCVaRAvg
from tests.helpers import TINY_GAUSSIAN, run_forked, without_timings

LABELS = ["alpha=1.0", "alpha=0.1"]


@pytest.fixture(autouse=True)
def no_run_plots(monkeypatch: pytest.MonkeyPatch) -> None:
    """One run's figures are not what these tests check (saves ~1 s per run)."""
    monkeypatch.setattr("fedram_flwr.cli.commands.plot_run", lambda *args: None)


def write_scenario(folder: Path, **changes: Any) -> Path:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw["sweep"] = {"algorithm.alpha": [1.0, 0.1]}
    for dotted, value in changes.items():
        *parents, key = dotted.split(".")
        section = raw
        for name in parents:
            section = section[name]
        section[key] = value
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(scenario file, --out folder) of one complete run of variant alpha=0.1, made once
    for the tests that copy and damage it."""
    root = tmp_path_factory.mktemp("complete")
    scenario, out = write_scenario(root), root / "runs"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("fedram_flwr.cli.commands.plot_run", lambda *args: None)  # as no_run_plots
        assert main(["run", str(scenario), "--out", str(out), "--variant", "alpha=0.1"]) == 0
    return scenario, out


def fedram(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``fedram ARGV``."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def stub_report(root: Path) -> Path:
    """``write_report`` without its figures, for tests of the runs alone."""
    (root / "report.md").write_text("report\n")
    return root / "report.md"


def test_variant_runs_only_that_variant_and_a_rerun_resumes(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fedram_flwr.cli.commands.write_report", stub_report)
    scenario, out = write_scenario(tmp_path), tmp_path / "runs"
    code, _, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.1")
    assert code == 0, err
    root = out / "tiny-gaussian"
    run = RunDirectory(root / "alpha=0.1" / "seed0")
    assert run.status() == "complete"
    assert [r["round"] for r in run.read_metrics()] == list(range(7))
    assert not (root / "alpha=1.0").exists()
    metrics = run.metrics_path.read_bytes()
    results = without_timings(run.read_metrics())
    status = (run.path / "status.json").read_bytes()

    # A complete run is skipped: nothing of it is rewritten.
    code, _, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.1")
    assert code == 0 and "[1/1] alpha=0.1 seed 0: complete, skipped" in err
    assert run.metrics_path.read_bytes() == metrics
    assert (run.path / "status.json").read_bytes() == status

    # A run left in any other state is run again from the start.
    run.set_status("failed", error="RuntimeError: killed")
    run.metrics_path.write_text(json.dumps({"round": 0}) + "\n")
    code, _, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.1")
    assert code == 0 and "skipped" not in err
    assert run.status() == "complete"
    assert without_timings(run.read_metrics()) == results  # the same run, recorded afresh


def test_unknown_variant_exits_2_listing_the_allowed_labels(tmp_path: Path, capsys) -> None:
    scenario, out = write_scenario(tmp_path), tmp_path / "runs"
    code, _, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.5")
    assert code == 2
    assert "--variant" in err and "alpha=0.5" in err
    assert "allowed: alpha=1.0, alpha=0.1" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("changes", "argv", "named"),
    [
        ({"training.lrr": 0.1}, [], "training.lrr"),
        ({"training.lr": "fast"}, [], "training.lr"),
        ({}, ["--set", "training.lr=-1"], "training.lr"),
        ({}, ["--set", "rounds"], "rounds"),
        ({}, ["--tls"], "--tls"),
        ({}, ["--checkpoint-every", "-1"], "--checkpoint-every"),
        ({}, ["--engine", "flwr", "--checkpoint-every", "2"], "--checkpoint-every"),
        ({"training.batched": "on"}, ["--engine", "flwr"], "training.batched: on"),
        ({"training.batched": "on"}, ["--engine", "deployment"], "--engine deployment"),
    ],
)
def test_bad_input_exits_2_naming_the_field(
    tmp_path: Path, capsys, changes: dict[str, Any], argv: list[str], named: str
) -> None:
    scenario, out = write_scenario(tmp_path, **changes), tmp_path / "runs"
    code, stdout, err = fedram(capsys, "run", scenario, "--out", out, *argv)
    assert code == 2
    assert err.startswith("fedram: error: ") and named in err
    assert stdout == "" and not out.exists()


def test_missing_files_exit_2(tmp_path: Path, capsys) -> None:
    code, _, err = fedram(capsys, "run", tmp_path / "nope.yaml")
    assert code == 2 and "nope.yaml" in err
    code, _, err = fedram(capsys, "report", tmp_path / "no-runs")
    assert code == 2 and "no-runs" in err
    code, _, err = fedram(capsys, "show", tmp_path / "nope.yaml")
    assert code == 2 and "nope.yaml" in err


def test_a_target_accuracy_outside_0_1_exits_2(tmp_path: Path, capsys) -> None:
    code, _, err = fedram(capsys, "report", tmp_path, "--target-accuracy", "70")
    assert code == 2 and "--target-accuracy: 70.0 is not an accuracy in [0, 1]" in err


@pytest.mark.parametrize(
    "given",
    [
        ["--time-budget", "6"],
        ["--time-budget", "0", "--target-accuracy", "0.7"],
        ["--time-budget", "inf", "--target-accuracy", "0.7"],
        ["--time-budget", "nan", "--target-accuracy", "0.7"],
    ],
)
def test_a_time_budget_needs_hours_and_a_target_or_exits_2(tmp_path: Path, capsys, given) -> None:
    code, _, err = fedram(capsys, "report", tmp_path, *given)
    assert code == 2 and "--time-budget" in err and "with --target-accuracy" in err


@pytest.mark.parametrize(
    ("given", "why"),
    [
        (["--time-limit", "0"], "--time-limit: 0.0: a positive number of seconds"),
        (["--time-limit", "inf"], "--time-limit: inf: a positive number of seconds"),
        (["--time-limit", "60", "--api", "message"], "through the legacy API"),
    ],
)
def test_a_time_limit_must_be_one_a_run_can_keep(tmp_path: Path, capsys, given, why) -> None:
    code, _, err = fedram(capsys, "run", write_scenario(tmp_path), "--out", tmp_path, *given)
    assert code == 2 and why in err and not (tmp_path / "tiny-gaussian").exists()


def test_strict_on_a_folder_without_runs_exits_1(tmp_path: Path, capsys) -> None:
    """Nothing to report is not "every run complete and whole"."""
    code, _, err = fedram(capsys, "report", tmp_path, "--strict")
    assert code == 1 and f"{tmp_path} holds no run folders" in err and "--strict" in err
    assert fedram(capsys, "report", tmp_path)[0] == 0


def test_a_time_section_runs_through_the_message_api(tmp_path: Path, capsys) -> None:
    """``--api message`` runs a timed scenario (once refused) to the legacy API's rows."""
    speeds = {"compute_ms_per_sample": {"median": 20.0}, "bandwidth_kbps": {"median": 1e3}}
    scenario = write_scenario(tmp_path, time={"speeds": speeds}, sweep=None, rounds=2)
    runs = {}
    for api in ("legacy", "message"):
        code, _, err = fedram(capsys, "run", scenario, "--api", api, "--out", tmp_path / api)
        assert code == 0, err
        (folder,) = (tmp_path / api).glob("*/*/seed*")
        runs[api] = RunDirectory(folder)
    rows = [without_timings(run.read_metrics()) for run in runs.values()]
    assert rows[0] == rows[1]
    clocks = [[r["sim-seconds"] for r in run.read_metrics()[1:]] for run in runs.values()]
    assert clocks[0] == clocks[1] and clocks[0][-1] > 0


def test_show_prints_the_resolved_scenario_and_its_variants(tmp_path: Path, capsys) -> None:
    code, out, _ = fedram(capsys, "show", write_scenario(tmp_path))
    assert code == 0
    body, _, tail = out.partition("variant: ")
    shown = yaml.safe_load(body)
    assert shown["name"] == "tiny-gaussian" and shown["rounds"] == 6
    assert shown["availability"]["params"]["rho"] == [0.5, 0.4, 0.1]
    assert shown["sweep"] == {"algorithm.alpha": [1.0, 0.1]}
    assert ("variant: " + tail).splitlines() == [f"variant: {label}" for label in LABELS]


def test_report_tabulates_every_variant_of_the_runs(tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    code, run_stdout, err = fedram(capsys, "run", write_scenario(tmp_path), "--out", out)
    assert code == 0, err
    root = out / "tiny-gaussian"
    code, report, err = fedram(capsys, "report", root)
    assert code == 0 and f"wrote {root / 'report.md'}" in err
    assert report.strip() == (root / "report.md").read_text().strip() == run_stdout.strip()
    assert report.startswith(f"# Results under {root}")
    rows = [line.split("|")[1:3] for line in report.splitlines() if line.startswith("| alpha=")]
    # One row per variant in each table, one seed each.
    assert sorted({label.strip() for label, _ in rows}) == sorted(LABELS)
    assert all(seeds.strip() == "1" for _, seeds in rows)
    assert len(rows) % 2 == 0 and len(rows) >= 4


@pytest.mark.parametrize(
    "api, strategy, method",
    [("legacy", FedCVaRAvg, "aggregate_fit"), ("message", MessageFedCVaRAvg, "aggregate_train")],
)
def test_a_failed_run_is_reported_and_the_sweep_goes_on(
    tmp_path: Path, capsys, monkeypatch, api: str, strategy: type, method: str
) -> None:
    real, calls = getattr(strategy, method), []

    def boom(self, server_round, *replies):  # breaks the first run only
        calls.append(server_round)
        if len(calls) == 1:
            raise RuntimeError(f"aggregation broke in round {server_round}")
        return real(self, server_round, *replies)

    monkeypatch.setattr(strategy, method, boom)
    out = tmp_path / "runs"
    code, stdout, err = fedram(capsys, "run", write_scenario(tmp_path), "--out", out, "--api", api)
    assert code == 1
    root = out / "tiny-gaussian"
    run = RunDirectory(root / LABELS[0] / "seed0")
    status = json.loads((run.path / "status.json").read_text())
    assert status["status"] == "failed"
    assert status["error"] == "RuntimeError: aggregation broke in round 1"
    assert "boom" in status["traceback"]
    assert [r["round"] for r in run.read_metrics()] == [0]
    # the next variant still ran; the failure is named at the end and in the report
    assert RunDirectory(root / LABELS[1] / "seed0").status() == "complete"
    assert err.strip().splitlines()[-1].startswith("fedram: error: 1 of 2 run(s) failed:")
    assert str(run.path) in err.strip().splitlines()[-1]
    assert f"- {run.path}: failed" in stdout


def test_a_changed_scenario_is_refused_naming_force(tmp_path: Path, capsys) -> None:
    scenario, out = write_scenario(tmp_path), tmp_path / "runs"
    args = ["run", scenario, "--out", out, "--variant", "alpha=0.1"]
    assert fedram(capsys, *args)[0] == 0
    run = RunDirectory(out / "tiny-gaussian" / "alpha=0.1" / "seed0")
    metrics = run.metrics_path.read_bytes()
    code, stdout, err = fedram(capsys, *args, "--set", "rounds=3", "--set", "training.lr=0.5")
    assert code == 2 and stdout == ""
    assert "--force" in err and str(run.path) in err
    assert "rounds: 6 -> 3" in err and "training.lr: 0.05 -> 0.5" in err
    assert run.metrics_path.read_bytes() == metrics  # nothing was run
    # the same scenario again: skipped; --force: rerun with the new settings
    code, _, err = fedram(capsys, *args)
    assert code == 0 and "complete, skipped" in err and "other code" not in err
    code, _, err = fedram(capsys, *args, "--set", "rounds=3", "--force")
    assert code == 0 and [r["round"] for r in run.read_metrics()] == [0, 1, 2, 3]
    assert fedram(capsys, *args, "--set", "rounds=3")[2].count("complete, skipped") == 1


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process holding ``folder``'s run lock until its stdin closes."""
    code = (
        "import sys; from fedram_flwr.rundir.outputs import RunDirectory\n"
        f"with RunDirectory({str(folder)!r}).lock():\n"
        "    print('locked', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_writer_fails_at_once_naming_the_folder_and_pid(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr("fedram_flwr.cli.commands.write_report", stub_report)
    scenario, out = write_scenario(tmp_path), tmp_path / "runs"
    folder = out / "tiny-gaussian" / "alpha=0.1" / "seed0"
    holder = hold_lock(folder)
    try:
        code, _, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.1")
    finally:
        holder.stdin.close()
        holder.wait()
    assert code == 1
    assert f"run folder {folder.resolve()} is being written by another run (pid {holder.pid}" in err
    assert not (folder / "status.json").exists() and not (folder / "metrics.jsonl").exists()
    code, _, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.1")
    assert code == 0 and RunDirectory(folder).status() == "complete"


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda d: d.metrics_path.write_text(d.metrics_path.read_text()[:-9]), "metrics.jsonl"),
        (lambda d: (d.path / "summary.json").unlink(), "summary.json"),
        (lambda d: (d.path / "scenario.yaml").write_text("rounds: [6\n"), "scenario.yaml"),
        (lambda d: (d.path / "summary.json").write_text("{"), "summary.json"),
        (lambda d: (d.path / "summary.json").write_text("garbage"), "summary.json"),
        (
            lambda d: (d.path / "summary.json").write_text('{"final": 5}'),
            "summary.json's 'final' is not an object of metrics",
        ),
        (lambda d: (d.path / "final_model.npz").unlink(), "final_model.npz is missing"),
        (
            lambda d: (d.path / "final_model.npz").write_bytes(b"PK\x03\x04 garbage"),
            "final_model.npz is unreadable",
        ),
        (lambda d: append(d.metrics_path, "garbage\n"), "metrics.jsonl is truncated or garbled"),
        (
            lambda d: append(d.metrics_path, d.metrics_path.read_text().splitlines()[-1] + "\n"),
            "metrics.jsonl has rounds out of order or twice",
        ),
        (lambda d: keep_rows(d, lambda rows: rows[:2] + rows[4:]), "metrics.jsonl lacks rounds 2"),
        (lambda d: keep_rows(d, lambda rows: rows[3:]), "metrics.jsonl starts at round 3, not 0"),
        (
            lambda d: keep_rows(d, lambda rows: [*rows[:3], '{"round": 3}\n', *rows[4:]]),
            "metrics.jsonl's round 3 has no evaluation (eval_every 3",
        ),
    ],
)
def test_a_damaged_complete_run_is_reported_and_redone(
    complete_run: tuple[Path, Path], tmp_path: Path, capsys, damage, why: str
) -> None:
    """A complete run whose files are missing or garbled is listed apart by the report
    (stderr too; ``--strict``: exit 1) and run again by ``fedram run``, never skipped."""
    scenario, built = complete_run
    out = tmp_path / "runs"
    shutil.copytree(built, out)  # the module's complete run, damaged here
    args = ["run", scenario, "--out", out, "--variant", "alpha=0.1"]
    run = RunDirectory(out / "tiny-gaussian" / "alpha=0.1" / "seed0")
    rows = without_timings(run.read_metrics())
    damage(run)
    code, report, err = fedram(capsys, "report", out / "tiny-gaussian")
    damaged = report.split("## Damaged runs")[-1]
    assert code == 0 and "## Damaged runs" in report and f"- {run.path}: {why}" in damaged
    assert "1 damaged run(s)" in err and f"{run.path}: {why}" in err
    code, _, err = fedram(capsys, "report", out / "tiny-gaussian", "--strict")
    assert code == 1 and "--strict: not every run is complete and whole" in err
    code, _, err = fedram(capsys, *args)
    assert code == 0 and f"complete but damaged ({why}" in err and "skipped" not in err
    assert run.damage() is None and without_timings(run.read_metrics()) == rows
    assert fedram(capsys, "report", out / "tiny-gaussian", "--strict")[0] == 0


@pytest.mark.parametrize("force", [False, True])
def test_a_folder_at_status_json_is_replaced_by_a_rerun(
    complete_run: tuple[Path, Path], tmp_path: Path, capsys, force: bool
) -> None:
    """``status.json`` a folder (nothing could write the status over it): the report
    lists the run as missing, a rerun says what is there and starts the run over, with
    or without ``--force``; the run ends complete and whole."""
    scenario, built = complete_run
    out = tmp_path / "runs"
    shutil.copytree(built, out)
    run = RunDirectory(out / "tiny-gaussian" / "alpha=0.1" / "seed0")
    rows = without_timings(run.read_metrics())
    (run.path / "status.json").unlink()
    (run.path / "status.json").mkdir()
    (run.path / "status.json" / "inside").write_text("x")
    code, _, err = fedram(capsys, "report", out / "tiny-gaussian", "--strict")
    assert code == 1 and f"{run.path}: missing" in err
    args = ["run", scenario, "--out", out, "--variant", "alpha=0.1", *(["--force"] * force)]
    code, _, err = fedram(capsys, *args)
    assert code == 0, err
    if not force:
        assert f"{run.path / 'status.json'} is a folder, running it again" in err
    assert run.status() == "complete" and run.damage() is None
    assert without_timings(run.read_metrics()) == rows


def test_a_complete_run_without_its_fingerprint_is_skipped_saying_so(
    complete_run: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    scenario, built = complete_run
    out = tmp_path / "runs"
    shutil.copytree(built, out)
    run = RunDirectory(out / "tiny-gaussian" / "alpha=0.1" / "seed0")
    (run.path / "fingerprint.json").unlink()
    code, _, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.1")
    assert code == 0 and "complete, skipped (without fingerprint.json the code" in err
    assert "made by other code" not in err


def keep_rows(run: RunDirectory, keep) -> None:
    """``metrics.jsonl`` holds ``keep(its lines)``: rows deleted in the middle, at the
    start (the file deleted while the run went on, and made anew), or changed."""
    run.metrics_path.write_text("".join(keep(run.metrics_path.read_text().splitlines(True))))


def append(path: Path, text: str) -> None:
    with path.open("a") as fh:
        fh.write(text)


@pytest.mark.parametrize("damage", ["missing", "garbled"])
def test_a_complete_runs_plot_inputs_are_written_again(
    complete_run: tuple[Path, Path], tmp_path: Path, capsys, damage: str
) -> None:
    """``plot_inputs.npz`` is rebuilt from the run's scenario and final model (Flower's
    engines leave it to the CLI): missing or garbled, the report writes it again and the
    run stays complete; a garbled one is named."""
    _, built = complete_run
    out = tmp_path / "runs"
    shutil.copytree(built, out)
    run = RunDirectory(out / "tiny-gaussian" / "alpha=0.1" / "seed0")
    whole = run.read_plot_inputs()
    path = run.path / "plot_inputs.npz"
    path.unlink() if damage == "missing" else path.write_bytes(b"PK\x03\x04 garbage")
    code, _, err = fedram(capsys, "report", out / "tiny-gaussian", "--strict")
    assert code == 0 and ("plot_inputs.npz was unreadable" in err) == (damage == "garbled")
    again = run.read_plot_inputs()
    assert sorted(again) == sorted(whole)
    assert all(np.array_equal(again[k], whole[k]) for k in whole)


def test_a_dead_run_reads_interrupted_and_is_run_again(tmp_path: Path, capsys) -> None:
    scenario, out = write_scenario(tmp_path), tmp_path / "runs"
    folder = out / "tiny-gaussian" / "alpha=0.1" / "seed0"
    code = (
        "import os, signal; from fedram_flwr.rundir.outputs import RunDirectory\n"
        f"RunDirectory({str(folder)!r}).start({{'rounds': 6}}, 0, engine='in-process')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == -signal.SIGKILL
    assert json.loads((folder / "status.json").read_text())["status"] == "running"
    assert RunDirectory(folder).status() == "interrupted"
    code, report, _ = fedram(capsys, "report", out / "tiny-gaussian")
    assert code == 0 and f"- {folder}: interrupted" in report
    code, _, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.1")
    assert code == 0 and "interrupted, running it again" in err
    assert RunDirectory(folder).status() == "complete"


SIGTERM_IN_ROUND_2 = """
import os, signal, sys
from fedram_flwr.cli.commands import main
import fedram_flwr.message_api, fedram_flwr.strategies

def run_until_sigterm(api, module, method, argv):
    strategy = getattr(sys.modules[module], "FedCVaRAvg")
    real = getattr(strategy, method)
    def step(self, rnd, *rest):
        if rnd == 2:
            signal.raise_signal(signal.SIGTERM)  # handled before it returns
        return real(self, rnd, *rest)
    setattr(strategy, method, step)
    sys.exit(main([*argv, "--api", api]))
"""


def test_sigterm_in_process_leaves_failed(tmp_path: Path) -> None:
    """SIGTERM in round 2 of an in-process run, through either API (each run in a
    process of its own, forked from one interpreter): exit 143, the run marked failed."""
    scenario = write_scenario(tmp_path)
    apis = {
        "legacy": ("fedram_flwr.strategies", "aggregate_fit"),
        "message": ("fedram_flwr.message_api", "aggregate_train"),
    }
    calls = [
        f"run_until_sigterm({api!r}, {module!r}, {method!r}, "
        f"['run', {str(scenario)!r}, '--out', {str(tmp_path / api)!r}, '--variant', 'alpha=0.1'])"
        for api, (module, method) in apis.items()
    ]
    ends, err = run_forked(SIGTERM_IN_ROUND_2, calls)
    assert ends == [128 + signal.SIGTERM] * 2, err[-2000:]
    for api in apis:
        run = tmp_path / api / "tiny-gaussian" / "alpha=0.1" / "seed0"
        status = json.loads((run / "status.json").read_text())
        assert status["status"] == "failed" and status["error"] == "SystemExit: 143", api


@pytest.mark.parametrize("name", ["..", "../elsewhere", "a/b", ""])
def test_a_scenario_name_cannot_leave_out(tmp_path: Path, capsys, name: str) -> None:
    out = tmp_path / "deep" / "runs"
    code, _, err = fedram(capsys, "run", write_scenario(tmp_path, name=name), "--out", out)
    assert code == 2 and err.startswith("fedram: error: ") and "name: " in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


def test_a_run_nobody_trained_warns_in_its_summary_and_report_row(tmp_path: Path, capsys) -> None:
    availability = {"oracle": "bernoulli", "params": {"p": [0.0, 0.0, 0.0]}}
    scenario = write_scenario(tmp_path, availability=availability)
    out = tmp_path / "runs"
    code, report, err = fedram(capsys, "run", scenario, "--out", out, "--variant", "alpha=0.1")
    assert code == 0, err
    run = RunDirectory(out / "tiny-gaussian" / "alpha=0.1" / "seed0")
    assert run.read_summary()["warnings"] == ["no client trained in any round"]
    row = next(line for line in report.splitlines() if line.startswith("| alpha=0.1"))
    assert row.rstrip(" |").endswith("no client trained in any round (1 of 1)")


# ------------------------------------------------- bad input: exit 2, no traceback
GOOD = yaml.safe_dump(TINY_GAUSSIAN, sort_keys=False)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("rounds: [1, 2\nname: x\n", "line 2"),  # YAML syntax error
        ("rounds: 6\ndata:\n\tnum_clients: 3\n", "tabs"),
        ("name: caf\xe9\n".encode("latin-1"), "not UTF-8"),
        (GOOD + "rounds: 7\n", "duplicate key 'rounds'"),
        (yaml.safe_dump({**TINY_GAUSSIAN, "data": None}), "data: expected a mapping"),
        (GOOD.replace("cluster_std: 0.6", "cluster_std: -0.6"), "data.cluster_std"),
        (GOOD.replace("seeds:\n- 0", "seeds:\n- -1"), "seeds[0]"),
        (GOOD.replace("seeds:\n- 0", f"seeds:\n- {2**70}"), "seeds[0]"),
        (
            yaml.safe_dump(
                {
                    "rounds": 3,
                    "data": {"dataset": "gaussian2d", "num_clients": 10**10},
                    "availability": {"oracle": "bernoulli", "params": {"p_min": 0.5}},
                }
            ),
            "data.num_clients",  # was a MemoryError building 10**10 probabilities
        ),
    ],
    ids=[
        "syntax",
        "tab",
        "latin-1",
        "duplicate-key",
        "data-null",
        "negative-cluster-std",
        "negative-seed",
        "seed-2**70",
        "num-clients-1e10",
    ],
)
def test_malformed_scenario_exits_2_naming_the_file_or_field(
    tmp_path: Path, capsys, text: str | bytes, named: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "runs"
    code, stdout, err = fedram(capsys, "run", path, "--out", out)
    assert code == 2, err
    assert err.startswith("fedram: error: ") and named in err and str(path) in err
    assert len(err) < 400 and stdout == "" and not out.exists()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--seeds", "-1"], "seeds[0]"),
        (["--seeds", str(2**32)], "seeds[0]"),
        (
            [
                "--set",
                "data.num_clients=1000000",
                "--set",
                "availability={oracle: bernoulli}",
                "--set",
                "data.client_classes=null",
            ],
            "data.num_clients",
        ),
        (["--set", "hcvar_alpha=[0.1, 0.2"], "override hcvar_alpha: invalid YAML"),
        (["--set", "algorithm={a: 1, a: 2}"], "duplicate key 'a'"),
        (["--ray-address", "127.0.0.1:1"], "--ray-address needs --engine flwr"),
        (["--ray", "--engine", "flwr"], "--ray fans out in-process runs"),
        (["--ray", "nowhere"], "--ray 'nowhere': expected a Ray head node's HOST:PORT"),
        (["--ray", "127.0.0.1:1"], "--ray 127.0.0.1:1: no Ray cluster answers there"),
    ],
)
def test_bad_command_line_values_exit_2_naming_the_field(
    tmp_path: Path, capsys, argv: list[str], named: str
) -> None:
    out = tmp_path / "runs"
    code, stdout, err = fedram(capsys, "run", write_scenario(tmp_path), "--out", out, *argv)
    assert code == 2
    assert err.startswith("fedram: error: ") and named in err and len(err) < 400
    assert stdout == "" and not out.exists()


@pytest.mark.parametrize("out", ["file", "file/runs"])
def test_out_pointing_at_a_file_exits_2(tmp_path: Path, capsys, out: str) -> None:
    (tmp_path / "file").write_text("not a folder\n")
    code, _, err = fedram(capsys, "run", write_scenario(tmp_path), "--out", tmp_path / out)
    assert code == 2
    assert err.startswith("fedram: error: --out ") and "is a file" in err


def test_unwritable_data_root_exits_2_naming_it(tmp_path: Path, capsys, no_data_env) -> None:
    """MNIST is not under data.root and data.root cannot be created (a file is in the
    way): the run fails naming data.root, not with a traceback."""
    (tmp_path / "file").write_text("not a folder\n")
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw["data"] = {"dataset": "mnist", "num_clients": 3, "root": str(tmp_path / "file" / "d")}
    raw["availability"] = {"oracle": "ram", "params": {"rho": [0.5, 0.4, 0.1]}}
    path = tmp_path / "mnist.yaml"
    path.write_text(yaml.safe_dump(raw))
    code, _, err = fedram(capsys, "run", path, "--out", tmp_path / "runs")
    assert code == 2
    assert err.splitlines()[-1].startswith("fedram: error: data.root: mnist is not under ")
    assert str(tmp_path / "file") in err and "Traceback" not in err


def test_set_takes_any_yaml_value_commas_included(tmp_path: Path, capsys, monkeypatch) -> None:
    """``--set 'hcvar_alpha=[0.1, 0.2, 0.3]'`` (one per client) reaches the run."""
    monkeypatch.setattr("fedram_flwr.cli.commands.write_report", stub_report)
    scenario, runs = write_scenario(tmp_path), tmp_path / "runs"
    sets = ["--set", "hcvar_alpha=[0.1, 0.2, 0.3]", "--set", "description=a, b"]
    code, _, err = fedram(capsys, "run", scenario, "--out", runs, "--variant", LABELS[1], *sets)
    assert code == 0, err
    written = RunDirectory(runs / "tiny-gaussian" / LABELS[1] / "seed0").scenario()
    assert written["hcvar_alpha"] == [0.1, 0.2, 0.3] and written["description"] == "a, b"


def test_set_on_a_swept_field_replaces_the_sweep(tmp_path: Path, capsys, monkeypatch) -> None:
    """The sweep is over algorithm.alpha in [1.0, 0.1]; ``--set algorithm.alpha=0.5``
    runs alpha 0.5 alone (one variant, ``default``), not the sweep's two."""
    monkeypatch.setattr("fedram_flwr.cli.commands.write_report", stub_report)
    runs = tmp_path / "runs"
    argv = ["run", write_scenario(tmp_path), "--out", runs, "--set", "algorithm.alpha=0.5"]
    code, _, err = fedram(capsys, *argv)
    assert code == 0, err
    assert "1 run(s)" in err
    assert sorted(p.name for p in (runs / "tiny-gaussian").iterdir() if p.is_dir()) == ["default"]
    written = RunDirectory(runs / "tiny-gaussian" / "default" / "seed0").scenario()
    assert written["algorithm"]["params"]["alpha"] == 0.5 and written["sweep"] == {}


def test_a_run_made_through_the_other_api_is_run_again(tmp_path: Path, capsys) -> None:
    """The API is in the fingerprint, not the path: a legacy-complete run is not skipped
    for ``--api message`` (and the same model comes out of both)."""
    scenario, out = write_scenario(tmp_path), tmp_path / "runs"
    args = ["run", scenario, "--out", out, "--variant", "alpha=0.1"]
    run = RunDirectory(out / "tiny-gaussian" / "alpha=0.1" / "seed0")
    assert fedram(capsys, *args, "--api", "legacy")[0] == 0
    legacy = run.read_final_model()
    assert run.api() == "legacy"
    assert "complete, skipped" in fedram(capsys, *args)[2]  # in-process default: legacy
    code, _, err = fedram(capsys, *args, "--api", "message")
    assert code == 0 and "complete with the legacy API, running it again" in err
    assert run.api() == "message"
    for a, b in zip(legacy, run.read_final_model(), strict=True):
        np.testing.assert_array_equal(a, b)
    code, _, err = fedram(capsys, *args, "--api", "message")
    assert code == 0 and "complete, skipped" in err


@pytest.mark.parametrize("api", ["legacy", "message"])
def test_a_run_whose_clients_all_fail_stops_failed_quoting_the_first_error(
    tmp_path: Path, capsys, caplog, api: str
) -> None:
    """Every client diverges to NaN in every round (a step size of 3e38). Was: the run
    completed, exit 0, its NaN model saved as the final model."""
    scenario = write_scenario(tmp_path, **{"training.lr": 3e38, "max_failed_rounds": 2})
    out = tmp_path / "runs"
    argv = ("run", scenario, "--out", out, "--variant", "alpha=0.1", "--api", api)
    with caplog.at_level(logging.WARNING, logger="flwr"):
        code, _, err = fedram(capsys, *argv)
    assert code == 1
    run = RunDirectory(out / "tiny-gaussian" / "alpha=0.1" / "seed0")
    status = json.loads((run.path / "status.json").read_text())
    assert status["status"] == "failed"
    error = status["error"]
    assert error.startswith("FailedRoundsError: 2 rounds in a row (1..2) trained nothing")
    assert "first error (round 1): " in error and "non-finite update" in error
    assert "round 1: no update aggregated: 1 of 1 selected clients failed" in caplog.text
    assert "(FailedRoundsError)" in err.strip().splitlines()[-1]
    assert not (run.path / "final_model.npz").exists()


def test_python_m_runs_the_command_line() -> None:
    """``python -m fedram_flwr.cli`` is the ``fedram`` command (the engines' tests and
    scripts/results_unchanged.py start it this way)."""
    shown = subprocess.run(
        [sys.executable, "-m", "fedram_flwr.cli", "show", "scenarios/demo.yaml"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("name: demo")
