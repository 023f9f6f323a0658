"""Signal handling around a ``flwr run``: a plain ``kill`` still runs the cleanup, and
the cleanup itself is not interrupted."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any


@contextlib.contextmanager
def signals_raise(*signums: signal.Signals) -> Iterator[None]:
    """Turn these signals into ``SystemExit(128 + n)`` while inside (main thread and
    default handlers only), so that a plain ``kill`` still runs our cleanup."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    with _handlers(signums, handler, only_default=True):
        yield


@contextlib.contextmanager
def signals_ignored(*signums: signal.Signals) -> Iterator[None]:
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
