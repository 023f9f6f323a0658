"""What a failed ``flwr run`` reports: its error type, the root cause found in a log, and
the last lines of a log."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

LOG_TAIL = 60
"""Lines of a log kept (and shown) when a run fails."""

ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception|Interrupt)\w*: .+")
_EXIT_CODE_LINE = re.compile(r"Exit Code: \d+")
_ERROR_LEVEL_LINE = re.compile(r"^ERROR\s*:\s*(.+)")
_STARTED_RUN = re.compile(r"Successfully started run (\d+)")
_DETAILS = re.compile(r"details='([^']+)'")


class FlwrRunError(RuntimeError):
    """A ``flwr run`` failed, timed out or left no complete run directory."""


class TimeLimitError(FlwrRunError):
    """A ``flwr run`` ran out of its time limit."""


def log_tail(path: Path, lines: int = LOG_TAIL) -> str:
    """The last ``lines`` lines of a log file, ``(the log is empty)``, or ``(no log)``."""
    try:
        tail = "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
    return tail or "(the log is empty)"


def root_cause(lines: Iterable[str]) -> str | None:
    """The last exception line (``ValueError: ...``) in a log, else Flower's last
    ``Exit Code: N`` line, else None."""
    exception = exit_code = None
    for line in lines:
        clean = ANSI.sub("", line).strip()
        if _EXCEPTION_LINE.match(clean):
            exception = clean
        elif _EXIT_CODE_LINE.search(clean):
            exit_code = clean
    return exception or exit_code


def failure_cause(lines: Iterable[str]) -> str:
    """What a process's log says went wrong: its :func:`root_cause` and the last
    ``ERROR:`` line (a server's own report, e.g. ``[Errno 98] ... address already in
    use``), or ``no error in its log``."""
    lines = [ANSI.sub("", line).strip() for line in lines]
    errors = [m.group(1) for line in lines if (m := _ERROR_LEVEL_LINE.match(line))]
    parts = [p for p in (root_cause(lines), errors[-1] if errors else None) if p]
    return " / ".join(parts) or "no error in its log"


def superlink_verdict(cli_tail: Iterable[str], superlink_log: Path) -> str | None:
    """What the SuperLink's log says ended this run (``flwr run`` names its id), e.g.
    ``No heartbeat received from the task`` when the ServerApp process went unheard for
    Flower's heartbeat patience; None where it says nothing of the run."""
    started = [m.group(1) for line in cli_tail if (m := _STARTED_RUN.search(ANSI.sub("", line)))]
    if not started:
        return None
    try:
        lines = superlink_log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    this_run = re.compile(rf"\brun {started[-1]}\b")
    found = [m.group(1) for line in lines if this_run.search(line) and (m := _DETAILS.search(line))]
    return f"the SuperLink ended run {started[-1]}: {found[-1]}" if found else None


def run_error(
    message: str,
    cli_tail: Iterable[str],
    cli_log: Path,
    superlink_log: Path,
    kind: type[FlwrRunError] = FlwrRunError,
) -> FlwrRunError:
    """A FlwrRunError naming the root cause (from the ``flwr run`` output, else the
    SuperLink's log), followed by the tails of both logs."""
    cli_tail = list(cli_tail)
    cause = (
        root_cause(cli_tail)
        or superlink_verdict(cli_tail, superlink_log)
        or root_cause(log_tail(superlink_log).splitlines())
    )
    return kind(
        f"{message}"
        + (f": {cause}" if cause else "")
        + f"\n--- flwr run, last lines ({cli_log}) ---\n"
        + "\n".join(ANSI.sub("", line) for line in cli_tail[-40:])
        + f"\n--- superlink, last lines ({superlink_log}) ---\n"
        + ANSI.sub("", log_tail(superlink_log, 15))
    )
