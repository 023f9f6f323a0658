"""Opening and writing a run's files without following a symbolic link planted in their
place, and without blocking on a FIFO planted there.

A run folder may be shared, copied or prepared by someone else: a ``run.lock`` that is a
symlink to a file outside the folder would have the lock record written through it (the
target overwritten), a ``tls`` symlink would receive the SuperLink's private key, a FIFO
at a file's name would hang the run on ``open``. Every file a run writes, from its first
row to its last plot, is written here (:func:`write_atomic`, with :func:`encoded` for what
numpy and matplotlib write) or opened here with ``O_NOFOLLOW`` (a symlink in the last
component fails with ``ELOOP``) and ``O_NONBLOCK`` (a FIFO opens at once, or fails), and
refused unless it is a regular file:
:class:`UnsafePathError`, naming the file and what it is, which ``fedram`` reports as a
user error (exit 2). Folders a run creates are checked with ``lstat`` the same way.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from fedram_flwr.scenario.schema import ScenarioError


class UnsafePathError(ScenarioError):
    """A file or folder a run writes is a symbolic link, a FIFO, a device, ... ."""


def what_is(path: Path) -> str:
    """``a symbolic link to X``, ``a FIFO``, ... : what ``path`` is (lstat), for messages."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "not a regular file"
    if stat.S_ISLNK(mode):
        return f"a symbolic link (to {os.readlink(path)})"
    kinds = {
        stat.S_ISDIR: "a folder",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISSOCK: "a socket",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
    }
    return next((name for test, name in kinds.items() if test(mode)), "not a regular file")


def refuse(path: Path, what: str | None = None) -> UnsafePathError:
    """The error for ``path``, which is not what a run writes (``what``: what it is)."""
    return UnsafePathError(
        f"{path}: {what or what_is(path)}; fedram writes its run files only as regular "
        "files, never through a link or into a FIFO: remove it, or choose another --out"
    )


def open_regular(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open(path, flags)`` of a regular file, never through a symbolic link in its
    last component and never blocking on a FIFO; :class:`UnsafePathError` otherwise."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.ENODEV):
            raise refuse(path) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise refuse(path)
    os.set_blocking(fd, True)
    return fd


def write_atomic(path: Path, data: bytes, *, mode: int = 0o644, sync: bool = False) -> None:
    """``path`` holds ``data`` or what it held before, never half of it: written to a new
    temporary file beside it (created here: never one planted there) and renamed over it
    (a rename replaces a symbolic link at ``path``, never writes through it). ``sync``:
    flushed to disk before the rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.unlink()  # a link planted there goes, its target untouched
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise refuse(tmp) from None
    fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        try:
            os.replace(tmp, path)
        except IsADirectoryError:  # a folder where the file goes: named, to remove
            raise refuse(path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def encoded(save: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
    """The bytes ``save(file, *args, **kwargs)`` writes into a file object (``np.savez``,
    ``np.save``, ``Figure.savefig``, ...), for :func:`write_atomic`: a library that is
    given a path opens it itself, through whatever link is planted there."""
    buffer = io.BytesIO()
    save(buffer, *args, **kwargs)
    return buffer.getvalue()


def make_folder(path: Path) -> Path:
    """``path`` as a folder (its parents made as needed), refused if it is a symbolic
    link or anything but a folder."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file, a dangling link
        pass
    mode = os.lstat(path).st_mode
    if stat.S_ISREG(mode):
        raise UnsafePathError(
            f"{path}: a file where a folder goes; remove it, or choose another --out"
        )
    if not stat.S_ISDIR(mode):
        raise refuse(path)
    return path


def refuse_links(folder: Path) -> None:
    """Raise :class:`UnsafePathError` if ``folder`` itself is a symbolic link, or anything
    inside it (its sub-folders too: ``tls``, ``flwr-logs``) is neither a regular file nor
    a folder (a symbolic link, a FIFO, ...): a run writes many files
    there (some through numpy, matplotlib and Flower's processes), and a link planted at
    any of their names would be written through. A run folder holds a few dozen files."""
    if folder.is_symlink():
        raise refuse(folder)
    for top, dirs, files in os.walk(folder):  # never into a linked folder
        for name in [*dirs, *files]:
            mode = os.lstat(os.path.join(top, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # a link, FIFO, socket...
                raise refuse(Path(top) / name)


def open_text(path: Path, *, append: bool = False) -> TextIO:
    """``path`` opened to write text (truncated, or ``append``), a regular file only: never
    through a link, never blocking on a FIFO (:class:`UnsafePathError`). For what is
    written as it comes (a process's log)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(open_regular(path, flags), "a" if append else "w")


def read_regular(path: Path, limit: int = 1 << 20) -> bytes:
    """The first ``limit`` bytes of regular file ``path``, read without following a
    link and without blocking on a FIFO (:class:`UnsafePathError`)."""
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as fh:
        return fh.read(limit)
