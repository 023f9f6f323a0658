"""One writer per run directory: an exclusive ``flock`` on ``run.lock`` held by the
process that drives the run (re-entrant within a process; the OS releases it when the
process dies, however it dies), with that process's pid and a random token recorded in
the file; :func:`verify_writer` lets a writer in another process (Flower's ServerApp)
check that the driver which gave it the token still holds the lock."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedram_flwr.rundir.nofollow import (
    UnsafePathError,
    make_folder,
    open_regular,
    read_regular,
    refuse_links,
)

LOCK_FILE = "run.lock"
LOCK_TRIES = 5  # a reader's probe holds the lock for microseconds: retry, briefly


class RunDirectoryBusy(RuntimeError):
    """Another process writes this run directory (or this writer's driver is gone)."""


@dataclass
class _Held:
    fd: int
    token: str
    depth: int = 1


_HELD: dict[Path, _Held] = {}
"""The run directories this process holds the lock of: resolved folder -> lock."""


def lock_holder(folder: Path) -> dict[str, Any]:
    """What the lock file says of its last holder (pid, started, token); {} if unreadable."""
    try:
        record = json.loads(read_regular(folder / LOCK_FILE, 4096))
    except (OSError, ValueError):  # UnsafePathError too: no holder's record
        return {}
    return record if isinstance(record, dict) else {}


def lock_held(folder: Path) -> bool | None:
    """Whether some live process holds ``folder``'s lock; None when it has no lock file
    (a folder written before locks, or by hand)."""
    folder = folder.resolve()
    if folder in _HELD:
        return True
    try:
        fd = open_regular(folder / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except UnsafePathError:  # a link or a FIFO planted there: no run of ours holds it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops the probe's shared lock
    return False


def held_token(folder: Path) -> str:
    """The lock's token when this process holds ``folder``'s lock, else ''."""
    held = _HELD.get(folder.resolve())
    return held.token if held else ""


def busy_message(folder: Path) -> str:
    holder = lock_holder(folder)
    since = holder.get("started")
    when = time.strftime(", since %Y-%m-%d %H:%M:%S", time.localtime(since)) if since else ""
    return (
        f"run folder {folder} is being written by another run (pid {holder.get('pid', '?')}"
        f"{when}); wait for it to end, or choose another --out"
    )


def acquire(folder: Path) -> str:
    """Take ``folder``'s lock (re-entrant within this process); returns its token.
    Refused (:class:`~.nofollow.UnsafePathError`) when the folder or anything in it is a
    symbolic link, or ``run.lock`` is not a regular file: nothing is written through."""
    resolved = folder.resolve()
    if resolved in _HELD:
        _HELD[resolved].depth += 1
        return _HELD[resolved].token
    make_folder(folder)
    refuse_links(folder)
    folder = resolved
    fd = open_regular(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    for attempt in range(LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt == LOCK_TRIES - 1:
                os.close(fd)
                raise RunDirectoryBusy(busy_message(folder)) from None
            time.sleep(0.02)
    token = secrets.token_hex(16)
    record = {"pid": os.getpid(), "started": time.time(), "token": token}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)  # in place: the lock is on this inode
    _HELD[folder] = _Held(fd, token)
    return token


def release(folder: Path) -> None:
    folder = folder.resolve()
    held = _HELD[folder]
    held.depth -= 1
    if held.depth == 0:
        del _HELD[folder]
        os.close(held.fd)  # releases the flock


def verify_writer(folder: Path, token: str) -> None:
    """Raise :class:`RunDirectoryBusy` unless a live process holds ``folder``'s lock
    with ``token`` (the driver that started this writer)."""
    folder = folder.resolve()
    if folder in _HELD and _HELD[folder].token == token:
        return
    if not lock_held(folder):
        raise RunDirectoryBusy(
            f"run folder {folder}: the run that started this writer no longer holds its "
            "lock (its driving process is gone); not writing"
        )
    if lock_holder(folder).get("token") != token:
        raise RunDirectoryBusy(busy_message(folder))
