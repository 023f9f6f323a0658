"""The processes of one ``flwr run``: reading /proc, tracking what a run started, starting
and stopping Flower's executables, free loopback ports.

A run's processes are the roots it started by pid, their descendants (found by walking
the process tree, polled during the run) and every process carrying the run's token in
its environment (``flower-superexec`` and Ray start theirs in sessions of their own).
They are signalled by pid / process group only: nothing else on the machine is touched.
The processes started here die with the thread that started them (``PR_SET_PDEATHSIG``),
even when it is SIGKILLed; :mod:`.watchdog` stops their descendants then.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from fedram_flwr.engines.flwr.errors import FlwrRunError
from fedram_flwr.rundir.nofollow import open_text, write_atomic

TOKEN_ENV = "FEDRAM_FLWR_RUN_TOKEN"
"""Every process a run starts (and their descendants) carries this variable."""

# Flower's defaults (8000, 9091-9096) and the managed ``local`` SuperLink's (39091/3).
_RESERVED_PORTS = frozenset({8000, 9091, 9092, 9093, 9094, 9095, 9096, 39091, 39093})


@dataclass(frozen=True)
class ProcInfo:
    """One process as /proc reports it (``start`` in clock ticks since boot)."""

    pid: int
    ppid: int
    pgid: int
    start: int
    state: str
    cmd: str


def read_proc(pid: int) -> ProcInfo | None:
    """/proc/<pid> as a ProcInfo, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    comm = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2 :].split()
    cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip() or f"[{comm}]"
    return ProcInfo(pid, int(fields[1]), int(fields[2]), int(fields[19]), fields[0], cmd)


def mark_fork(info: ProcInfo, table: Mapping[int, ProcInfo]) -> ProcInfo:
    """``info`` with its command marked ``[fork of PPID]`` while it shows its parent's
    command line: a child between ``fork`` and ``exec`` (or one that never execs) is not
    a second copy of its parent's program."""
    parent = table.get(info.ppid)
    if parent is not None and parent.cmd == info.cmd:
        return replace(info, cmd=f"[fork of {info.ppid}] {info.cmd}")
    return info


def process_table() -> dict[int, ProcInfo]:
    """Every process currently visible in /proc."""
    table: dict[int, ProcInfo] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := read_proc(int(entry))) is not None:
            table[info.pid] = info
    return table


def has_env(pid: int, name: str, value: str) -> bool:
    """Whether process ``pid`` has ``name=value`` in its environment (own user only)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{name}={value}".encode() in env.split(b"\0")


class ProcessTracker:
    """The processes one run started: roots given by pid, their descendants and every
    process carrying the run's token; ``stop`` signals exactly those."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.known: dict[int, ProcInfo] = {}
        self._lock = threading.Lock()

    def add_root(self, pid: int) -> None:
        if (info := read_proc(pid)) is not None:
            with self._lock:
                self.known[pid] = info

    def _ours(self, info: ProcInfo) -> bool:
        seen = self.known.get(info.pid)
        return seen is not None and seen.start == info.start

    def scan(self) -> None:
        """Add the live descendants of known processes and the token's processes."""
        table = process_table()
        children: dict[int, list[int]] = collections.defaultdict(list)
        for info in table.values():
            children[info.ppid].append(info.pid)
        with self._lock:
            stack = [pid for pid, info in table.items() if self._ours(info)]
            stack += [
                pid
                for pid in table
                if pid not in self.known and has_env(pid, TOKEN_ENV, self.token)
            ]
            visited: set[int] = set()
            while stack:
                pid = stack.pop()
                if pid in visited:
                    continue
                visited.add(pid)
                info = mark_fork(table[pid], table)
                seen = self.known.get(pid)
                # A process read as a zombie or just after its exec shows "[comm]", one
                # read before its exec "[fork of PPID] ...": keep a full command once seen.
                if seen is None or seen.start != info.start or not info.cmd.startswith("["):
                    self.known[pid] = info
                stack.extend(children.get(pid, ()))

    def alive(self) -> list[ProcInfo]:
        """Known processes still running (zombies excluded: they hold no resources)."""
        with self._lock:
            known = dict(self.known)
        live = []
        for pid, seen in known.items():
            info = read_proc(pid)
            if info is not None and info.start == seen.start and info.state != "Z":
                live.append(info)
        return live

    def _signal(self, procs: Iterable[ProcInfo], sig: signal.Signals) -> None:
        procs = list(procs)
        # Groups led by one of our processes hold only its descendants: ours.
        leaders = {p.pid for p in procs} | {p.pid for p in self.known.values()}
        for pgid in sorted({p.pgid for p in procs if p.pgid in leaders}):
            try:
                os.killpg(pgid, sig)
            except OSError:
                pass
        for p in procs:
            try:
                os.kill(p.pid, sig)
            except OSError:
                pass

    def stop(self, grace: float = 5.0, kill_wait: float = 5.0) -> list[ProcInfo]:
        """SIGTERM every process of the run, SIGKILL those alive after ``grace`` s, then
        wait up to ``kill_wait`` s for them to exit; returns the ones still alive
        afterwards (normally none). A process found meanwhile (forked, or started with
        the token, while we signalled) gets the signal of the phase it is found in."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, kill_wait)):
            signalled: set[tuple[int, int]] = set()  # (pid, start)
            deadline = time.monotonic() + wait
            while True:
                self.scan()
                live = self.alive()
                if not live:
                    break
                fresh = [p for p in live if (p.pid, p.start) not in signalled]
                self._signal(fresh, sig)
                signalled.update((p.pid, p.start) for p in fresh)
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if not live:
                break
        return self.alive()

    def record(self, path: Path) -> None:
        """Write the tracked processes (pid, start, command) as JSON."""
        with self._lock:
            rows = [{**asdict(p), "cmd": p.cmd[:300]} for p in self.known.values()]
        write_atomic(path, json.dumps({"token": self.token, "processes": rows}, indent=2).encode())

    def spawn(
        self, cmd: list[str], log: Path, cwd: Path, env: Mapping[str, str]
    ) -> subprocess.Popen:
        """Start a tracked process in a session of its own, its output to ``log``."""
        with open_text(log) as fh:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        self.add_root(proc.pid)
        return proc


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child SIGKILLed when the thread starting it dies,
    also by SIGKILL (Linux ``prctl(PR_SET_PDEATHSIG)``; None elsewhere). ``prctl`` is
    looked up here, before the fork: the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl: nobody will signal
            os._exit(1)

    return preexec


def flower_env(home: Path, token: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every process a run starts: this one's, with its private
    ``FLWR_HOME``, the run's token, no runtime dependency installation or update check,
    this interpreter's folder first on PATH (the SuperLink starts ``flower-superexec`` /
    ``flwr-simulation`` by name), loopback past any proxy, then ``extra``."""
    env = dict(os.environ)
    env.update(
        FLWR_HOME=str(home),
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        FLWR_DISABLE_UPDATE_CHECK="1",
        PYTHONUNBUFFERED="1",
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        **{TOKEN_ENV: token},
    )
    env.update(extra or {})
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # a Simulation's own Ray waits this long for a client actor's process to register
    # (Ray's default, 60 s, is too short for actors importing torch on a loaded machine)
    env.setdefault("RAY_worker_register_timeout_seconds", "600")
    for key in ("no_proxy", "NO_PROXY"):  # the CLI talks HTTP to 127.0.0.1
        env[key] = ",".join(filter(None, [env.get(key), "127.0.0.1", "localhost"]))
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a process started in a session of its own and its process group at once
    (like a device losing power), and reap it."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=5)


LISTEN_PORTS = (20000, 32768)
"""Where :func:`free_port` looks first: below Linux's default ephemeral range (32768-60999),
from which the kernel also takes the local port of every outgoing connection. A port
found free there and handed to a server that binds it a second later cannot meanwhile
become the local end of one of the many connections Flower's processes open (two suites
side by side open hundreds a second); only another explicit choice could take it."""


_random = random.SystemRandom()  # no shared seed: two processes never try the same ports


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LISTEN_PORTS[1]


def free_port() -> int:
    """A free loopback TCP port for a server to bind, outside Flower's default ports:
    a random one below the ephemeral range (:data:`LISTEN_PORTS`) when one is free,
    else one the kernel picks."""
    low, high = LISTEN_PORTS[0], min(LISTEN_PORTS[1], _ephemeral_low())
    for port in _random.sample(range(low, high), min(64, max(high - low, 0))):
        if port in _RESERVED_PORTS:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _RESERVED_PORTS:
            return port


def executable(name: str) -> str:
    """Flower's console script beside this interpreter (the venv), else on PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FlwrRunError(f"`{name}` not found: install flwr[simulation] in this environment")
    return found
