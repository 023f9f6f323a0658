"""docker-compose for real: the image built and the federation run in containers.

Run by ``scripts/test_docker.sh`` (the third tier: CI runs it after the other two; skipped
in the suite itself). One private ``dockerd``, a Debian base image and this project's
image (built from a copy of the working tree, as a user would build it) serve two runs
of docker-compose.yml, each container on the host's network (``tests/docker/hostnet.py``):
1. plain gRPC/HTTP, as docs/deployment.md says: ``up --exit-code-from submit`` exits 0, the
   results appear in the copy's ``runs/compose/...``, and the final model is *bit for
   bit* the in-process run's (Fig. 2a, one client relayed per round);
2. TLS (docker-compose.tls.yml after ``deploy/generate_certs.sh``) with SuperNode 2's
   container killed after round 2 (oracle ``connected``): the SuperLink serves HTTPS,
   the run finishes without the dead SuperNode, and replaying its relayed clients
   in-process (``trace``) gives the same model, as the Deployment engine's fault test
   does.
Afterwards no container, image, daemon process or folder of the test is left. (The
Deployment engine's own round time beside the containers' is a benchmark:
``bench/engines.py``, ``bench/deployment_fault.py``.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.engines import run_in_process
from fedram_flwr.registry import with_overrides
from fedram_flwr.registry.app_config import APP_ROOT, scenario_from_run_config
from fedram_flwr.rundir.outputs import RunDirectory
from tests.docker.daemon import (
    GENEROUS_S,
    PrivateDocker,
    debootstrap_base,
    missing_requirements,
    mounts_under,
    private_docker,
    processes_under,
    wait_until,
    wheelhouse_server,
)
from tests.docker.hostnet import HostPorts, host_network_config
from tests.docker.lines import CONSTRAINTS, IMAGE, LINE_FILES
from tests.helpers import final_arrays

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        not os.environ.get("FEDRAM_DOCKER_E2E"), reason="containers: scripts/test_docker.sh"
    ),
]

BASE = "fedram-test-base:bookworm"
PROJECT = "fedram-e2e"
SUMMARY = APP_ROOT / "runs" / "test_docker" / "summary.json"


@dataclass
class Stack:
    docker: PrivateDocker
    project: Path  # a copy of the working tree: build context and compose project folder
    summary: dict[str, Any] = field(default_factory=dict)


def copy_working_tree(dest: Path) -> Path:
    """The files git tracks or would track (no .venv, runs, data), as a user's clone."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=APP_ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    dest.mkdir(parents=True)
    tar = subprocess.Popen(
        ["tar", "--null", "-T", "-", "-cf", "-"], cwd=APP_ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )  # fmt: skip
    untar = subprocess.Popen(["tar", "-xf", "-"], cwd=dest, stdin=tar.stdout)
    tar.stdin.write(files)
    tar.stdin.close()
    assert tar.wait() == 0 and untar.wait() == 0
    return dest


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if reason := missing_requirements():
        pytest.skip(f"container tests: {reason}")
    work = tmp_path_factory.mktemp("docker")
    try:
        project = copy_working_tree(work / "project")
        with private_docker(work / "daemon") as docker:
            stack = Stack(docker, project)
            build_images(stack, work)
            yield stack
            SUMMARY.parent.mkdir(parents=True, exist_ok=True)
            SUMMARY.write_text(json.dumps(stack.summary, indent=2) + "\n")
            print(f"\ncontainer runs: {json.dumps(stack.summary)}  (also in {SUMMARY})")
        # Nothing of the test left: the daemon's processes, mounts and folders.
        assert not processes_under(work) and not mounts_under(work)
        assert not (work / "daemon").exists()
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(work)], check=True)


def build_images(stack: Stack, work: Path) -> None:
    """The base image (debootstrap) and the project's (``docker build`` of the copy,
    wheels served from the host's pip); their times and size go to the summary."""
    start = time.monotonic()
    debootstrap_base(stack.docker, work, BASE)
    stack.summary["base_image_s"] = round(time.monotonic() - start, 1)
    start = time.monotonic()
    with wheelhouse_server(work / "wheels", stack.project, CONSTRAINTS) as wheelhouse:
        stack.summary["wheelhouse_s"] = round(time.monotonic() - start, 1)
        start = time.monotonic()
        stack.docker.run(
            "docker", "build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE}",
            "--build-arg", f"WHEELHOUSE={wheelhouse}", "--build-arg", f"CONSTRAINTS={CONSTRAINTS}",
            "-t", IMAGE, str(stack.project),
        )  # fmt: skip
    stack.summary["image_build_s"] = round(time.monotonic() - start, 1)
    size = stack.docker.run("docker", "image", "inspect", "-f", "{{.Size}}", IMAGE).stdout
    stack.summary["image_size_gb"] = round(int(size) / 1e9, 2)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def compose_file(stack: Stack, files: tuple[str, ...], env: dict[str, str], name: str) -> Path:
    """The host-network file of ``files`` merged (``docker-compose config``) under ``env``."""
    args = [a for f in files for a in ("-f", f)]
    merged = yaml.safe_load(
        stack.docker.run("docker-compose", *args, "config", cwd=stack.project, env=env).stdout
    )
    names = sorted(merged["services"])
    nodes = [n for n in names if n.startswith("supernode")]
    ports = free_ports(2 + len(names) + len(nodes))
    host = HostPorts(
        control=ports[0],
        fleet=ports[1],
        health=dict(zip(names, ports[2:], strict=False)),
        clientappio=dict(zip(nodes, ports[2 + len(names) :], strict=True)),
    )
    out = stack.project / f"compose.{name}.yml"
    config = host_network_config(merged, host, stack.project / f"flwr-home-{name}")
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def compose(stack: Stack, file: Path, *args: str, env: dict[str, str], **kw: Any):
    return stack.docker.run(
        "docker-compose", "-p", PROJECT, "-f", str(file), *args, cwd=stack.project, env=env, **kw
    )


def result_dir(stack: Stack, scenario: str, seed: int) -> RunDirectory:
    return RunDirectory(stack.project / "runs/compose/runs/flwr" / scenario / f"seed{seed}")


def round_rows(run: RunDirectory) -> list[dict[str, Any]]:
    return [row for row in run.read_metrics() if row["round"] > 0]


def rounds_done(run: RunDirectory) -> int:
    """Rounds in ``metrics.jsonl`` so far (0 before the file, or while a row is half written)."""
    try:
        return len(round_rows(run)) if run.metrics_path.exists() else 0
    except ValueError:
        return 0


def seconds_per_round(run: RunDirectory) -> float:
    """Mean ``round-seconds`` after round 1 (which also waits for the first pulls)."""
    return round(float(np.mean([r["round-seconds"] for r in round_rows(run)[1:]])), 2)


def run_env(scenario: str, seed: int, overrides: str) -> dict[str, str]:
    return {
        "FEDRAM_SCENARIO": f"scenarios/{scenario}.yaml",
        "FEDRAM_SEED": str(seed),
        "FEDRAM_OVERRIDES": overrides,
    }


def compose_up(stack: Stack, files: tuple[str, ...], name: str, env: dict[str, str]) -> str:
    """``docker-compose up --exit-code-from submit`` as docs/deployment.md says; its output."""
    file = compose_file(stack, files, env, name)
    try:
        up = compose(stack, file, "up", "--no-build", "--exit-code-from", "submit", env=env,
                     check=False, timeout=GENEROUS_S)  # fmt: skip
        assert up.returncode == 0, (
            f"compose up ({name}) exited {up.returncode}:\n{up.stdout[-4000:]}"
        )
        return up.stdout
    finally:
        compose(stack, file, "down", "--volumes", "--remove-orphans", env=env, check=False)


def assert_bit_for_bit(run: RunDirectory, local: RunDirectory) -> None:
    assert [r["relayed"] for r in round_rows(run)] == [r["relayed"] for r in round_rows(local)]
    for x, y in zip(final_arrays(run), final_arrays(local), strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y)


SCENARIO, OVERRIDES = "fig2a_gaussian_3users", "rounds=4,eval_every=2"


def test_compose_run_matches_in_process(stack: Stack, tmp_path: Path) -> None:
    seed = 0
    files = ("docker-compose.yml", *LINE_FILES)
    output = compose_up(stack, files, "plain", run_env(SCENARIO, seed, OVERRIDES))
    run = result_dir(stack, SCENARIO, seed)
    assert run.status() == "complete"
    assert all(len(r["relayed"]) == 1 for r in round_rows(run))
    assert "running on http://127.0.0.1" in output.lower()
    local = run_in_process(scenario_from_run_config(f"scenarios/{SCENARIO}.yaml", OVERRIDES),
                           seed, tmp_path / "in-process")  # fmt: skip
    assert_bit_for_bit(run, local)
    stack.summary["plain_compose_s_per_round"] = seconds_per_round(run)


def test_tls_compose_run_finishes_without_a_killed_supernode(stack: Stack, tmp_path: Path) -> None:
    scenario, seed, overrides = "deployment_fault", 0, "rounds=6"
    env = run_env(scenario, seed, overrides)
    subprocess.run(["bash", "deploy/generate_certs.sh"], cwd=stack.project, check=True)
    file = compose_file(
        stack, ("docker-compose.yml", "docker-compose.tls.yml", *LINE_FILES), env, "tls"
    )
    run = result_dir(stack, scenario, seed)
    try:
        compose(stack, file, "up", "--no-build", "-d", env=env)
        wait_until(lambda: rounds_done(run) >= 2, "round 2 of the compose run")
        victim = compose(stack, file, "ps", "-q", "supernode-2", env=env).stdout.strip()
        stack.docker.run("docker", "kill", victim)
        killed_after = len(round_rows(run))
        submit = compose(stack, file, "ps", "-q", "submit", env=env).stdout.strip()
        code = stack.docker.run("docker", "wait", submit, timeout=GENEROUS_S).stdout.strip()
        logs = stack.docker.run("docker", "logs", submit).stdout
        assert code == "0", f"submit exited {code}:\n{logs[-4000:]}"
        state = stack.docker.run("docker", "inspect", "-f", "{{.State.Status}}", victim).stdout
        assert state.strip() == "exited"  # not restarted: a kill is a manual stop
        superlink = compose(stack, file, "ps", "-q", "superlink", env=env).stdout.strip()
        served = stack.docker.run("docker", "logs", superlink).stdout
        served += stack.docker.run("docker", "logs", superlink).stderr
        assert "running on https://127.0.0.1" in served.lower()
    finally:
        compose(stack, file, "down", "--volumes", "--remove-orphans", env=env, check=False)
    assert run.status() == "complete"
    rows = round_rows(run)
    assert len(rows) == 6 and killed_after < 6
    assert all(r["relayed"] == [0, 1, 2] for r in rows[:2])
    # Once killed, partition 2 is never relayed again. Each failure leaves it out for
    # retry_after = 2 rounds; then, if the SuperLink still lists it (its heartbeats expire
    # within 60 s, longer than 3 rounds on a loaded machine: it failed twice at load ~10),
    # it is asked again and fails again. The last round runs on the survivors.
    after = rows[killed_after - 1 :]
    assert all(2 not in r["relayed"] for r in after[1:])
    assert all(r["failed"] in ([], [2]) for r in after)
    fails = [i for i, r in enumerate(after) if r["failed"] == [2]]
    assert all(b - a > 2 for a, b in zip(fails, fails[1:]))
    assert rows[-1]["relayed"] == [0, 1]  # connected may still list 2 if asked again
    # Nothing the server aggregated was lost: the same participation in-process.
    trace = tmp_path / "relayed.json"
    trace.write_text(json.dumps([r["relayed"] for r in rows]))
    replay = with_overrides(
        scenario_from_run_config(f"scenarios/{scenario}.yaml", overrides),
        {"availability.oracle": "trace", "availability.params": {"path": str(trace)}},
    )
    local = run_in_process(replay, seed, tmp_path / "replay")
    for x, y in zip(final_arrays(run), final_arrays(local), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    stack.summary["tls_fault_rounds"] = [[r["relayed"], r["failed"]] for r in rows]
