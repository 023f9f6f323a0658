"""A Flower run dies with the process that drives it, even when that one is SIGKILLed.

:class:`Watchdog`: a child forked from the driver (no exec: nothing to import) holding
the read end of a pipe whose write end only the driver holds. While the driver lives, it
tracks the run's processes (:class:`~.processes.ProcessTracker`: the run's token and the
descendants of its processes); when the pipe closes without the driver's word (the
driver died, however), it stops them, removes the run's ``FLWR_HOME``, marks the run
``failed`` and writes ``flwr-logs/watchdog.json``. The processes the driver starts
itself also die with it (:func:`~.processes.die_with_parent`); Flower's SuperExecs,
ServerApp, ClientApps and Ray are started by those, in sessions of their own.

:data:`OWNER_ENV` names the driver (pid and start time) in every process of the run;
the ServerApp's :class:`OwnedRunDirectory` refuses to mark a run ``complete`` once that
process is gone: an orphaned ServerApp never completes a run.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fedram_flwr.engines.flwr.processes import ProcessTracker, read_proc
from fedram_flwr.rundir.nofollow import write_atomic
from fedram_flwr.rundir.outputs import RunDirectory

OWNER_ENV = "FEDRAM_FLWR_OWNER"
"""``<pid>:<start>`` of the process driving the run (every process of the run has it)."""

SCAN_EVERY_S = 1.0
"""How often the watchdog looks for new processes of the run while the driver lives."""

_RELEASE = b"x"  # the driver's word: the run is over and cleaned up


def owner_id(pid: int | None = None) -> str:
    """``<pid>:<start>`` of process ``pid`` (default: this one), for :data:`OWNER_ENV`."""
    pid = os.getpid() if pid is None else pid
    info = read_proc(pid)
    return f"{pid}:{info.start if info else 0}"


def owner_alive(owner: str) -> bool:
    """Whether the process named by :func:`owner_id` still runs (not a zombie)."""
    pid, _, start = owner.partition(":")
    info = read_proc(int(pid)) if pid.isdigit() else None
    return info is not None and str(info.start) == start and info.state != "Z"


class OwnedRunDirectory(RunDirectory):
    """The run directory of a ServerApp started by ``run_with_flwr``: marking the run
    ``complete`` once the driver named in ``env[OWNER_ENV]`` is gone marks it ``failed``
    instead and raises (an orphan, about to be stopped by the watchdog). Without the
    variable (``flwr run .`` by hand) it is a plain RunDirectory."""

    def __init__(self, path: str | Path, env: Mapping[str, str] | None = None) -> None:
        super().__init__(path)
        self.owner = (os.environ if env is None else env).get(OWNER_ENV)

    def set_status(self, status: str, **extra: Any) -> None:
        if status == "complete" and self.owner and not owner_alive(self.owner):
            error = (
                f"orphaned: the fedram process driving this run ({self.owner.split(':')[0]}) "
                "is gone; an orphaned ServerApp does not complete a run"
            )
            super().set_status("failed", engine="flwr", error=error)
            raise RuntimeError(error)
        super().set_status(status, **extra)


class Watchdog:
    """The forked watchdog of one run (see the module docstring)."""

    def __init__(
        self, token: str, home: Path, run_dir: Path | None, logs: Path | None = None
    ) -> None:
        read, self._write = os.pipe()
        driver = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:  # the watchdog: never returns
            status = 1
            try:
                os.close(self._write)
                _watch(read, token, home, run_dir, logs, driver)
                status = 0
            finally:
                os._exit(status)
        os.close(read)

    def release(self, timeout: float = 10.0) -> None:
        """The run is over and cleaned up: dismiss the watchdog and reap it."""
        with contextlib.suppress(OSError):
            os.write(self._write, _RELEASE)
        with contextlib.suppress(OSError):
            os.close(self._write)
        deadline = time.monotonic() + timeout
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(self.pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
                time.sleep(0.05)


def _watch(
    fd: int, token: str, home: Path, run_dir: Path | None, logs: Path | None, driver: int
) -> None:
    """The watchdog's life: detach, track the run while the pipe ``fd`` is open, clean
    up when it closes without :data:`_RELEASE`: stop the processes, mark ``run_dir``
    failed (when there is one), write ``watchdog.json`` to ``logs`` (default: the run's
    ``flwr-logs``)."""
    os.setsid()  # no terminal's Ctrl-C or hang-up: the driver handles those
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL if signum == signal.SIGTERM else signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):  # hold none of the driver's pipes (a reader waits for their EOF)
        os.dup2(devnull, std)
    os.closerange(3, fd)
    os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
    tracker = ProcessTracker(token)
    while True:
        ready, _, _ = select.select([fd], [], [], SCAN_EVERY_S)
        if ready:
            if os.read(fd, 1) == _RELEASE:
                return
            break  # end of file: the driver died
        tracker.scan()
    survivors = tracker.stop(grace=3.0)
    shutil.rmtree(home, ignore_errors=True)
    out = RunDirectory(run_dir) if run_dir is not None else None
    if out is not None and out.status() != "complete":
        out.set_status(
            "failed",
            engine="flwr",
            error=f"interrupted: the fedram process driving this run (pid {driver}) died; "
            "the watchdog stopped its Flower processes",
        )
    record = {
        "driver": driver,
        "token": token,
        "stopped": [asdict(p) for p in tracker.known.values()],
        "survivors": [asdict(p) for p in survivors],
    }
    logs = logs or (run_dir / "flwr-logs" if run_dir is not None else None)
    if logs is not None and logs.is_dir():
        write_atomic(logs / "watchdog.json", json.dumps(record, indent=2).encode())
