"""One writer per run directory (fedram_flwr/rundir/lock.py): the driver's lock, a writer
in another process (Flower's ServerApp) checking the driver's token before each write,
and the Flower engine's driver holding the lock and passing its token."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli
import yaml

from fedram_flwr.engines import run_with_flwr
from fedram_flwr.rundir import RunDirectory, RunDirectoryBusy, lock_held, lock_holder
from tests.helpers import TINY_GAUSSIAN


def in_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def lock_in_child(folder: str | Path) -> subprocess.CompletedProcess:
    """Another process trying to take ``folder``'s lock."""
    return in_child(
        "from fedram_flwr.rundir import RunDirectory\n"
        f"RunDirectory({str(folder)!r}).lock().__enter__()"
    )


def hold(folder: Path) -> tuple[subprocess.Popen, str]:
    """A driver in another process holding ``folder``'s lock until its stdin closes;
    (the process, its token)."""
    code = (
        "import sys; from fedram_flwr.rundir import RunDirectory\n"
        f"with RunDirectory({str(folder)!r}).lock() as token:\n"
        "    print(token, flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    return proc, proc.stdout.readline().strip()


def release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait()


def test_the_lock_is_reentrant_in_a_process_and_exclusive_across_processes(
    tmp_path: Path,
) -> None:
    run = RunDirectory(tmp_path / "r")
    assert lock_held(run.path) is None  # no lock file yet
    with run.lock() as token, run.lock() as again:
        assert token == again == run.held_token() and lock_held(run.path)
        assert lock_holder(run.path)["pid"] == os.getpid()
        child = lock_in_child(run.path)
        assert child.returncode != 0
        assert f"is being written by another run (pid {os.getpid()}" in child.stderr
    assert lock_held(run.path) is False and run.held_token() == ""


def test_a_serverapp_writes_only_under_its_drivers_lock(tmp_path: Path) -> None:
    folder = tmp_path / "r"
    driver, token = hold(folder)
    try:
        writer = RunDirectory(folder)
        with pytest.raises(RunDirectoryBusy, match=f"pid {driver.pid}"):
            writer.start({"rounds": 1}, 0, engine="flwr", token="not-the-drivers")
        writer.start({"rounds": 1}, 0, engine="flwr", token=token)
        writer.append_metrics({"round": 0})
        assert writer.status() == "running"
    finally:
        release(driver)
    # the driver is gone: its orphaned writer can neither record nor mark complete
    assert writer.status() == "interrupted"
    with pytest.raises(RunDirectoryBusy, match="no longer holds its lock"):
        writer.append_metrics({"round": 1})
    with pytest.raises(RunDirectoryBusy, match="no longer holds its lock"):
        writer.set_status("complete")
    assert writer.read_metrics() == [{"round": 0}]


def test_a_serverapp_without_a_token_takes_the_lock_itself(tmp_path: Path) -> None:
    code = (
        "import sys; from fedram_flwr.rundir import RunDirectory\n"
        f"RunDirectory({str(tmp_path)!r}).start({{'rounds': 1}}, 0, engine='flwr')\n"
        "print('started', flush=True); sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "started"
        assert lock_holder(tmp_path)["pid"] == proc.pid and lock_held(tmp_path)
        with (
            pytest.raises(RunDirectoryBusy, match=f"pid {proc.pid}"),
            RunDirectory(tmp_path).lock(),
        ):
            pass
    finally:
        release(proc)


class FakeFederation:
    """A Federation without Flower: nothing to start or stop."""

    def __init__(self, engine: str, num_supernodes: int, logs: Path, **kw) -> None:
        self.engine, self.timing, self.ray_address = engine, {}, None

    def start(self, deadline: float) -> None:
        pass

    def describe(self) -> str:
        return f"{self.engine} without Flower"

    def stop(self) -> list:
        return []


class FakeFlwrRun:
    """FlwrRun without Flower: its ``run`` plays a second driver and then the ServerApp,
    each in a process of its own, as ``flwr run`` would start it."""

    seen: dict[str, str] = {}

    def __init__(self, federation: FakeFederation, out: RunDirectory, timeout: float, **kw):
        self.out, self.timing = out, {}
        self.deadline = time.monotonic() + timeout

    def run(self, app: Path, run_config: Path) -> None:
        config = tomli.loads(run_config.read_text())
        folder = config["run-dir"]
        second = lock_in_child(folder)
        FakeFlwrRun.seen["second driver"] = second.stderr
        token = config["run-token"]
        FakeFlwrRun.seen["wait-timeout"] = config["wait-timeout"]
        server_app = in_child(
            "from fedram_flwr.rundir import RunDirectory\n"
            f"d = RunDirectory({folder!r})\n"
            f"d.start({{'rounds': 0}}, 0, engine='flwr', token={token!r})\n"
            "d.append_metrics({'round': 0}); d.set_status('complete')\n"
        )
        assert server_app.returncode == 0, server_app.stderr

    def end(self, *, shared: bool) -> None:
        pass


def test_the_flower_driver_holds_the_lock_and_gives_the_serverapp_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fedram_flwr.engines.flwr.run.FlwrRun", FakeFlwrRun)
    monkeypatch.setattr("fedram_flwr.engines.flwr.run.Federation", FakeFederation)
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump(TINY_GAUSSIAN))
    out = run_with_flwr(scenario, 0, tmp_path / "run", stage=False, timeout=900)
    assert out.status() == "complete" and out.read_metrics() == [{"round": 0}]
    # the SuperNodes are watched by the driver: the oracle may wait the run's whole limit
    assert 800 < FakeFlwrRun.seen["wait-timeout"] <= 900
    assert f"being written by another run (pid {os.getpid()}" in FakeFlwrRun.seen["second driver"]
    assert lock_held(out.path) is False  # released when the run ended
