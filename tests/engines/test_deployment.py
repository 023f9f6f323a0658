"""Flower's Deployment Engine when things go wrong (the breadth tier; runs that go right,
with TLS, are in ``test_flower_engines.py``):

1. Physical availability (oracle ``connected``): SuperNode 2 is SIGKILLed after round
   1 of 3. Round 2 records it as failed within the round timeout, round 3 no longer
   selects it, and replaying the run's own ``availability.csv`` in-process (``trace``
   oracle) gives the same relayed clients and the same final model: a deployment's
   physical availability becomes a simulation's, and nothing aggregated was lost. It
   runs in the background on a federation of its own (:mod:`tests.engines.background`):
   the round that waits for the dead SuperNode leaves the machine to the other runs.
2. SIGTERM to ``fedram run --engine deployment`` mid-run.
3. A SuperNode that cannot bind its ClientAppIo port fails the run at once, named.

Every process a run started (SuperLink, SuperNodes, their superexec / clientapp
children) must be gone afterwards, also when the run fails or is interrupted.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.engines import (
    FlwrRunError,
    run_in_process,
    run_with_flwr,
)
from fedram_flwr.engines.flwr.federation import Federation
from fedram_flwr.engines.flwr.flower_line import LINE
from fedram_flwr.engines.flwr.processes import free_port
from fedram_flwr.registry import load_scenario, with_overrides
from fedram_flwr.registry.app_config import APP_ROOT
from fedram_flwr.rundir.outputs import RunDirectory
from tests.engines.background import BackgroundRuns, RunSpec
from tests.helpers import RUN_LIMIT_S, final_arrays, surviving_processes, token_processes

pytestmark = [pytest.mark.flwr, pytest.mark.breadth]

SEED = 0
ROUND_TIMEOUT = 120.0  # healthy rounds took 5-50 s on these 2 shared cores (load 10-30)


def write_scenario(tmp_path: Path, source: str, name: str, **fields: Any) -> Path:
    raw = yaml.safe_load((APP_ROOT / "scenarios" / source).read_text())
    raw.pop("sweep", None)
    raw.update(name=name, seeds=[SEED], **fields)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def rounds(run: RunDirectory) -> list[dict[str, Any]]:
    return [row for row in run.read_metrics() if row["round"] > 0]


def assert_same_model(a: RunDirectory, b: RunDirectory) -> None:
    for x, y in zip(final_arrays(a), final_arrays(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)


def write_fault_scenario(folder: Path) -> Path:
    """deployment_fault.yaml for 3 rounds, whoever is connected trains."""
    folder.mkdir(parents=True, exist_ok=True)
    availability = {"oracle": "connected", "params": {"round_timeout": ROUND_TIMEOUT}}
    return write_scenario(
        folder, "deployment_fault.yaml", "fault", rounds=3, availability=availability
    )


KILLED = RunSpec("deployment-killed-supernode", write_fault_scenario, engine="deployment",
                 own=True, kill_after=((2, 1),))  # fmt: skip


@pytest.mark.flower_runs(KILLED)
def test_killed_supernode_is_dropped_and_nothing_aggregated_is_lost(
    flower_runs: BackgroundRuns, tmp_path: Path
) -> None:
    run = flower_runs.result(KILLED)
    path = run.path.parent / "scenario" / "fault.yaml"
    assert not surviving_processes(run.path)
    faults = json.loads((run.path / "flwr-logs" / "faults.json").read_text())
    assert [(f["partition"], f["after-round"]) for f in faults] == [(2, 1)]
    assert run.status() == "complete"

    r1, r2, r3 = rounds(run)
    assert r1["relayed"] == [0, 1, 2] and r1["failed"] == []
    # Killed mid-run: still drawn in round 2 (Flower has not noticed yet); its instruction
    # fails (round timeout, or Flower's node-unavailable reply once its heartbeats stop)
    # and is recorded; round 3 leaves it out.
    assert r2["active"] == [0, 1, 2] and r2["relayed"] == [0, 1] and r2["failed"] == [2]
    assert r2["failures"] == 1
    assert r3["active"] == r3["relayed"] == r3["connected"] == [0, 1] and r3["failed"] == []
    # How long round 2 waited (at most the round timeout, plus Flower's 3 s reply poll)
    # is measured by bench/deployment_fault.py, not asserted here: a loaded machine
    # stretches every round, so a wall-clock bound would make this test flaky.
    assert "accuracy" in r3

    # The run's own availability.csv (physical availability: drawn and not failed),
    # replayed in-process, gives the same participation and the same model.
    trace = run.path / "availability.csv"
    replay = with_overrides(
        load_scenario(path),
        {"availability.oracle": "trace", "availability.params": {"path": str(trace)}},
    )
    local = run_in_process(replay, SEED, tmp_path / "replay")
    assert [r["relayed"] for r in rounds(local)] == [r["relayed"] for r in (r1, r2, r3)]
    assert_same_model(run, local)


def test_interrupted_deployment_stops_every_process(tmp_path: Path) -> None:
    """SIGTERM to ``fedram run --engine deployment`` once its ServerApp runs: the run
    is marked failed and the SuperLink, SuperNodes and their children are all gone."""
    path = write_scenario(tmp_path, "deployment_fault.yaml", "interrupt", rounds=50)
    cmd = [sys.executable, "-m", "fedram_flwr.cli", "run", str(path), "--engine", "deployment"]
    run = RunDirectory(tmp_path / "runs" / "interrupt" / "default" / f"seed{SEED}")
    proc = subprocess.Popen(
        [*cmd, "--out", str(tmp_path / "runs")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + RUN_LIMIT_S
        while run.status() != "running" and proc.poll() is None:
            assert time.monotonic() < deadline, "the ServerApp did not start"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=RUN_LIMIT_S) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    assert run.status() == "failed"
    # What we started (supernodes.json), not what a scan happened to see: a SuperNode's
    # child read between its fork and its exec showed the SuperNode's command line.
    started = json.loads((run.path / "flwr-logs" / "supernodes.json").read_text())
    record = json.loads((run.path / "flwr-logs" / "processes.json").read_text())
    commands = {p["pid"]: p["cmd"] for p in record["processes"]}
    assert sorted(started) == ["0", "1", "2"]
    assert all("flower-supernode" in commands[pid] for pid in started.values())
    assert any("patient_superlink" in c for c in commands.values())  # flower-superlink
    assert not surviving_processes(run.path)


def test_a_supernode_that_cannot_bind_its_port_fails_the_run_at_once(tmp_path: Path) -> None:
    """SuperNode 0's ClientAppIo port is taken: the run fails naming it and the cause
    (it used to die unnoticed; the run failed 120 s later, "only 2 of 3 clients")."""
    path = write_scenario(tmp_path, "deployment_fault.yaml", "bind", rounds=2)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    fed = Federation("deployment", 3, tmp_path / "federation")
    # the SuperLink's ports (two on a gRPC-Fleet line, one on an HTTP one), then
    # SuperNode 0's (this federation's ports only: runs of other tests may start
    # federations meanwhile)
    superlink_ports = [None] * (2 if LINE.fleet == "gRPC" else 1)
    ports = iter([*superlink_ports, taken.getsockname()[1]])
    fed.free_port = lambda: next(ports, None) or free_port()
    with taken:
        try:
            fed.start()
            with pytest.raises(FlwrRunError) as err:
                run_with_flwr(path, SEED, tmp_path / "run", federation=fed, timeout=RUN_LIMIT_S)
        finally:
            assert not fed.stop()
    first = str(err.value).splitlines()[0]
    assert first.startswith("flower-supernode 0 (pid ")
    assert "address already in use" in first
    run = RunDirectory(tmp_path / "run")
    assert run.status() == "failed"
    assert not token_processes(fed.token)
