"""One ``flwr run`` in progress (:class:`FlwrRun`): its private ``FLWR_HOME``, the
SuperLink (and SuperNodes in the Deployment Engine), the ``flwr run`` process, the relay
of its output, fault injection and the cleanup; :func:`~fedram_flwr.engines.flwr.run.run_with_flwr`
drives it."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import tomli_w

from fedram_flwr.app_config import APP_ROOT
from fedram_flwr.engines.flwr.errors import (
    LOG_TAIL,
    FlwrRunError,
    TimeLimitError,
    failure_cause,
    log_tail,
    root_cause,
    run_error,
)
from fedram_flwr.engines.flwr.health import wait_healthy
from fedram_flwr.engines.flwr.processes import (
    ProcessTracker,
    ProcInfo,
    die_with_parent,
    executable,
    flower_env,
    free_port,
    kill_group,
)
from fedram_flwr.engines.flwr.tls import TlsFiles, connection, security_flags
from fedram_flwr.engines.flwr.watchdog import OWNER_ENV, Watchdog, owner_id
from fedram_flwr.outputs import RunDirectory
from fedram_flwr.schema import ScenarioError

APP_DIR = APP_ROOT
"""The Flower app (``pyproject.toml`` with ``[tool.flwr.app]``): parent of the package."""

Engine = Literal["simulation", "deployment"]
ENGINES: tuple[Engine, ...] = ("simulation", "deployment")

DEPLOYMENT_LATENCY_ENV = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}
"""Flower 1.39's one latency knob of a deployment: the SuperExec processes of the
SuperLink and SuperNodes look for new ServerApp / ClientApp tasks every 1 s by
default. The SuperNode's Fleet poll (3 s) and the legacy Grid's reply poll (3 s) are
fixed in Flower's code (``start_client_internal``, ``Grid.send_and_receive``)."""


def check_options(
    engine: str, num_supernodes: int, tls: TlsFiles | None, kill_after: Mapping[int, int]
) -> None:
    """Reject options the chosen engine cannot honour."""
    if engine not in ENGINES:
        raise ValueError(f"engine: unknown {engine!r}; allowed values: {', '.join(ENGINES)}")
    if tls is not None and engine != "deployment":
        raise ValueError("tls: only the deployment engine runs a secured SuperLink")
    bad = sorted(set(kill_after) - set(range(num_supernodes)))
    if engine != "deployment" and kill_after or bad:
        raise ScenarioError(
            f"kill_after (--kill-supernode): partition ids {bad or sorted(kill_after)} are "
            f"not SuperNodes of this run; allowed partitions: 0..{num_supernodes - 1} "
            f"(data.num_clients = {num_supernodes}; deployment engine only)"
        )


class FlwrRun:
    """One ``flwr run``: its private FLWR_HOME, SuperLink (and SuperNodes in the
    Deployment Engine), CLI process and logs."""

    def __init__(
        self,
        out: RunDirectory,
        num_supernodes: int,
        timeout: float,
        *,
        engine: Engine = "simulation",
        tls: TlsFiles | None = None,
        kill_after: Mapping[int, int] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        check_options(engine, num_supernodes, tls, kill_after or {})
        self.out = out
        self.num_supernodes = num_supernodes
        self.timeout = timeout
        self.engine = engine
        self.tls = tls
        self.kill_after = dict(kill_after or {})
        self.connection = f"fedram-{engine}"
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.logs = out.path / "flwr-logs"
        self.superlink_log = self.logs / "superlink.log"
        self.flwr_log = self.logs / "flwr-run.log"
        self.tracker = ProcessTracker(uuid.uuid4().hex)
        self.home = Path(tempfile.mkdtemp(prefix="fedram-flwr-home-"))
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
        self.superlink: subprocess.Popen | None = None
        self.supernodes: dict[int, subprocess.Popen] = {}
        self.fleet_port: int | None = None
        self.faults: list[dict[str, Any]] = []
        self.flwr: subprocess.Popen | None = None
        self.relay: threading.Thread | None = None
        self.timing: dict[str, Any] = {}
        self.env = flower_env(self.home, self.tracker.token, {**(env or {}), OWNER_ENV: owner_id()})
        self._recorded = 0  # processes in processes.json
        self.watchdog = Watchdog(self.tracker.token, self.home, out.path)

    def mark(self, event: str) -> None:
        self.timing.setdefault(event, round(time.monotonic() - self.started, 3))

    def error(self, message: str, kind: type[FlwrRunError] = FlwrRunError) -> FlwrRunError:
        """A FlwrRunError naming the root cause, with the tails of both logs."""
        return run_error(message, self.tail, self.flwr_log, self.superlink_log, kind)

    def _spawn(self, cmd: list[str], log: Path) -> subprocess.Popen:
        proc = self.tracker.spawn(cmd, log, cwd=self.home, env=self.env)
        self._record()
        return proc

    def _record(self) -> None:
        """processes.json, when the tracker knows of new processes (kept current during
        the run: a driver killed by SIGKILL leaves it for whoever checks afterwards)."""
        if len(self.tracker.known) != self._recorded:
            self._recorded = len(self.tracker.known)
            self.tracker.record(self.logs / "processes.json")

    def _past_deadline(self) -> None:
        """Raise :class:`TimeLimitError` once the run's time limit has run out."""
        if time.monotonic() > self.deadline:
            raise self.error(f"flwr run timed out after {self.timeout:.0f} s", TimeLimitError)

    def start_superlink(self) -> None:
        """Start ``flower-superlink`` (``--simulation``, or with a Fleet API for
        SuperNodes) on free ports and write the connection to FLWR_HOME."""
        for attempt in range(3):  # a port can be taken between probe and bind
            port = free_port()
            if self.engine == "simulation":
                mode = ["--simulation"]
            else:
                self.fleet_port = free_port()
                mode = ["--fleet-api-address", f"127.0.0.1:{self.fleet_port}"]
            self.superlink = self._spawn(
                [
                    executable("flower-superlink"),
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
                ready_by = min(self.deadline, time.monotonic() + 60)
                ca = self.tls.ca if self.tls else None
                wait_healthy(self.superlink, port, self.superlink_log, ready_by, ca)
                break
            except FlwrRunError as err:
                self._past_deadline()
                if self.superlink.poll() is None:
                    raise
                if attempt == 2:
                    raise FlwrRunError(f"flower-superlink failed to start 3 times; {err}") from None
        self.mark("superlink-ready")
        superlink = {"default": self.connection}
        superlink[self.connection] = connection(f"127.0.0.1:{port}", self.tls)
        (self.home / "config.toml").write_text(tomli_w.dumps({"superlink": superlink}))

    def start_supernodes(self) -> None:
        """Deployment: one ``flower-supernode`` per partition, each with its own
        ClientAppIo port, connecting to the SuperLink's Fleet API."""
        ports: set[int] = set()
        for pid in range(self.num_supernodes):
            while (port := free_port()) in ports:
                pass
            ports.add(port)
            self.supernodes[pid] = self._spawn(
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
        (self.logs / "supernodes.json").write_text(
            json.dumps({str(k): p.pid for k, p in self.supernodes.items()}, indent=2)
        )
        self.mark("supernodes-started")

    def run(self, app: Path, run_config: Path) -> None:
        """``flwr run . <connection> --stream`` in ``app``; returns when the run is over."""
        cmd = [executable("flwr"), "run", ".", self.connection, "--run-config", str(run_config)]
        if self.engine == "simulation":
            cmd += ["--federation-config", f"num-supernodes={self.num_supernodes}"]
        cmd.append("--stream")
        self.flwr_log.write_text(f"# cd {app} && FLWR_HOME={self.home} {' '.join(cmd)}\n")
        self.flwr = subprocess.Popen(
            cmd,
            cwd=app,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        self.tracker.add_root(self.flwr.pid)
        self.relay = threading.Thread(target=self._relay, daemon=True)
        self.relay.start()
        while self.flwr.poll() is None:
            self._past_deadline()
            self.tracker.scan()
            self._record()
            self.check_supernodes()
            rows = self.out.read_metrics()
            if len(rows) >= 1:
                self.mark("server-started")  # round 0 (initial evaluation) recorded
            if len(rows) >= 2:
                self.mark("first-round")
            self._inject_faults(rows[-1]["round"] if rows else -1)
            time.sleep(0.5)
        self.relay.join(timeout=10)
        self.mark("flwr-exit")
        if self.flwr.returncode != 0:
            raise self.error(f"flwr run exited with code {self.flwr.returncode}")
        # The ServerApp marks the run complete before the stream ends; allow a moment.
        settle = time.monotonic() + (0 if root_cause(self.tail) else 3)
        while self.out.status() != "complete" and time.monotonic() < settle:
            time.sleep(0.2)
        if self.out.status() != "complete":
            raise self.error(f"the Flower run failed (run directory status '{self.out.status()}')")

    def check_supernodes(self) -> None:
        """Raise, naming it and the cause its log gives, when a SuperNode has exited
        that was not killed on purpose (``kill_after``): e.g. one that could not bind
        its ClientAppIo port, instead of a round failing much later for want of it."""
        killed = {f["partition"] for f in self.faults}
        for partition, proc in sorted(self.supernodes.items()):
            if partition in killed or proc.poll() is None:
                continue
            log = self.logs / f"supernode-{partition}.log"
            tail = log_tail(log)
            raise FlwrRunError(
                f"flower-supernode {partition} (pid {proc.pid}) exited with code "
                f"{proc.returncode}: {failure_cause(tail.splitlines())}; log {log}:\n{tail}"
            )

    def _inject_faults(self, last_round: int) -> None:
        """SIGKILL the process group of each SuperNode whose round has been recorded
        (the SuperNode and the processes it started die at once, like a device)."""
        for partition, after in sorted(self.kill_after.items()):
            proc = self.supernodes.get(partition)
            if proc is None or last_round < after or proc.poll() is not None:
                continue
            kill_group(proc)
            del self.kill_after[partition]
            elapsed = round(time.monotonic() - self.started, 3)
            self.faults.append(
                {"partition": partition, "pid": proc.pid, "after-round": after, "at": elapsed}
            )
            (self.logs / "faults.json").write_text(json.dumps(self.faults, indent=2))
            print(
                f"fedram: killed SuperNode {partition} (pid {proc.pid}) after round {after}",
                file=sys.stderr,
                flush=True,
            )

    def _relay(self) -> None:
        """Copy ``flwr run`` output to our stdout and its log, keeping the last lines."""
        assert self.flwr is not None and self.flwr.stdout is not None
        with self.flwr_log.open("a") as log:
            for line in self.flwr.stdout:
                log.write(line)
                log.flush()
                self.tail.append(line.rstrip("\n"))
                if "Successfully started run" in line:
                    self.mark("run-started")
                sys.stdout.write(line)
                sys.stdout.flush()

    def stop(self) -> list[ProcInfo]:
        """Stop every process of this run; returns any that survived."""
        if self.flwr is not None and self.flwr.poll() is None:
            self.flwr.terminate()
        leftovers = self.tracker.stop()
        for proc in (self.flwr, self.superlink, *self.supernodes.values()):
            if proc is not None:
                try:
                    proc.wait(timeout=5)  # reap our direct children
                except subprocess.TimeoutExpired:
                    pass
        if self.relay is not None:
            self.relay.join(timeout=5)
        self.tracker.record(self.logs / "processes.json")
        self.mark("total")
        self.timing["round-seconds"] = _mean_round_seconds(self.out.read_metrics())
        (self.logs / "timing.json").write_text(json.dumps(self.timing, indent=2))
        shutil.rmtree(self.home, ignore_errors=True)
        self.watchdog.release()
        return leftovers


def _mean_round_seconds(rows: list[dict]) -> float | None:
    """Mean server-side round time, leaving out round 1 (it starts Ray's actors)."""
    times = [r["round-seconds"] for r in rows if "round-seconds" in r and r["round"] > 1]
    return round(sum(times) / len(times), 4) if times else None
