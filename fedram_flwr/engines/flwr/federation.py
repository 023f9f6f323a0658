"""A Flower federation on this machine, kept up for one run or for many: a SuperLink
(``--simulation``, or with its Fleet API and K ``flower-supernode`` processes in the
Deployment Engine), its private ``FLWR_HOME`` with the one connection that points at it,
and every process it started.

A SuperLink serves run after run, and SuperNodes join each run the SuperLink starts, as
in a real deployment; so several ``flwr run`` (one per scenario and seed) can share one
federation and pay its start-up once (``run_with_flwr(..., federation=...)``,
:func:`federation` as a context manager). Each run keeps its own Flower ``Context``
(run config, node state), so runs sharing a federation do not see each other's client
state. A Simulation federation with ``ray_address`` runs every run's clients on that Ray
cluster instead of starting a Ray per run.

On leaving (also on failure, Ctrl-C, SIGTERM), or when the process driving it dies
(:class:`~.watchdog.Watchdog`), every process it started is stopped by pid: the
SuperLink, the SuperNodes, their ``flower-superexec``, ``flwr-serverapp`` /
``flwr-clientapp`` / ``flwr-simulation`` children and any Ray processes of its own.
Logs go to ``logs``: superlink.log, supernode-<i>.log, supernodes.json (partition id ->
pid) and processes.json (what was started, kept current).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import tomli_w

from fedram_flwr.engines.flwr.errors import FlwrRunError, TimeLimitError, failure_cause, log_tail
from fedram_flwr.engines.flwr.flower_line import LINE
from fedram_flwr.engines.flwr.health import wait_healthy
from fedram_flwr.engines.flwr.processes import (
    ProcessTracker,
    ProcInfo,
    executable,
    flower_env,
    free_port,
    kill_group,
)
from fedram_flwr.engines.flwr.ray_cluster import RAY_ADDRESS_ENV, check_reachable
from fedram_flwr.engines.flwr.signals import signals_ignored
from fedram_flwr.engines.flwr.staging import publish_app
from fedram_flwr.engines.flwr.tls import TlsFiles, check_tls_files, connection, security_flags
from fedram_flwr.engines.flwr.watchdog import OWNER_ENV, Watchdog, owner_id
from fedram_flwr.rundir.nofollow import write_atomic
from fedram_flwr.scenario.paths import APP_ROOT
from fedram_flwr.scenario.schema import ScenarioError

Engine = Literal["simulation", "deployment"]
ENGINES: tuple[Engine, ...] = ("simulation", "deployment")

APP_DIR = APP_ROOT
"""The Flower app (``pyproject.toml`` with ``[tool.flwr.app]``): parent of the package."""

DEPLOYMENT_LATENCY_ENV = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}
"""Flower 1.39's one latency knob of a deployment: the SuperExec processes of the
SuperLink and SuperNodes look for new ServerApp / ClientApp tasks every 1 s by
default. The SuperNode's Fleet poll (3 s) and the legacy Grid's reply poll (3 s) are
fixed in Flower's code (``start_client_internal``, ``Grid.send_and_receive``)."""

SCAN_EVERY_S = 1.0
"""How often runs on a federation look for its new processes."""

SUPERLINK_READY_S = 60.0
"""How long one SuperLink start may take to answer ``/health`` (then it is started again,
up to three times, within the federation's start-up time)."""


def check_options(
    engine: str,
    num_supernodes: int,
    tls: TlsFiles | None,
    kill_after: Mapping[int, int],
    ray_address: str | None = None,
) -> None:
    """Reject options the chosen engine cannot honour."""
    if engine not in ENGINES:
        raise ValueError(f"engine: unknown {engine!r}; allowed values: {', '.join(ENGINES)}")
    if tls is not None and engine != "deployment":
        raise ValueError("tls: only the deployment engine runs a secured SuperLink")
    if tls is not None:
        check_tls_files(tls)
    bad = sorted(set(kill_after) - set(range(num_supernodes)))
    if engine != "deployment" and kill_after or bad:
        raise ScenarioError(
            f"kill_after (--kill-supernode): partition ids {bad or sorted(kill_after)} are "
            f"not SuperNodes of this run; allowed partitions: 0..{num_supernodes - 1} "
            f"(data.num_clients = {num_supernodes}; deployment engine only)"
        )
    if ray_address is not None and engine != "simulation":
        raise ScenarioError(
            "ray_address (--ray-address): only the simulation engine (--engine flwr) "
            "runs on a Ray cluster"
        )


def superlink_command() -> list[str]:
    """``flower-superlink`` as this project runs it: Flower's, with more heartbeat
    patience for its ServerApps on a loaded machine
    (:mod:`~fedram_flwr.engines.flwr.patient_superlink`)."""
    return [sys.executable, "-m", "fedram_flwr.engines.flwr.patient_superlink"]


class Federation:
    """A SuperLink (and, in the Deployment Engine, ``num_supernodes`` SuperNodes) on free
    loopback ports, with its own ``FLWR_HOME``: ``with Federation(...) as fed:`` starts
    it, runs go to it (``run_with_flwr(..., federation=fed)``), and leaving the block
    stops every process it started. ``logs``: its log folder (a run of its own uses the
    run's ``flwr-logs``). ``tls``, ``env`` and ``ray_address`` as in ``run_with_flwr``.
    ``run_dir``: the run marked failed if the driving process dies (a federation of one
    run), else None."""

    def __init__(
        self,
        engine: Engine,
        num_supernodes: int,
        logs: Path,
        *,
        tls: TlsFiles | None = None,
        env: Mapping[str, str] | None = None,
        ray_address: str | None = None,
        run_dir: Path | None = None,
    ) -> None:
        check_options(engine, num_supernodes, tls, {}, ray_address)
        self.engine = engine
        self.num_supernodes = num_supernodes
        self.tls = tls
        self.ray_address = ray_address
        self.connection = f"fedram-{engine}"
        self.logs = Path(logs)
        self.superlink_log = self.logs / "superlink.log"
        self.tracker = ProcessTracker(uuid.uuid4().hex)
        self.home = Path(tempfile.mkdtemp(prefix="fedram-flwr-home-"))
        extra = {**(env or {}), OWNER_ENV: owner_id()}
        if ray_address is not None:
            extra[RAY_ADDRESS_ENV] = ray_address  # Flower 1.39 passes no address to ray.init
        self.env = flower_env(self.home, self.tracker.token, extra)
        self.superlink: subprocess.Popen | None = None
        self.supernodes: dict[int, subprocess.Popen] = {}
        self.killed: set[int] = set()
        self.fleet_port: int | None = None
        self.started = time.monotonic()
        self.timing: dict[str, float] = {}
        self._recorded = 0  # processes in processes.json
        self._scanning = threading.Lock()
        self._scanned = -SCAN_EVERY_S  # when /proc was last scanned (time.monotonic)
        self._app: Path | None = None
        self._staging = threading.Lock()  # runs started together stage the app once
        self.free_port = free_port  # where its ports come from (tests take one on purpose)
        self._installing = threading.Lock()
        self.installed = False
        self.watchdog = Watchdog(self.tracker.token, self.home, run_dir, self.logs)

    def describe(self) -> str:
        """One line for logs: the engine, the Flower line and, in a deployment, how the
        SuperNodes reach the SuperLink."""
        if self.engine == "simulation":
            ray = f"Ray at {self.ray_address}" if self.ray_address else "a Ray of its own"
            return f"Simulation Engine on flwr {LINE.version}, {ray}"
        security = "TLS" if self.tls else "insecure"
        return (
            f"Deployment Engine on {LINE.describe()} ({security}), {self.num_supernodes} SuperNodes"
        )

    @property
    def token(self) -> str:
        """The token in the environment of every process of this federation."""
        return self.tracker.token

    def mark(self, event: str) -> None:
        self.timing.setdefault(event, round(time.monotonic() - self.started, 3))

    def spawn(self, cmd: list[str], log: Path) -> subprocess.Popen:
        """Start a tracked process of this federation, its output to ``log``."""
        proc = self.tracker.spawn(cmd, log, cwd=self.home, env=self.env)
        self._write_record()
        return proc

    def record(self) -> None:
        """Look for new processes of this federation and keep processes.json current (a
        driver killed by SIGKILL leaves it for whoever checks afterwards); at most once
        per :data:`SCAN_EVERY_S`, however many runs ask (a scan reads all of /proc)."""
        with self._scanning:
            if time.monotonic() - self._scanned < SCAN_EVERY_S:
                return
            self.tracker.scan()
            self._scanned = time.monotonic()
            self._write_record()

    def _write_record(self) -> None:
        """processes.json, when the tracker knows of new processes."""
        if len(self.tracker.known) != self._recorded:
            self._recorded = len(self.tracker.known)
            self.tracker.record(self.logs / "processes.json")

    def claim_install(self, timeout: float) -> bool:
        """Whether the caller's run installs the app (True: it then holds the claim until
        :meth:`release_install`); waits while another run is installing it, at most
        ``timeout`` s (then :class:`TimeLimitError`). Flower 1.39
        installs a FAB in FLWR_HOME by creating its folder, then copying into it, and a
        process finding the folder takes it as installed (seen: concurrent first runs
        failing with "Cannot find pyproject.toml"): so the first run goes alone until its
        ServerApp has started, and later runs go in at once."""
        if not self._installing.acquire(timeout=max(timeout, 0.0)):
            raise TimeLimitError(
                f"waited {timeout:.0f} s for another run to install the app on the federation"
            )
        if self.installed:
            self._installing.release()
            return False
        return True

    def release_install(self, installed: bool) -> None:
        """End a claim of :meth:`claim_install`; ``installed``: the run's ServerApp
        started (else the next run installs)."""
        self.installed = self.installed or installed
        self._installing.release()

    def staged_app(self, app_dir: Path = APP_DIR) -> Path:
        """The app staged once in this federation's home (:func:`publish_app`), however
        many runs ask at once: the first stages it while the others wait, and no run
        ever sees a half-staged folder (a ``flwr run`` reading a ``pyproject.toml``
        being rewritten fails with "Missing [project] section")."""
        with self._staging:
            if self._app is None:
                self._app = publish_app(app_dir, self.home / "app")
            return self._app

    def start(self, deadline: float | None = None) -> None:
        """Start the SuperLink (and the SuperNodes); ``deadline`` (``time.monotonic``)
        bounds the SuperLink's start-up."""
        self.logs.mkdir(parents=True, exist_ok=True)
        if self.ray_address is not None:
            check_reachable(self.ray_address, "ray_address (--ray-address)")
        self.start_superlink(deadline)
        if self.engine == "deployment":
            self.start_supernodes()

    def start_superlink(self, deadline: float | None = None) -> None:
        """Start ``flower-superlink`` (``--simulation``, or with a Fleet API for
        SuperNodes) on free ports and write the connection to FLWR_HOME."""
        limited = deadline is not None  # the run's time limit, not the start-up bound
        deadline = deadline or time.monotonic() + 3 * SUPERLINK_READY_S
        for attempt in range(3):  # a port can be taken between probe and bind
            port = self.free_port()
            if self.engine == "simulation":
                mode = ["--simulation"]
            else:
                self.fleet_port = self.free_port() if LINE.fleet == "gRPC" else port
                mode = LINE.superlink_fleet_flags("127.0.0.1", self.fleet_port)
            self.superlink = self.spawn(
                [
                    *superlink_command(),
                    *mode,
                    *security_flags(self.tls, server=True),
                    "--disable-runtime-dependency-installation",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                self.superlink_log,
            )
            try:
                ready_by = min(deadline, time.monotonic() + SUPERLINK_READY_S)
                wait_healthy(
                    self.superlink, port, self.superlink_log, ready_by, self.tls and self.tls.ca
                )
                break
            except FlwrRunError as err:
                if limited and time.monotonic() >= deadline:  # name the limit, not the log
                    raise TimeLimitError(
                        f"the time limit ran out while flower-superlink was starting; {err}"
                    ) from None
                if time.monotonic() > deadline or self.superlink.poll() is None:
                    raise
                if attempt == 2:
                    raise FlwrRunError(f"flower-superlink failed to start 3 times; {err}") from None
        self.mark("superlink-ready")
        described = f"{self.describe()}\n".encode()
        write_atomic(self.superlink_log.with_name("federation.txt"), described)
        superlink = {"default": self.connection}
        superlink[self.connection] = connection(f"127.0.0.1:{port}", self.tls)
        (self.home / "config.toml").write_text(tomli_w.dumps({"superlink": superlink}))

    def start_supernodes(self) -> None:
        """Deployment: one ``flower-supernode`` per partition, each with its own
        ClientAppIo port, connecting to the SuperLink's Fleet API."""
        ports: set[int] = set()
        for pid in range(self.num_supernodes):
            while (port := self.free_port()) in ports:
                pass
            ports.add(port)
            self.supernodes[pid] = self.spawn(
                [
                    executable("flower-supernode"),
                    *security_flags(self.tls, server=False),
                    "--superlink",
                    f"127.0.0.1:{self.fleet_port}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--node-config",
                    f"partition-id={pid} num-partitions={self.num_supernodes}",
                ],
                self.logs / f"supernode-{pid}.log",
            )
        pids = {str(k): p.pid for k, p in self.supernodes.items()}
        write_atomic(self.logs / "supernodes.json", json.dumps(pids, indent=2).encode())
        self.mark("supernodes-started")

    def check_supernodes(self) -> None:
        """Raise, naming it and the cause its log gives, when a SuperNode has exited
        that was not killed on purpose (:meth:`kill_supernode`): e.g. one that could not
        bind its ClientAppIo port, instead of a round failing much later for want of it."""
        for partition, proc in sorted(self.supernodes.items()):
            if partition in self.killed or proc.poll() is None:
                continue
            log = self.logs / f"supernode-{partition}.log"
            tail = log_tail(log)
            raise FlwrRunError(
                f"flower-supernode {partition} (pid {proc.pid}) exited with code "
                f"{proc.returncode}: {failure_cause(tail.splitlines())}; log {log}:\n{tail}"
            )

    def kill_supernode(self, partition: int) -> int | None:
        """SIGKILL SuperNode ``partition`` and its process group at once (like a device
        losing power); its pid, or None when it is not running."""
        proc = self.supernodes.get(partition)
        if proc is None or proc.poll() is not None:
            return None
        self.killed.add(partition)
        kill_group(proc)
        return proc.pid

    def __enter__(self) -> Federation:
        """Start it (:meth:`start`) for the runs of a ``with`` block."""
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        """Stop it; a :class:`FlwrRunError` naming any process that survived SIGKILL
        (a warning when an error is in flight already)."""
        if leftovers := self.stop():
            if kind is not None:
                print(f"warning: {survivors(leftovers)}", file=sys.stderr)
            else:
                raise FlwrRunError(survivors(leftovers))

    def stop(self) -> list[ProcInfo]:
        """Stop every process of this federation (bounded, not interruptible); returns
        any that survived SIGKILL (normally none)."""
        with signals_ignored(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            leftovers = self.tracker.stop()
            for proc in (self.superlink, *self.supernodes.values()):
                if proc is not None:
                    try:
                        proc.wait(timeout=5)  # reap our direct children
                    except subprocess.TimeoutExpired:
                        pass
            if self.logs.is_dir():
                self.tracker.record(self.logs / "processes.json")
            shutil.rmtree(self.home, ignore_errors=True)
            self.watchdog.release()
        return leftovers


def survivors(leftovers: list[ProcInfo]) -> str:
    """What to say of processes that survived SIGKILL."""
    return "processes of this federation survived SIGKILL: " + ", ".join(
        f"{p.pid} ({p.cmd[:60]})" for p in leftovers
    )
