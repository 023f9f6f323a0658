"""A run's watchdog stops the run's processes when its driver dies (its pipe closes
without the driver's word), and an orphaned ServerApp cannot mark a run complete (no
Flower process is started here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from fedram_flwr.engines.flwr.processes import TOKEN_ENV
from fedram_flwr.engines.flwr.watchdog import OWNER_ENV, OwnedRunDirectory, Watchdog, owner_id
from fedram_flwr.rundir.outputs import RunDirectory


def start_run(tmp_path: Path) -> tuple[str, subprocess.Popen, Path, RunDirectory]:
    """A pretend run: a process carrying its token in a session of its own (as Flower's
    SuperExecs are), its FLWR_HOME and its run directory, ``running``."""
    token = uuid.uuid4().hex
    proc = subprocess.Popen(
        ["sleep", "120"], env={**os.environ, TOKEN_ENV: token}, start_new_session=True
    )
    home = tmp_path / "home"
    home.mkdir()
    run = RunDirectory(tmp_path / "run")
    (run.path / "flwr-logs").mkdir(parents=True)
    run.set_status("running", engine="flwr")
    return token, proc, home, run


def dismiss(watchdog: Watchdog, *, word: bool) -> None:
    """Close the watchdog's pipe, with the driver's word or (a driver that died) without."""
    if word:
        watchdog.release(timeout=60)
        return
    os.close(watchdog._write)  # what the kernel does when the driver dies
    os.waitpid(watchdog.pid, 0)


def test_a_dead_driver_s_run_is_stopped_and_marked_failed(tmp_path: Path) -> None:
    token, proc, home, run = start_run(tmp_path)
    try:
        dismiss(Watchdog(token, home, run.path), word=False)
        assert proc.wait(timeout=60) == -signal.SIGTERM
    finally:
        proc.kill()
    assert not home.exists()
    status = json.loads((run.path / "status.json").read_text())
    assert status["status"] == "failed" and status["error"].startswith("interrupted:")
    record = json.loads((run.path / "flwr-logs" / "watchdog.json").read_text())
    assert record["driver"] == os.getpid() and record["survivors"] == []
    assert [p["pid"] for p in record["stopped"]] == [proc.pid]


def test_a_released_watchdog_leaves_everything_alone(tmp_path: Path) -> None:
    token, proc, home, run = start_run(tmp_path)
    try:
        dismiss(Watchdog(token, home, run.path), word=True)
        assert proc.poll() is None and home.is_dir() and run.status() == "running"
        assert not (run.path / "flwr-logs" / "watchdog.json").exists()
    finally:
        proc.kill()
        proc.wait()


def test_an_orphaned_server_app_cannot_complete_its_run(tmp_path: Path) -> None:
    driver = subprocess.Popen(["sleep", "120"])
    owner = owner_id(driver.pid)
    driver.kill()
    driver.wait()
    orphan = OwnedRunDirectory(tmp_path / "orphan", env={OWNER_ENV: owner})
    orphan.path.mkdir()
    with pytest.raises(RuntimeError, match="orphaned"):
        orphan.set_status("complete")
    assert orphan.status() == "failed"
    for env in ({OWNER_ENV: owner_id()}, {}):  # a live driver; ``flwr run .`` by hand
        run = OwnedRunDirectory(tmp_path / f"run{len(env)}", env=env)
        run.path.mkdir()
        run.set_status("complete")
        assert run.status() == "complete"
