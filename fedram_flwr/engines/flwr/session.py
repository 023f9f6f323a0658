"""One ``flwr run`` in progress (:class:`FlwrRun`) on a :class:`~.federation.Federation`:
the ``flwr run`` process, the relay of its output, fault injection, its timing and its
end; :func:`~fedram_flwr.engines.flwr.run.run_with_flwr` drives it."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedram_flwr.engines.flwr.errors import (
    LOG_TAIL,
    FlwrRunError,
    TimeLimitError,
    root_cause,
    run_error,
)
from fedram_flwr.engines.flwr.federation import Federation, check_options
from fedram_flwr.engines.flwr.processes import die_with_parent, executable
from fedram_flwr.rundir.nofollow import open_text, write_atomic
from fedram_flwr.rundir.outputs import RunDirectory

__all__ = ["FlwrRun"]

STOP_RUN_S = 60.0
"""How long ``flwr stop`` may take to stop a failed run on a federation that goes on."""


class FlwrRun:
    """One ``flwr run`` on ``federation``: the CLI process, its log and the run folder
    ``out`` it fills; ``kill_after`` {partition: round} SIGKILLs the federation's
    SuperNodes once those rounds are recorded; ``echo``: relay the run's output to this
    process's stdout (it always goes to ``flwr-logs/flwr-run.log``)."""

    def __init__(
        self,
        federation: Federation,
        out: RunDirectory,
        timeout: float,
        *,
        kill_after: Mapping[int, int] | None = None,
        echo: bool = True,
    ) -> None:
        check_options(federation.engine, federation.num_supernodes, None, kill_after or {})
        self.federation = federation
        self.out = out
        self.timeout = timeout
        self.kill_after = dict(kill_after or {})
        self.echo = echo
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.logs = out.path / "flwr-logs"
        self.flwr_log = self.logs / "flwr-run.log"
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)
        self.faults: list[dict[str, Any]] = []
        self.flwr: subprocess.Popen | None = None
        self.relay: threading.Thread | None = None
        self.run_id: str | None = None
        self.timing: dict[str, Any] = {}
        self._installs = False  # holds the federation's install claim

    def mark(self, event: str) -> None:
        self.timing.setdefault(event, round(time.monotonic() - self.started, 3))

    def error(self, message: str, kind: type[FlwrRunError] = FlwrRunError) -> FlwrRunError:
        """A FlwrRunError naming the root cause, with the tails of both logs."""
        return run_error(message, self.tail, self.flwr_log, self.federation.superlink_log, kind)

    def _past_deadline(self) -> None:
        """Raise :class:`TimeLimitError` once the run's time limit has run out."""
        if time.monotonic() > self.deadline:
            raise self.error(f"flwr run timed out after {self.timeout:.0f} s", TimeLimitError)

    def run(self, app: Path, run_config: Path) -> None:
        """``flwr run . <connection> --stream`` in ``app``; returns when the run is over."""
        self._installs = self.federation.claim_install(self.deadline - time.monotonic())
        try:
            self._submit(app, run_config)
        finally:
            self._release_install(False)

    def _release_install(self, installed: bool) -> None:
        if self._installs:
            self._installs = False
            self.federation.release_install(installed)

    def _submit(self, app: Path, run_config: Path) -> None:
        fed = self.federation
        cmd = [executable("flwr"), "run", ".", fed.connection, "--run-config", str(run_config)]
        if fed.engine == "simulation":
            cmd += ["--federation-config", f"num-supernodes={fed.num_supernodes}"]
        cmd.append("--stream")
        header = f"# cd {app} && FLWR_HOME={fed.home} {' '.join(cmd)}\n"
        write_atomic(self.flwr_log, header.encode())
        self.flwr = subprocess.Popen(
            cmd,
            cwd=app,
            env=fed.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        fed.tracker.add_root(self.flwr.pid)
        self.relay = threading.Thread(target=self._relay, daemon=True)
        self.relay.start()
        while self.flwr.poll() is None:
            self._past_deadline()
            fed.record()
            fed.check_supernodes()
            rows = self.out.read_metrics()
            if len(rows) >= 1:
                self.mark("server-started")  # round 0 (initial evaluation) recorded
                self._release_install(True)
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
        """SIGKILL each SuperNode whose round has been recorded (with the processes it
        started, at once, like a device)."""
        for partition, after in sorted(self.kill_after.items()):
            if last_round < after:
                continue
            del self.kill_after[partition]
            pid = self.federation.kill_supernode(partition)
            if pid is None:
                continue
            elapsed = round(time.monotonic() - self.started, 3)
            self.faults.append(
                {"partition": partition, "pid": pid, "after-round": after, "at": elapsed}
            )
            write_atomic(self.logs / "faults.json", json.dumps(self.faults, indent=2).encode())
            if self.echo:
                print(
                    f"fedram: killed SuperNode {partition} (pid {pid}) after round {after}",
                    file=sys.stderr,
                    flush=True,
                )

    def _relay(self) -> None:
        """Copy ``flwr run`` output to our stdout and its log, keeping the last lines."""
        assert self.flwr is not None and self.flwr.stdout is not None
        with open_text(self.flwr_log, append=True) as log:
            for line in self.flwr.stdout:
                log.write(line)
                log.flush()
                self.tail.append(line.rstrip("\n"))
                if "Successfully started run" in line:
                    self.mark("run-started")
                    self.run_id = line.rsplit(" ", 1)[-1].strip()
                if self.echo:
                    sys.stdout.write(line)
                    sys.stdout.flush()

    def end(self, *, shared: bool) -> None:
        """Stop this run's ``flwr run`` process and, on a ``shared`` federation (one that
        goes on after this run), its Flower run (``flwr stop``) if it did not complete;
        write timing.json."""
        fed = self.federation
        if self.flwr is not None and self.flwr.poll() is None:
            self.flwr.terminate()
            try:
                self.flwr.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.flwr.kill()
                self.flwr.wait(timeout=10)
        superlink_up = fed.superlink is not None and fed.superlink.poll() is None
        if shared and superlink_up and self.run_id and self.out.status() != "complete":
            subprocess.run(
                [executable("flwr"), "stop", self.run_id, fed.connection],
                cwd=fed.home,
                env=fed.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=STOP_RUN_S,
                check=False,
            )
        if self.relay is not None:
            self.relay.join(timeout=5)
        self.mark("total")
        self.timing["round-seconds"] = _mean_round_seconds(self.out.read_metrics())
        write_atomic(self.logs / "timing.json", json.dumps(self.timing, indent=2).encode())


def _mean_round_seconds(rows: list[dict]) -> float | None:
    """Mean server-side round time, leaving out round 1 (it starts Ray's actors)."""
    times = [r["round-seconds"] for r in rows if "round-seconds" in r and r["round"] > 1]
    return round(sum(times) / len(times), 4) if times else None
