"""A Deployment federation notices a SuperNode that exited and names it with the cause its
log gives (here a stand-in process and Flower's own log lines: no Flower process runs)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedram_flwr.engines.flwr.errors import FlwrRunError
from fedram_flwr.engines.flwr.federation import Federation

# flower-supernode 1.39's output when its ClientAppIo port is taken (abridged).
BIND_FAILURE = """\
INFO :      Starting Flower SuperNode
ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 39707): \
address already in use
INFO:     Application shutdown complete.
Traceback (most recent call last):
RuntimeError: SuperNode Runtime HTTP API failed to start.
"""


def test_a_supernode_that_exited_is_named_with_its_cause(tmp_path: Path) -> None:
    run = Federation("deployment", 3, tmp_path / "logs")
    try:
        run.logs.mkdir(parents=True, exist_ok=True)
        (run.logs / "supernode-1.log").write_text(BIND_FAILURE)
        exit_code = [sys.executable, "-c", "raise SystemExit(1)"]
        run.supernodes = {1: subprocess.Popen(exit_code), 2: subprocess.Popen(exit_code)}
        for proc in run.supernodes.values():
            proc.wait(timeout=60)
        run.killed.add(2)  # SuperNode 2 was killed on purpose
        with pytest.raises(FlwrRunError) as err:
            run.check_supernodes()
        assert str(err.value).splitlines()[0] == (
            f"flower-supernode 1 (pid {run.supernodes[1].pid}) exited with code 1: "
            "RuntimeError: SuperNode Runtime HTTP API failed to start. / [Errno 98] error "
            "while attempting to bind on address ('127.0.0.1', 39707): address already in use; "
            f"log {run.logs / 'supernode-1.log'}:"
        )
        del run.supernodes[1]
        run.check_supernodes()  # only the one killed on purpose has exited
    finally:
        run.stop()


def test_a_time_limit_spent_while_the_superlink_starts_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in SuperLink that never answers, and a deadline (the run's time limit)
    already past: the error is a TimeLimitError that says so, and an empty log reads as
    such (the message ended at "log ...:" before)."""
    from fedram_flwr.engines.flwr import federation
    from fedram_flwr.engines.flwr.errors import TimeLimitError

    never_ready = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    monkeypatch.setattr(federation, "superlink_command", lambda: never_ready)
    run = Federation("simulation", 3, tmp_path / "logs")
    try:
        run.logs.mkdir(parents=True, exist_ok=True)
        with pytest.raises(TimeLimitError) as err:
            run.start_superlink(deadline=time.monotonic())
    finally:
        run.stop()
    message = str(err.value)
    assert message.startswith("the time limit ran out while flower-superlink was starting; ")
    assert message.endswith("(the log is empty)")
