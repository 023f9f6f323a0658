"""Ctrl-C in ``fedram run``: the run under way is recorded ``interrupted`` (with the last
round it recorded) and ``fedram`` ends with one line saying where it stopped and what a
rerun does, instead of Python's traceback.

How SIGINT arrives, by engine: in-process (both APIs) it raises ``KeyboardInterrupt`` in
the server loop, and :func:`~fedram_flwr.engines.run_in_process` records the run
``interrupted`` before passing it on (for a library call too); on Flower's engines
(``flwr``, ``deployment``) only the ``fedram`` process gets it (every process it starts
runs in a session of its own), where ``KeyboardInterrupt`` ends the wait for the run, and
the cleanup that SIGTERM runs stops the SuperLink, SuperNodes and Ray (SIGINT ignored
meanwhile) and records the run ``failed``. Either way :func:`record_interrupted` then
records it ``interrupted``, with its last round, while the CLI still holds the run
folder's lock.
"""

from __future__ import annotations

import json
from pathlib import Path

from fedram_flwr.rundir import CHECKPOINT_FILE, RunDirectory


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during one run of a sweep: which run, and the last round it recorded."""

    def __init__(
        self,
        run_dir: Path,
        last_round: int | None,
        rounds: int,
        resumes: bool,
        complete: bool = False,
    ) -> None:
        super().__init__(str(run_dir))
        self.run_dir = run_dir
        self.last_round = last_round
        self.rounds = rounds
        self.resumes = resumes
        self.complete = complete  # Ctrl-C came once the run had recorded its last round

    def message(self) -> str:
        """The one line ``fedram`` ends with (for a run that completed as Ctrl-C came,
        that it is complete: its status says so, and a rerun skips it)."""
        if self.complete:
            return (
                f"fedram: interrupted once {self.run_dir} was complete ({self.rounds} rounds); "
                "rerun the same command for the runs after it and the report"
            )
        at = "before its first round" if not self.last_round else f"at round {self.last_round}"
        rerun = (
            "rerun the same command to resume it from its last checkpoint"
            if self.resumes
            else "rerun the same command to run it again"
        )
        return f"fedram: interrupted {at} of {self.rounds} ({self.run_dir}); {rerun}"


def last_round(run: RunDirectory) -> int | None:
    """The round of the last whole row of ``metrics.jsonl``; None without one."""
    try:
        with run.metrics_path.open("rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 65536))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("round"), int):
            return row["round"]
    return None


def record_interrupted(run_dir: Path, rounds: int, engine: str) -> RunInterrupted:
    """Record the run in ``run_dir`` (whose lock this process holds) ``interrupted``
    unless it completed, and return the exception that says so (a rerun resumes it when
    it left a checkpoint: in-process, legacy API)."""
    run = RunDirectory(run_dir)
    resumes = (run.path / CHECKPOINT_FILE).is_file()
    done = last_round(run)
    complete = run.status() == "complete"
    if not complete:
        run.set_status("interrupted", engine=engine, error="KeyboardInterrupt (Ctrl-C)", round=done)
    return RunInterrupted(run_dir, done, rounds, resumes, complete)
