"""Waiting for a SuperLink to answer its ``/health`` endpoint."""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from fedram_flwr.engines.flwr.errors import FlwrRunError, failure_cause, log_tail


def wait_healthy(
    proc: subprocess.Popen, port: int, log: Path, deadline: float, ca: Path | None = None
) -> None:
    """Wait until the SuperLink on loopback ``port`` answers ``/health`` (over HTTPS
    trusting ``ca`` when given), until ``deadline`` (``time.monotonic``); raise
    FlwrRunError with the log's tail when it exits first or never answers."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if ca is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=ca)))
    direct = urllib.request.build_opener(*handlers)  # no proxy
    url = f"{'https' if ca else 'http'}://127.0.0.1:{port}/health"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_tail(log)
            raise FlwrRunError(
                f"flower-superlink exited with code {proc.returncode} at startup: "
                f"{failure_cause(tail.splitlines())}; log {log}:\n{tail}"
            )
        try:
            with direct.open(url, timeout=0.5) as res:
                if res.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise FlwrRunError(f"flower-superlink did not become ready; log {log}:\n{log_tail(log)}")
