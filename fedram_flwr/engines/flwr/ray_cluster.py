"""Ray clusters beyond this process: check that a cluster's address answers, and start a
private local head node for a while and stop it.

:func:`local_cluster` runs ``ray start --head --block`` on loopback, with a free port, a
temporary folder and a token of its own in the environment of every process it starts
(:class:`~fedram_flwr.engines.flwr.processes.ProcessTracker`): on leaving it, also on
failure or Ctrl-C, exactly those processes (the GCS, the raylet, its agents and workers)
are stopped by pid. Never ``ray stop``: that stops every Ray on the machine. Its address
is 127.0.0.1, but Ray's servers bind every interface (Ray 2.55 has no option to bind one):
the ports are random and live only as long as the cluster.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fedram_flwr.engines.flwr.errors import FlwrRunError, log_tail
from fedram_flwr.engines.flwr.processes import (
    TOKEN_ENV,
    ProcessTracker,
    executable,
    free_port,
)
from fedram_flwr.engines.flwr.signals import signals_ignored
from fedram_flwr.scenario.schema import ScenarioError

RAY_ADDRESS_ENV = "RAY_ADDRESS"
"""``ray.init()`` without an address joins the cluster this variable names. Flower 1.39's
Simulation Engine passes only ``num_cpus``, ``num_gpus``, ``logging_level`` and
``log_to_driver`` of the federation's ``init-args`` to ``ray.init`` (its
``SimulationConfig`` has no ``address``), so this is how a run is sent to a cluster."""

STARTED = "Ray runtime started"
"""What ``ray start`` prints once its node is up (then ``--block`` keeps it running)."""
STARTUP_TIMED_OUT = "timed out during startup"
"""Ray's own error when its raylet does not register within a hard-coded 30 s (a
loaded machine): the head node is started again."""
START_ATTEMPTS = 3
STOP_GRACE_S = 3.0
"""How long the cluster's processes get to exit on SIGTERM before they are SIGKILLed. The
raylet and the workers exit within it; ``ray start --block``, the GCS and the dashboard
did not within 15 s (Ray 2.55, measured here), and a private cluster's state is thrown
away with its folder, so waiting longer only delays the SIGKILL."""
STOP_WAIT_S = 300.0
"""How long SIGKILLed processes get to exit (seconds at most, but slow on a loaded
machine) before :func:`local_cluster` gives up and raises, naming them."""

CLUSTER_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # the raylet waits this long for its agents (Python processes, slow to start on a
    # loaded machine) before it gives up
    "RAY_agent_register_timeout_ms": "600000",
    # and this long for a worker process (a client actor importing torch) to register;
    # Ray's default, 60 s, is not enough for runs started together on a loaded machine
    "RAY_worker_register_timeout_seconds": "600",
}


AGENT_PORT_FLAGS = (
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)
"""Given ports, the raylet need not wait for its agents to write theirs to files: it
waits a hard-coded 15-20 s for those and then crashes (ray-project/ray#65983; seen here on
a loaded 2-core machine, ``Check failed ... WaitForDashboardAgentPorts``)."""


def distinct_ports(count: int) -> list[int]:
    """``count`` different free loopback ports."""
    ports: list[int] = []
    while len(ports) < count:
        if (port := free_port()) not in ports:
            ports.append(port)
    return ports


def split_address(address: str, flag: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); a :class:`ScenarioError` naming ``flag`` otherwise."""
    host, sep, port = address.rpartition(":")
    if not (sep and host and port.isdigit()):
        raise ScenarioError(f"{flag} {address!r}: expected a Ray head node's HOST:PORT")
    return host, int(port)


def check_reachable(address: str, flag: str, timeout: float = 10.0) -> None:
    """Raise :class:`ScenarioError` naming ``address`` and ``flag`` unless something
    accepts TCP connections at the head node's GCS address."""
    host, port = split_address(address, flag)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        raise ScenarioError(
            f"{flag} {address}: no Ray cluster answers there ({err}); start one with "
            "`ray start --head --port PORT` and give its HOST:PORT"
        ) from None


@dataclass(frozen=True)
class LocalCluster:
    """A head node started by :func:`local_cluster`: its address, its Ray folder and the
    token every process of it carries (``FEDRAM_FLWR_RUN_TOKEN``)."""

    address: str
    temp_dir: Path
    token: str

    @property
    def logs(self) -> Path:
        """The logs of its session: the GCS's, the raylet's, every worker's."""
        return self.temp_dir / "session_latest" / "logs"


@contextmanager
def local_cluster(num_cpus: int | None = None, *, timeout: float = 900.0) -> Iterator[LocalCluster]:
    """A private Ray head node on 127.0.0.1 with ``num_cpus`` CPUs (default: this
    machine's), yielded once it is up (address ``127.0.0.1:PORT``); every process it
    started is stopped on leaving. ``timeout``: a hang guard on its start-up."""
    tracker = ProcessTracker(uuid.uuid4().hex)
    temp = Path(tempfile.mkdtemp(prefix="fr-ray-"))  # short: Ray's socket paths
    env = {**os.environ, **CLUSTER_ENV, TOKEN_ENV: tracker.token}
    env.pop(RAY_ADDRESS_ENV, None)
    deadline = time.monotonic() + timeout
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            ports = distinct_ports(len(AGENT_PORT_FLAGS) + 1)
            address = f"127.0.0.1:{ports[0]}"
            log = temp / f"ray-start-{attempt}.log"
            proc = tracker.spawn(
                [
                    executable("ray"),
                    "start",
                    "--head",
                    "--block",
                    "--node-ip-address",
                    "127.0.0.1",
                    "--port",
                    address.rsplit(":", 1)[1],
                    "--num-cpus",
                    str(num_cpus or os.cpu_count() or 1),
                    "--temp-dir",
                    str(temp / str(attempt)),
                    "--include-dashboard",
                    "false",
                    "--disable-usage-stats",
                    *(f"{flag}={port}" for flag, port in zip(AGENT_PORT_FLAGS, ports[1:])),
                ],
                log,
                cwd=temp,
                env=env,
            )
            while STARTED not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
                tracker.scan()
            else:
                break
            tail = log_tail(log)
            stop_all(tracker)
            if STARTUP_TIMED_OUT not in tail or attempt == START_ATTEMPTS:
                raise FlwrRunError(f"a local Ray head node did not start; {log}:\n{tail}")
        yield LocalCluster(address, temp / str(attempt), tracker.token)
    except BaseException:
        try:
            stop_all(tracker)
        except FlwrRunError as err:  # the error in flight stays the one raised
            print(f"warning: {err}", file=sys.stderr)
        raise
    else:
        stop_all(tracker)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def stop_all(tracker: ProcessTracker) -> None:
    """Stop every process of the cluster (SIGTERM, then SIGKILL to those left) and wait
    until each has exited; a :class:`FlwrRunError` naming the survivors otherwise. The
    bounds are generous (minutes on a loaded machine) but finite."""
    with signals_ignored(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        leftovers = tracker.stop(grace=STOP_GRACE_S, kill_wait=STOP_WAIT_S)
    if leftovers:
        raise FlwrRunError(
            f"processes of the local Ray (token {tracker.token}) survived SIGKILL for "
            f"{STOP_WAIT_S:.0f} s: " + ", ".join(f"{p.pid} ({p.cmd[:60]})" for p in leftovers)
        )
