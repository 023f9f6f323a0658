"""The in-process engine and Flower's Simulation Engine (real ``flwr run .``) agree.

Each case runs a 6-round Fig. 2a scenario (K=3, RAM, Fed-CVaR-Avg, logistic regression)
with both engines and compares the final global arrays and the relayed clients per
round. Relaying one client per round makes the two runs the same computation, and the
strategy aggregates m > 1 clients in partition order, so the models agree exactly (no
tolerance). The two ``flwr run`` runs go in parallel (own SuperLinks, ports and
FLWR_HOMEs), which also checks that they do not collide; afterwards no Flower or Ray
process they started may be left.

SIGKILL of ``fedram run --engine flwr`` / ``--engine deployment`` mid-run: every process
the run started dies with it and the run is never marked complete.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.app_config import APP_ROOT
from fedram_flwr.engines.flwr.processes import TOKEN_ENV, has_env, process_table
from fedram_flwr.outputs import RunDirectory
from tests.helpers import (
    RUN_LIMIT_S,
    SEED,
    assert_nothing_left,
    final_arrays,
    flower_processes,
    relayed,
    run_both_engines,
)

ORPHAN_LIMIT_S = 300
"""How long the processes of a SIGKILLed run may take to die: a hang guard, never a speed
check (they die within seconds)."""

pytestmark = pytest.mark.flwr

CASES: dict[str, dict[str, Any]] = {
    "one-relayed": {},
    "two-relayed": {"clients_per_round": 2},
}


def write_scenario(tmp_path: Path, name: str, availability_params: dict[str, Any]) -> Path:
    """Fig. 2a's scenario shrunk to 6 rounds (evaluated every 3), one seed, no sweep."""
    raw = yaml.safe_load((APP_ROOT / "scenarios" / "fig2a_gaussian_3users.yaml").read_text())
    raw.pop("sweep", None)
    raw.update(name=name, rounds=6, eval_every=3, seeds=[SEED])
    raw["availability"]["params"].update(availability_params)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_in_process_and_flwr_engines_agree(tmp_path: Path) -> None:
    scenarios = {name: write_scenario(tmp_path, name, p) for name, p in CASES.items()}
    local, flwr = run_both_engines(scenarios, tmp_path)

    for name in CASES:
        a, b = local[name], flwr[name]
        assert a.status() == b.status() == "complete"
        assert b.scenario()["name"] == name
        seq_a, seq_b = relayed(a), relayed(b)
        assert len(seq_a) == 6
        assert seq_a == seq_b, f"{name}: relayed clients differ"
        m = CASES[name].get("clients_per_round", 1)
        assert all(len(ids) == m for _, ids in seq_a)
        arrays_a, arrays_b = final_arrays(a), final_arrays(b)
        assert len(arrays_a) == len(arrays_b)
        for x, y in zip(arrays_a, arrays_b):
            assert x.dtype == y.dtype and x.shape == y.shape
            # Exact: same client computation, same aggregation order.
            np.testing.assert_array_equal(x, y, err_msg=f"{name}: final models differ")


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
