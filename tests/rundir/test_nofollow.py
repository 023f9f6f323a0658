"""Run-folder plants: a symbolic link or a FIFO where a run writes
one of its files (run.lock, status.json and its temporary file, metrics.jsonl,
checkpoint.bin, the ``tls`` folder and its keys; and, planted while the run goes on, the
model, the trace, the weights, the summary, the plots and the report) is refused or
replaced, naming it; nothing is written through a link (its target is left as it was)
and nothing blocks on a FIFO."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.engines.flwr.federation import check_options
from fedram_flwr.engines.flwr.tls import TlsFiles, generate_tls_files
from fedram_flwr.rundir import LOCK_FILE, lock_held, lock_holder
from fedram_flwr.rundir.checkpoint import CHECKPOINT_FILE, Checkpoint, write_checkpoint
from fedram_flwr.rundir.nofollow import UnsafePathError
from fedram_flwr.rundir.outputs import RunDirectory
from tests.helpers import TINY_GAUSSIAN

PRECIOUS = "a file outside the run folder\n"


class Blocked(Exception):
    """Not an OSError: code that catches those must not take it for a read error."""


@contextlib.contextmanager
def no_hang(seconds: int = 30) -> Iterator[None]:
    """A test that would block on a FIFO ends with an error instead of hanging the
    suite (a safety net for a regression, never a speed check)."""

    def stop(signum: int, frame: object) -> None:
        raise Blocked("blocked: a FIFO was opened or read")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside any run folder that a planted link points at."""
    path = tmp_path / "victim.txt"
    path.write_text(PRECIOUS)
    return path


def plant_link(folder: Path, name: str, target: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).symlink_to(target)
    return folder / name


# ----------------------------------------------------------------------- the lock
def test_a_run_lock_link_is_refused_and_its_target_kept(tmp_path: Path, victim: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    plant_link(run.path, LOCK_FILE, victim)
    with pytest.raises(UnsafePathError, match=r"run\.lock: a symbolic link \(to .*victim"):
        with run.lock():
            pass
    assert victim.read_text() == PRECIOUS
    assert lock_held(run.path) is False and lock_holder(run.path) == {}


def test_a_run_lock_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    os.mkfifo(run.path / LOCK_FILE)
    with no_hang():
        assert lock_held(run.path) is False and lock_holder(run.path) == {}
        with pytest.raises(UnsafePathError, match="run.lock: a FIFO"):
            with run.lock():
                pass


def test_fedram_run_refuses_a_planted_lock_link_with_exit_2(
    tmp_path: Path, victim: Path, capsys
) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY_GAUSSIAN))
    folder = tmp_path / "runs" / "tiny-gaussian" / "default" / "seed0"
    plant_link(folder, LOCK_FILE, victim)
    code = main(["run", str(scenario), "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 2 and f"fedram: error: {folder / LOCK_FILE}: a symbolic link" in err, err
    assert victim.read_text() == PRECIOUS
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE]  # nothing written


@pytest.mark.parametrize("name", ["final_model.npz", ".weights.npy", "flwr-logs"])
def test_a_link_anywhere_in_the_run_folder_is_refused_before_writing(
    tmp_path: Path, victim: Path, name: str
) -> None:
    run = RunDirectory(tmp_path / "run")
    plant_link(run.path, name, victim)
    with pytest.raises(UnsafePathError, match=f"{name}: a symbolic link"):
        with run.lock():
            pass
    assert victim.read_text() == PRECIOUS and not (run.path / LOCK_FILE).exists()


def test_a_run_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match="run: a symbolic link"):
        with RunDirectory(tmp_path / "run").lock():
            pass
    assert list((tmp_path / "elsewhere").iterdir()) == []


# ---------------------------------------------------------- files written in a run
def test_status_is_never_written_through_a_planted_link(tmp_path: Path, victim: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    with run.lock():
        plant_link(run.path, ".status.json.tmp", victim)  # planted while it runs
        run.set_status("running")
        plant_link(run.path, "summary.json", victim)
        run.write("summary.json", "{}")
        assert run.status() == "running"
    assert victim.read_text() == PRECIOUS
    assert not (run.path / "status.json").is_symlink()
    assert not (run.path / "summary.json").is_symlink()


def test_metrics_are_never_appended_through_a_planted_link(tmp_path: Path, victim: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    with run.lock():
        plant_link(run.path, "metrics.jsonl", victim)
        with pytest.raises(UnsafePathError, match="metrics.jsonl: a symbolic link"):
            run.append_metrics({"round": 1})
    assert victim.read_text() == PRECIOUS


def test_a_status_fifo_reads_missing_without_blocking(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    os.mkfifo(run.path / "status.json")
    with no_hang():
        assert run.status() == "missing"


@pytest.mark.parametrize("name", [CHECKPOINT_FILE, f".{CHECKPOINT_FILE}.tmp"])
def test_a_checkpoint_is_never_written_through_a_planted_link(
    tmp_path: Path, victim: Path, name: str
) -> None:
    plant_link(tmp_path / "run", name, victim)
    saved = Checkpoint(1, "s", "c", 0, "", [b"x"], "numpy.ndarray", {}, {})
    path = write_checkpoint(tmp_path / "run", saved)
    assert victim.read_text() == PRECIOUS
    assert not path.is_symlink() and path.read_bytes().startswith(b"fedram-checkpoint")


# -------------------------------------------------------------------------- TLS
def test_a_tls_folder_link_is_refused_and_no_key_written_there(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "tls").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match="tls: a symbolic link"):
        generate_tls_files(tmp_path / "tls")
    assert list((tmp_path / "elsewhere").iterdir()) == []


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_tls_file_planted_is_refused_without_blocking(
    tmp_path: Path, victim: Path, kind: str
) -> None:
    folder = tmp_path / "tls"
    folder.mkdir()
    if kind == "fifo":
        os.mkfifo(folder / "ca.crt")
    else:
        (folder / "server.key").symlink_to(victim)
    with no_hang(), pytest.raises(UnsafePathError, match="a FIFO|a symbolic link"):
        generate_tls_files(folder)
    assert victim.read_text() == PRECIOUS


def test_tls_keys_are_regular_files_only_their_owner_reads(tmp_path: Path) -> None:
    files = generate_tls_files(tmp_path / "tls")
    assert (files.key.stat().st_mode & 0o777) == 0o600
    again = generate_tls_files(tmp_path / "tls")  # a second run's set-up replaces them
    assert again.ca.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")


def test_tls_inputs_that_are_not_regular_files_are_refused(tmp_path: Path) -> None:
    files = generate_tls_files(tmp_path / "tls")
    os.mkfifo(tmp_path / "ca.fifo")
    bad = TlsFiles(tmp_path / "ca.fifo", files.cert, files.key)
    with no_hang(), pytest.raises(UnsafePathError, match=r"tls\.ca: .*ca\.fifo is a FIFO"):
        check_options("deployment", 2, bad, {})
    with pytest.raises(UnsafePathError, match=r"tls\.key: .*No such file"):
        check_options("deployment", 2, TlsFiles(files.ca, files.cert, tmp_path / "no"), {})
    check_options("deployment", 2, files, {})  # regular files pass


# ------------------------------------------------- links planted while a run goes on
LATE_NAMES = ("final_model.npz", "availability.csv", "weights.npy", "summary.json")
"""What a run writes only after its last round, and what the report writes after it."""
REPORT_NAMES = ("plot_inputs.npz", "accuracy.png", "report.md")


def test_links_planted_while_a_run_goes_on_are_never_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links planted after the run's checks, just before its last round is recorded (at
    every file it writes after that round: the model, the availability trace, the weights,
    the summary), and before the plots and the report are drawn: each file is written
    anew as a regular file in the folder, and not one target outside is touched."""
    from fedram_flwr.engines import run_in_process
    from fedram_flwr.engines.plot_inputs import complete_plot_inputs
    from fedram_flwr.registry import scenario_from_dict
    from fedram_flwr.report import write_report
    from fedram_flwr.report.run_plots import plot_run
    from tests.helpers import tiny_ca_fed_dict

    outside = tmp_path / "outside"
    outside.mkdir()
    targets = {name: outside / name for name in (*LATE_NAMES, *REPORT_NAMES)}
    for target in targets.values():
        target.write_text(PRECIOUS)
    run_dir = tmp_path / "runs" / "tiny" / "seed0"
    rounds = 3
    append = RunDirectory.append_metrics

    def plant_before_the_last_row(self: RunDirectory, row: dict) -> None:
        if row["round"] == rounds:
            for name in LATE_NAMES:
                plant_link(self.path, name, targets[name])
        append(self, row)

    monkeypatch.setattr(RunDirectory, "append_metrics", plant_before_the_last_row)
    scenario = scenario_from_dict(tiny_ca_fed_dict(rounds=rounds))  # CA-Fed: weights.npy
    run = run_in_process(scenario, 0, run_dir, checkpoint_every=0)
    for name in REPORT_NAMES:
        folder = run_dir.parent if name == "report.md" else run_dir
        (folder / name).unlink(missing_ok=True)  # plot_inputs.npz: the run wrote it
        plant_link(folder, name, targets[name])
    complete_plot_inputs(tmp_path / "runs")
    plot_run(run_dir)
    write_report(run_dir.parent)
    untouched = dict.fromkeys(targets, PRECIOUS.encode())
    assert {name: t.read_bytes() for name, t in targets.items()} == untouched
    written = [run_dir / name for name in (*LATE_NAMES, *REPORT_NAMES[:2])]
    for path in [*written, run_dir.parent / "report.md"]:
        assert path.is_file() and not path.is_symlink(), path
    assert run.status() == "complete" and run.damage() is None


@pytest.mark.parametrize("append", [False, True])
def test_a_log_is_never_opened_through_a_planted_link(
    tmp_path: Path, victim: Path, append: bool
) -> None:
    """The Flower engines' logs in ``flwr-logs`` (a process's output, ``flwr run``'s
    relayed lines) open through :func:`open_text`: a link there is refused, its target
    kept; a regular log is truncated, or appended to."""
    from fedram_flwr.rundir.nofollow import open_text

    link = plant_link(tmp_path / "flwr-logs", "flwr-run.log", victim)
    with pytest.raises(UnsafePathError, match="flwr-run.log: a symbolic link"):
        open_text(link, append=append)
    assert victim.read_text() == PRECIOUS
    log = tmp_path / "flwr-logs" / "superlink.log"
    log.write_text("first\n")
    with open_text(log, append=append) as fh:
        fh.write("second\n")
    assert log.read_text() == ("first\nsecond\n" if append else "second\n")
