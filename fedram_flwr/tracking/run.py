"""One run of ``fedram run`` followed by trackers: :class:`TrackedRun` reads the run
folder as the run writes it (``status.json``, then each new whole line of
``metrics.jsonl``) and logs each row to every tracker, from a thread of the process that
drives the run, whatever the engine (in-process, or a ServerApp in Flower's processes).

The run folder stays the source of truth: a tracker that fails is reported once, loudly,
on stderr, and dropped for the rest of the run; the run goes on and its folder is whole.
The folder keeps the trackers' run ids and the last round logged in ``tracking.json``,
so a run that resumes from its checkpoint (its ``status.json`` says ``resumed-from``)
continues the same tracked runs, logging the rounds they have not seen; a run started
over gets new ones.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fedram_flwr.rundir.nofollow import write_atomic
from fedram_flwr.tracking.trackers import RunInfo, Tracker, tracker
from fedram_flwr.tracking.values import metrics_of, params_of, summary_metrics

STATE_FILE = "tracking.json"
"""In a run folder: the trackers' run ids and the last round logged."""
POLL_S = 1.0
"""How often the run folder is read for new rows while the run goes on."""

CLOCK_SLACK_S = 0.05
"""How much older than the start of the attempt its own ``status.json`` may look (the
file system's clock is coarser than Python's)."""

_reported: set[str] = set()  # trackers whose failure this process has reported


def report_failure(name: str, what: str, err: BaseException) -> None:
    """Say on stderr, once per tracker and process, that ``name`` failed (the runs go on)."""
    if name in _reported:
        return
    _reported.add(name)
    print(
        f"fedram: TRACKING FAILED: {name} could not {what}: {type(err).__name__}: {err}\n"
        f"fedram: the runs go on without {name} (their folders hold every row); further "
        f"failures of {name} are not repeated",
        file=sys.stderr,
        flush=True,
    )


def end_of(exc: BaseException | None) -> str:
    """The tracked status of a run that ended with ``exc``."""
    if exc is None:
        return "complete"
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class TrackerSet:
    """The trackers of one run, each call guarded: a tracker that fails is reported once
    (:func:`report_failure`) and dropped; the others go on."""

    def __init__(self, names: list[str]) -> None:
        self.live: dict[str, Tracker] = {name: tracker(name) for name in dict.fromkeys(names)}

    def _call(self, name: str, what: str, method: str, *args: Any) -> Any:
        try:
            return getattr(self.live[name], method)(*args)
        except Exception as err:
            report_failure(name, what, err)
            self.live.pop(name, None)
            return None

    def open(self, info: RunInfo, ids: dict[str, str]) -> dict[str, str]:
        """Open (or continue, for the trackers in ``ids``) the run; the trackers' ids."""
        opened = {}
        for name in list(self.live):
            run_id = self._call(name, "open a run", "open", info, ids.get(name))
            if run_id is not None:
                opened[name] = run_id
        return opened

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """One step's numbers to every tracker."""
        for name in list(self.live):
            self._call(name, "log a round", "log", step, metrics)

    def finish(self, summary: dict[str, float], files: list[Path]) -> None:
        """The summary's numbers and the files to every tracker."""
        for name in list(self.live):
            self._call(name, "log the summary and plots", "finish", summary, files)

    def close(self, status: str) -> None:
        """End the run in every tracker (``complete``, ``failed``, ``interrupted``)."""
        for name in list(self.live):
            self._call(name, "end the run", "close", status)


class TrackedRun:
    """Follow the run written in ``run_dir`` with the trackers ``names`` while inside
    (``with TrackedRun(...): run it``); on leaving, the rows left, then (a complete run)
    the summary and ``files`` (``summary.json`` and the PNGs the run folder holds), and
    the run's end: ``complete``, ``failed`` (an exception) or ``interrupted`` (Ctrl-C)."""

    def __init__(
        self, names: list[str], run_dir: Path, info: RunInfo, *, poll_s: float = POLL_S
    ) -> None:
        self.trackers = TrackerSet(names)
        self.run_dir = Path(run_dir)
        self.info = info
        self.poll_s = poll_s
        self._opened = False
        self._ids: dict[str, str] = {}
        self._logged = -1  # the last round logged
        self._offset = 0  # bytes of metrics.jsonl read
        self._since = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TrackedRun:
        self._since = time.time()
        self._thread = threading.Thread(target=self._follow, name="fedram-tracking", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        status = end_of(exc)
        try:
            self.poll()
            if not self._opened:  # ended before its first row: a tracked run says how
                self._open(resumed=bool(self._saved().get("ids")))
            if status == "complete":
                summary = read_json(self.run_dir / "summary.json")
                files = [self.run_dir / "summary.json", *sorted(self.run_dir.glob("*.png"))]
                numbers = summary_metrics(summary) if isinstance(summary, dict) else {}
                self.trackers.finish(numbers, [f for f in files if f.is_file()])
        except Exception as err:  # reading the folder: never fails the run
            report_failure("tracking", "read the run folder", err)
        self.trackers.close(status)

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception as err:
                report_failure("tracking", "read the run folder", err)

    def _saved(self) -> dict[str, Any]:
        state = read_json(self.run_dir / STATE_FILE)
        return state if isinstance(state, dict) else {}

    def _open(self, resumed: bool) -> None:
        saved = self._saved() if resumed else {}
        ids = saved.get("ids") or {}
        self._logged = int(saved.get("logged-round", -1)) if ids else -1
        self._ids = self.trackers.open(self.info, ids)
        self._opened = True
        self._save()

    def _save(self) -> None:
        state = {"ids": self._ids, "logged-round": self._logged}
        if self.run_dir.is_dir():
            write_atomic(self.run_dir / STATE_FILE, json.dumps(state, indent=2).encode())

    def poll(self) -> None:
        """Log the rows written since the last poll (opening the tracked runs once the
        run has started)."""
        if not self._opened:
            path = self.run_dir / "status.json"
            try:
                written = path.stat().st_mtime
            except FileNotFoundError:
                return
            if written < self._since - CLOCK_SLACK_S:
                return  # the previous attempt's record: this one has not started yet
            status = read_json(path)
            self._open(resumed=isinstance(status, dict) and "resumed-from" in status)
        try:
            with (self.run_dir / "metrics.jsonl").open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        whole = data[: data.rfind(b"\n") + 1]
        self._offset += len(whole)
        logged = self._logged
        for line in whole.splitlines():
            row = json.loads(line)
            if row["round"] <= self._logged:
                continue  # logged before the run resumed
            self.trackers.log(row["round"], metrics_of(row))
            self._logged = row["round"]
        if self._logged != logged:
            self._save()


def tracked(
    names: list[str],
    run_dir: Path,
    *,
    out: Path,
    scenario: dict[str, Any],
    label: str,
    seed: int,
    **run: str,
) -> contextlib.AbstractContextManager:
    """What ``fedram run`` wraps one run of a sweep in: a :class:`TrackedRun` of the run
    ``<label>/seed<seed>`` of the sweep ``scenario["name"]`` (its stores under
    ``<out>/tracking``), its parameters the resolved ``scenario``, the seed and ``run``
    (``engine``, ``api``, ``flwr``: the installed Flower line's version, which the caller
    reads from :mod:`fedram_flwr.engines.flwr.flower_line`); nothing without ``names``."""
    if not names:
        return contextlib.nullcontext()
    info = RunInfo(
        name=f"{label}/seed{seed}",
        group=str(scenario["name"]),
        params=params_of(scenario, seed=seed, **run),
        root=Path(out) / "tracking",
        tags={"variant": label, "seed": str(seed)},
    )
    return TrackedRun(names, run_dir, info)
