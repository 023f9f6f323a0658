"""Flower's Simulation and Deployment Engines: a scenario run through ``flwr run .``.

``run_with_flwr`` starts its own ``flower-superlink`` on free loopback ports, writes
a private ``FLWR_HOME/config.toml`` whose only connection points at it, runs ``flwr run
. <connection> --run-config <toml> [--federation-config num-supernodes=K] --stream``
(in a staged copy of the app that yields the same FAB, or in the app root itself),
relays its output line by line and waits until the run directory's status is
``complete``. Two engines:

* ``simulation``: ``flower-superlink --simulation`` runs K virtual SuperNodes on Ray;
* ``deployment``: ``flower-superlink`` (Fleet API on its own port) and K real
  ``flower-supernode`` processes, SuperNode i with ``--node-config "partition-id=i
  num-partitions=K"`` and its own ClientAppIo port; insecure, or TLS with
  :class:`TlsFiles` (the SuperLink serves its certificate, SuperNodes and ``flwr`` trust
  the CA). ``kill_after`` SIGKILLs chosen SuperNodes (their process groups) once a
  round is recorded: a device dying mid-run.

Whatever happens (failure, timeout, Ctrl-C, SIGTERM) it then stops every process it
started: the SuperLink, the SuperNodes, the ``flower-superexec`` processes they spawn
(in sessions of their own), ``flwr-serverapp`` / ``flwr-clientapp``,
``flwr-simulation`` and Ray's processes (``gcs_server``, ``raylet``, agents, actors).
They are found by walking the process tree from the pids it started, polled during the
run, and by a token in their environment, and are signalled by pid / process group
only: nothing else on the machine is touched. Logs go to ``<run_dir>/flwr-logs/``:
superlink.log, supernode-<i>.log, flwr-run.log, run-config.toml, processes.json (what
was started), supernodes.json (partition id -> pid), faults.json and timing.json.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import tomli
import tomli_w

from fedram_flwr.app_config import APP_ROOT, scenario_from_run_config
from fedram_flwr.outputs import RunDirectory

APP_DIR = APP_ROOT
"""The Flower app (``pyproject.toml`` with ``[tool.flwr.app]``): parent of the package."""

Engine = Literal["simulation", "deployment"]
ENGINES: tuple[Engine, ...] = ("simulation", "deployment")
TOKEN_ENV = "FEDRAM_FLWR_RUN_TOKEN"
"""Every process this module starts (and their descendants) carries this variable."""

DEPLOYMENT_LATENCY_ENV = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.2"}
"""Flower 1.39's one latency knob of a deployment: the SuperExec processes of the
SuperLink and SuperNodes look for new ServerApp / ClientApp tasks every 1 s by
default. The SuperNode's Fleet poll (3 s) and the legacy Grid's reply poll (3 s) are
fixed in Flower's code (``start_client_internal``, ``Grid.send_and_receive``)."""

FLOWER_PROCESS_NAMES = (
    "bin/flwr ",
    "flower-superlink",
    "flower-superexec",
    "flower-supernode",
    "flwr-simulation",
    "flwr-serverapp",
    "flwr-clientapp",
    "raylet",
    "gcs_server",
    "ray::",
    "ray/dashboard",
    "ray/_private",
    "ray/autoscaler",
)
"""Command-line fragments of Flower's and Ray's processes (for ``ps`` checks)."""

# Flower's defaults (8000, 9091-9096) and the managed ``local`` SuperLink's (39091/3).
_RESERVED_PORTS = frozenset({8000, 9091, 9092, 9093, 9094, 9095, 9096, 39091, 39093})
_LOG_TAIL = 60


class FlwrRunError(RuntimeError):
    """A ``flwr run`` failed, timed out or left no complete run directory."""


# ----------------------------------------------------------------- process tracking
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


def flower_processes() -> dict[int, str]:
    """``ps``: pid -> command of every live Flower / Ray process on the machine."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    found: dict[int, str] = {}
    for line in out.splitlines():
        pid, stat, args = (line.split(None, 2) + ["", ""])[:3]
        if not stat.startswith("Z") and any(name in args for name in FLOWER_PROCESS_NAMES):
            found[int(pid)] = args
    return found


def surviving_processes(run_dir: str | Path) -> dict[int, str]:
    """Processes a finished ``flwr run`` started that are still alive (pid -> command):
    the ones ``flwr-logs/processes.json`` records (same pid and start time) and any
    carrying its token. Empty when the run cleaned up after itself."""
    record = json.loads((Path(run_dir) / "flwr-logs" / "processes.json").read_text())
    alive: dict[int, str] = {}
    for p in record["processes"]:
        info = read_proc(p["pid"])
        if info is not None and info.start == p["start"] and info.state != "Z":
            alive[info.pid] = info.cmd
    for pid, info in process_table().items():
        if info.state != "Z" and has_env(pid, TOKEN_ENV, record["token"]):
            alive[pid] = info.cmd
    return alive


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
            # A process read just after its exec (or as a zombie) shows "[comm]" instead of
            # its command line: keep the full one once seen.
            self.known.update(
                {pid: table[pid] for pid in stack if not table[pid].cmd.startswith("[")}
            )
            stack += [
                pid
                for pid in table
                if pid not in self.known and has_env(pid, TOKEN_ENV, self.token)
            ]
            while stack:
                pid = stack.pop()
                if pid in table and not self._ours(table[pid]):
                    self.known[pid] = table[pid]
                stack.extend(c for c in children.get(pid, ()) if not self._ours(table[c]))

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

    def stop(self, grace: float = 5.0) -> list[ProcInfo]:
        """SIGTERM, then SIGKILL after ``grace`` s, every process of the run; returns
        the ones still alive afterwards (normally none)."""
        self.scan()
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            live = self.alive()
            if not live:
                break
            self._signal(live, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                self.scan()  # children forked while we were signalling
                if not self.alive():
                    break
                time.sleep(0.1)
        return self.alive()

    def record(self, path: Path) -> None:
        """Write the tracked processes (pid, start, command) as JSON."""
        with self._lock:
            rows = [{**asdict(p), "cmd": p.cmd[:300]} for p in self.known.values()]
        path.write_text(json.dumps({"token": self.token, "processes": rows}, indent=2))


# ------------------------------------------------------------------------- helpers
def free_port() -> int:
    """A free loopback TCP port outside Flower's default ports."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _RESERVED_PORTS:
            return port


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a TLS-secured SuperLink: the CA certificate that clients trust
    (SuperNodes' ``--root-certificates``, the connection's ``root-certificates``), and
    the SuperLink's own certificate and private key."""

    ca: Path
    cert: Path
    key: Path


def generate_tls_files(folder: Path, hosts: Iterable[str] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A throwaway CA and a SuperLink certificate it signs, valid for ``hosts`` (IPs or
    DNS names) for two days, written to ``folder`` (ca.crt, server.pem, server.key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def san(host: str) -> x509.GeneralName:
        try:
            return x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            return x509.DNSName(host)

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())

    def certificate(subject: str, public_key: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name("fedram test CA"))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
        )

    ca = (
        certificate("fedram test CA", ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = (
        certificate("fedram superlink", key.public_key())
        .add_extension(x509.SubjectAlternativeName([san(h) for h in hosts]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(folder / "ca.crt", folder / "server.pem", folder / "server.key")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    files.key.chmod(0o600)
    return files


def _executable(name: str) -> str:
    """Flower's console script beside this interpreter (the venv), else on PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FlwrRunError(f"`{name}` not found: install flwr[simulation] in this environment")
    return found


def _tail(path: Path, lines: int = _LOG_TAIL) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _check_app(app_dir: Path) -> None:
    """``flwr run`` rewrites a pyproject that still has ``[tool.flwr.federations]``
    (1.39 migrates it to FLWR_HOME and comments it out): refuse instead."""
    pyproject = tomli.loads((app_dir / "pyproject.toml").read_text())
    if "federations" in pyproject.get("tool", {}).get("flwr", {}):
        raise FlwrRunError(
            f"{app_dir / 'pyproject.toml'} has a [tool.flwr.federations] section: "
            "flwr 1.39 would migrate it and rewrite the file. Remove it; SuperLink "
            "connections live in $FLWR_HOME/config.toml."
        )


def stage_app(app_dir: Path, dest: Path) -> Path:
    """Copy the app's files that a FAB may hold to ``dest`` and return it.

    ``flwr run .`` (1.39) walks *every* file under the app before filtering, and with
    the virtualenv inside the project that is ~40k files (8+ s per run here). This
    copies what is left after ``.gitignore`` and Flower's own exclusions, pruning
    ignored directories without descending into them; Flower then filters the copy
    exactly as it would the original, so the FAB's content is the same."""
    from flwr.cli.utils import build_pathspec, load_gitignore_patterns
    from flwr.common.constant import FAB_EXCLUDE_PATTERNS

    gitignore = app_dir / ".gitignore"
    patterns = load_gitignore_patterns(gitignore) if gitignore.is_file() else []
    with warnings.catch_warnings():  # Flower's pattern style, deprecated by pathspec
        warnings.simplefilter("ignore", DeprecationWarning)
        ignored = build_pathspec(patterns)
        pruned = build_pathspec([*patterns, *FAB_EXCLUDE_PATTERNS, ".git/"])
    for dirpath, dirnames, filenames in os.walk(app_dir):
        here = Path(dirpath)
        rel = here.relative_to(app_dir)
        dirnames[:] = [
            d
            for d in dirnames
            if not (here / d).is_symlink()
            and not pruned.match_file(f"{(rel / d).as_posix()}/")
            and not pruned.match_file(f"{(rel / d).as_posix()}/_")
        ]
        for name in filenames:
            src = here / name
            if src.is_symlink() or ignored.match_file((rel / name).as_posix()):
                continue
            (dest / rel).mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel / name)
    return dest


def _wait_healthy(
    proc: subprocess.Popen, port: int, log: Path, deadline: float, ca: Path | None = None
) -> None:
    """Wait until the SuperLink answers ``/health`` (over HTTPS trusting ``ca`` when
    given; fails early if it exits)."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if ca is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca)))
    direct = urllib.request.build_opener(*handlers)  # no proxy
    url = f"{'https' if ca else 'http'}://127.0.0.1:{port}/health"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FlwrRunError(
                f"flower-superlink exited with code {proc.returncode} at startup; "
                f"log {log}:\n{_tail(log)}"
            )
        try:
            with direct.open(url, timeout=0.5) as res:
                if res.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise FlwrRunError(f"flower-superlink did not become ready; log {log}:\n{_tail(log)}")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception|Interrupt)\w*: .+")
_EXIT_CODE_LINE = re.compile(r"Exit Code: \d+")


def root_cause(lines: Iterable[str]) -> str | None:
    """The last exception line (``ValueError: ...``) in a log, else Flower's last
    ``Exit Code: N`` line, else None."""
    exception = exit_code = None
    for line in lines:
        clean = _ANSI.sub("", line).strip()
        if _EXCEPTION_LINE.match(clean):
            exception = clean
        elif _EXIT_CODE_LINE.search(clean):
            exit_code = clean
    return exception or exit_code


# ---------------------------------------------------------------------------- run
class _FlwrRun:
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
        if engine not in ENGINES:
            raise ValueError(f"engine: unknown {engine!r}; allowed values: {', '.join(ENGINES)}")
        if tls is not None and engine != "deployment":
            raise ValueError("tls: only the deployment engine runs a secured SuperLink")
        bad = sorted(set(kill_after or {}) - set(range(num_supernodes)))
        if engine != "deployment" and kill_after or bad:
            raise ValueError(
                f"kill_after: partition ids {bad or sorted(kill_after or {})} are not "
                f"SuperNodes of this run; allowed: 0..{num_supernodes - 1} (deployment only)"
            )
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
        self.tail: collections.deque[str] = collections.deque(maxlen=_LOG_TAIL)
        self.superlink: subprocess.Popen | None = None
        self.supernodes: dict[int, subprocess.Popen] = {}
        self.fleet_port: int | None = None
        self.faults: list[dict[str, Any]] = []
        self.flwr: subprocess.Popen | None = None
        self.relay: threading.Thread | None = None
        self.timing: dict[str, Any] = {}
        self.env = dict(os.environ)
        self.env.update(
            FLWR_HOME=str(self.home),
            FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
            FLWR_DISABLE_UPDATE_CHECK="1",
            PYTHONUNBUFFERED="1",
            # The SuperLink starts flower-superexec / flwr-simulation by name.
            PATH=os.pathsep.join([str(Path(sys.executable).parent), self.env.get("PATH", "")]),
            **{TOKEN_ENV: self.tracker.token},
        )
        self.env.update(env or {})
        self.env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        for key in ("no_proxy", "NO_PROXY"):  # the CLI talks HTTP to 127.0.0.1
            self.env[key] = ",".join(filter(None, [self.env.get(key), "127.0.0.1", "localhost"]))

    def mark(self, event: str) -> None:
        self.timing.setdefault(event, round(time.monotonic() - self.started, 3))

    def error(self, message: str) -> FlwrRunError:
        """A FlwrRunError naming the root cause, with the tails of both logs."""
        cause = root_cause(self.tail) or root_cause(_tail(self.superlink_log).splitlines())
        return FlwrRunError(
            f"{message}"
            + (f": {cause}" if cause else "")
            + f"\n--- flwr run, last lines ({self.flwr_log}) ---\n"
            + "\n".join(_ANSI.sub("", line) for line in list(self.tail)[-40:])
            + f"\n--- superlink, last lines ({self.superlink_log}) ---\n"
            + _ANSI.sub("", _tail(self.superlink_log, 15))
        )

    def _spawn(self, cmd: list[str], log: Path) -> subprocess.Popen:
        """Start a tracked Flower process in a session of its own, output to ``log``."""
        with log.open("w") as fh:
            proc = subprocess.Popen(
                cmd,
                cwd=self.home,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.tracker.add_root(proc.pid)
        return proc

    def _security(self, *, server: bool) -> list[str]:
        """TLS flags of the SuperLink (``server``) or of a SuperNode; else --insecure."""
        if self.tls is None:
            return ["--insecure"]
        if server:
            return [
                f"--ssl-ca-certfile={self.tls.ca}",
                f"--ssl-certfile={self.tls.cert}",
                f"--ssl-keyfile={self.tls.key}",
            ]
        return [f"--root-certificates={self.tls.ca}"]

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
                    _executable("flower-superlink"),
                    *mode,
                    *self._security(server=True),
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
                _wait_healthy(self.superlink, port, self.superlink_log, ready_by, ca)
                break
            except FlwrRunError:
                if self.superlink.poll() is None or attempt == 2:
                    raise
        self.mark("superlink-ready")
        connection: dict[str, Any] = {"address": f"127.0.0.1:{port}"}
        if self.tls is None:
            connection["insecure"] = True
        else:
            connection["root-certificates"] = str(self.tls.ca)
        (self.home / "config.toml").write_text(
            tomli_w.dumps({"superlink": {"default": self.connection, self.connection: connection}})
        )

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
                    _executable("flower-supernode"),
                    *self._security(server=False),
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
        cmd = [_executable("flwr"), "run", ".", self.connection, "--run-config", str(run_config)]
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
        )
        self.tracker.add_root(self.flwr.pid)
        self.relay = threading.Thread(target=self._relay, daemon=True)
        self.relay.start()
        while self.flwr.poll() is None:
            if time.monotonic() > self.deadline:
                raise self.error(f"flwr run timed out after {self.timeout:.0f} s")
            self.tracker.scan()
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

    def _inject_faults(self, last_round: int) -> None:
        """SIGKILL the process group of each SuperNode whose round has been recorded
        (the SuperNode and the processes it started die at once, like a device)."""
        for partition, after in sorted(self.kill_after.items()):
            proc = self.supernodes.get(partition)
            if proc is None or last_round < after or proc.poll() is not None:
                continue
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(OSError):
                    kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
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
        return leftovers


def _mean_round_seconds(rows: list[dict]) -> float | None:
    """Mean server-side round time, leaving out round 1 (it starts Ray's actors)."""
    times = [r["round-seconds"] for r in rows if "round-seconds" in r and r["round"] > 1]
    return round(sum(times) / len(times), 4) if times else None


@contextlib.contextmanager
def _signals_raise(*signums: signal.Signals) -> Iterator[None]:
    """Turn these signals into ``SystemExit(128 + n)`` while inside (main thread and
    default handlers only), so that a plain ``kill`` still runs our cleanup."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    with _handlers(signums, handler, only_default=True):
        yield


@contextlib.contextmanager
def _signals_ignored(*signums: signal.Signals) -> Iterator[None]:
    """Ignore these signals while inside (main thread only)."""
    with _handlers(signums, signal.SIG_IGN, only_default=False):
        yield


@contextlib.contextmanager
def _handlers(
    signums: Iterable[signal.Signals],
    handler: Callable[[int, Any], Any] | signal.Handlers,
    *,
    only_default: bool,
) -> Iterator[None]:
    """Install ``handler`` for ``signums`` while inside; restore the previous ones."""
    saved: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in signums:
            current = signal.getsignal(signum)
            if only_default and current is not signal.SIG_DFL:
                continue
            saved[signum] = current
            signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)


def run_with_flwr(
    scenario_path: str | Path,
    seed: int,
    run_dir: Path,
    *,
    overrides: str = "",
    timeout: float = 900,
    stage: bool = True,
    engine: Engine = "simulation",
    tls: TlsFiles | None = None,
    kill_after: Mapping[int, int] | None = None,
    env: Mapping[str, str] | None = None,
) -> RunDirectory:
    """Run (scenario, seed) on Flower's Simulation or Deployment Engine (``engine``)
    with ``flwr run .``; one SuperNode per client (``data.num_clients``).

    ``scenario_path``: absolute, relative to the working directory, or relative to
    the app; ``overrides`` as in the run config (``"rounds=6,eval_every=3"``).
    Returns the run directory once its status is ``complete``; raises
    :class:`FlwrRunError` (root cause first, then the logs' tails) otherwise, with
    the status set to ``failed``. Every process started here is stopped before
    returning or raising. ``stage``: run ``flwr run .`` in a copy of the app's FAB
    files (:func:`stage_app`: the same FAB, 8 s faster) rather than in the project
    root itself. Deployment only: ``tls`` secures the SuperLink's APIs;
    ``kill_after`` {partition id: round} SIGKILLs that SuperNode once the round is
    recorded. ``env``: extra environment of every process started (e.g.
    :data:`DEPLOYMENT_LATENCY_ENV`).
    """
    t0 = time.monotonic()
    _check_app(APP_DIR)
    path = Path(scenario_path).expanduser()
    if not path.is_absolute() and not path.exists():
        path = APP_DIR / path
    path = path.resolve()  # absolute: the ServerApp runs on this machine
    # Validate early, bypassing the cache: the file may have changed since.
    scenario = scenario_from_run_config.__wrapped__(str(path), overrides)

    out = RunDirectory(Path(run_dir).expanduser().resolve())
    (out.path / "flwr-logs").mkdir(parents=True, exist_ok=True)
    for stale in ("metrics.jsonl", "summary.json", "final_model.npz"):
        (out.path / stale).unlink(missing_ok=True)  # never mistake an older run's files
    out.set_status("starting", engine="flwr")
    run_config = out.path / "flwr-logs" / "run-config.toml"
    run_config.write_text(
        tomli_w.dumps(
            {
                "scenario": str(path),
                "seed": int(seed),
                "overrides": overrides,
                "run-dir": str(out.path),
            }
        )
    )
    run = _FlwrRun(
        out,
        scenario.data.num_clients,
        timeout - (time.monotonic() - t0),
        engine=engine,
        tls=tls,
        kill_after=kill_after,
        env=env,
    )
    run.timing["engine"] = engine
    error: BaseException | None = None
    try:
        with _signals_raise(signal.SIGTERM, signal.SIGHUP):
            run.start_superlink()
            if engine == "deployment":
                run.start_supernodes()
            run.run(stage_app(APP_DIR, run.home / "app") if stage else APP_DIR, run_config)
    except BaseException as err:
        error = err
        raise
    finally:
        with _signals_ignored(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            leftovers = run.stop()  # bounded (~15 s at worst): not interruptible
        if out.status() != "complete":
            first = (str(error).splitlines() or [""])[0]
            out.set_status(
                "failed", engine="flwr", error=f"{type(error).__name__}: {first}".rstrip(": ")
            )
        if leftovers:
            msg = "processes of this flwr run survived SIGKILL: " + ", ".join(
                f"{p.pid} ({p.cmd[:60]})" for p in leftovers
            )
            if error is None:
                raise FlwrRunError(msg)
            print(f"warning: {msg}", file=sys.stderr)
    return out
