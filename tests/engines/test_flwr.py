"""SIGKILL of ``fedram run --engine flwr`` / ``--engine deployment`` mid-run: every process
the run started dies with it and the run is never marked complete (the breadth tier).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedram_flwr.engines.flwr.processes import TOKEN_ENV, has_env, process_table
from fedram_flwr.registry.app_config import APP_ROOT
from fedram_flwr.rundir.outputs import RunDirectory
from tests.helpers import (
    RUN_LIMIT_S,
    SEED,
    assert_nothing_left,
    flower_processes,
)

ORPHAN_LIMIT_S = 300
"""How long the processes of a SIGKILLed run may take to die: a hang guard, never a speed
check (they die within seconds)."""

pytestmark = [pytest.mark.flwr, pytest.mark.breadth]


def run_token(pid: int) -> str | None:
    """The run token in the environment of a descendant of process ``pid``."""
    table = process_table()
    stack = [p for p, info in table.items() if info.ppid == pid]
    while stack:
        child = stack.pop()
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            environ = []
        for entry in environ:
            if entry.startswith(f"{TOKEN_ENV}=".encode()):
                return entry.split(b"=", 1)[1].decode()
        stack += [p for p, info in table.items() if info.ppid == child]
    return None


def processes_of(token: str) -> dict[int, str]:
    """Live processes (pid -> command) carrying the run's token."""
    return {
        pid: info.cmd
        for pid, info in process_table().items()
        if info.state != "Z" and has_env(pid, TOKEN_ENV, token)
    }


@pytest.mark.parametrize(
    ("engine", "source"),
    [("flwr", "fig2a_gaussian_3users.yaml"), ("deployment", "deployment_fault.yaml")],
)
def test_sigkill_of_fedram_run_leaves_no_flower_process(
    tmp_path: Path, engine: str, source: str
) -> None:
    """Once round 1 is recorded, SIGKILL the ``fedram run`` process: the SuperLink,
    SuperNodes, SuperExecs, apps and Ray die with it (they used to finish the run and
    mark it complete), and the run ends ``failed``."""
    raw = yaml.safe_load((APP_ROOT / "scenarios" / source).read_text())
    raw.pop("sweep", None)
    raw.update(name="killed", rounds=500, eval_every=1, seeds=[SEED])
    path = tmp_path / "killed.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    run = RunDirectory(tmp_path / "runs" / "killed" / "default" / f"seed{SEED}")
    before = flower_processes()
    cmd = [sys.executable, "-m", "fedram_flwr.cli", "run", str(path), "--engine", engine]
    proc = subprocess.Popen(
        [*cmd, "--out", str(tmp_path / "runs")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + RUN_LIMIT_S
        while len(run.read_metrics()) < 2:  # round 0's evaluation and round 1
            assert proc.poll() is None, "fedram run ended before round 1"
            assert time.monotonic() < deadline, "round 1 was not recorded"
            time.sleep(0.5)
        token = run_token(proc.pid)
        assert token is not None
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    # The run's watchdog stops them, then marks the run failed and writes its record.
    record = run.path / "flwr-logs" / "watchdog.json"
    deadline = time.monotonic() + ORPHAN_LIMIT_S
    while (alive := processes_of(token)) or not record.exists():
        assert run.status() != "complete", "an orphaned Flower process completed the run"
        assert time.monotonic() < deadline, f"the run's processes outlived it: {alive}"
        time.sleep(1)
    assert json.loads(record.read_text())["survivors"] == []
    assert run.status() == "failed"
    assert_nothing_left(before, [run])
