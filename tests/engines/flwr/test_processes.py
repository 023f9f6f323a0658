"""The process tracker records what a run started as it is, and the processes a run
starts die with the thread that started them (no Flower process is started here)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import uuid

from fedram_flwr.engines.flwr import processes
from fedram_flwr.engines.flwr.processes import TOKEN_ENV, ProcessTracker, die_with_parent

STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(120)"
)
FORKS = "import os, sys, time; pid = os.fork(); pid and print(pid, flush=True); time.sleep(120)"


def test_a_fork_before_its_exec_is_not_a_second_copy_of_its_parent() -> None:
    """A forked child shows its parent's command line until it execs (once
    four ``flower-supernode`` recorded for three SuperNodes)."""
    parent = subprocess.Popen([sys.executable, "-c", FORKS], stdout=subprocess.PIPE, text=True)
    tracker = ProcessTracker(uuid.uuid4().hex)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())  # forked, never execs
        tracker.add_root(parent.pid)
        tracker.scan()
        commands = {pid: info.cmd for pid, info in tracker.known.items()}
        assert set(commands) == {parent.pid, child}
        assert commands[parent.pid] == f"{sys.executable} -c {FORKS}"
        assert commands[child] == f"[fork of {parent.pid}] {sys.executable} -c {FORKS}"
    finally:
        assert tracker.stop(grace=5.0) == []
        parent.wait(timeout=60)


def test_a_started_process_dies_with_the_thread_that_started_it() -> None:
    """``die_with_parent``: the kernel SIGKILLs the child when its parent thread ends,
    as it does when the driving process is SIGKILLed."""
    started: list[subprocess.Popen] = []

    def start() -> None:
        started.append(subprocess.Popen(["sleep", "120"], preexec_fn=die_with_parent()))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    (child,) = started
    try:
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        child.kill()


def test_stop_kills_a_process_of_the_token_that_ignores_sigterm() -> None:
    """Found by its token alone (a session of its own, never given as a root), it gets
    SIGTERM, then SIGKILL, and ``stop`` returns once it has exited."""
    token = uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-c", STUBBORN],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, TOKEN_ENV: token},
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        tracker = ProcessTracker(token)
        assert tracker.stop(grace=0.5, kill_wait=60.0) == []
        assert proc.wait(timeout=60) == -signal.SIGKILL
        assert set(tracker.known) == {proc.pid}
    finally:
        proc.kill()
        proc.wait(timeout=60)


def test_free_ports_lie_below_the_ephemeral_range_and_are_free(monkeypatch) -> None:
    """Servers' ports come from below the range the kernel takes outgoing connections'
    local ports from (a port picked there cannot be taken by one before its server binds
    it), skip ports in use, and fall back to a kernel-picked port when none is free."""
    low, high = processes.LISTEN_PORTS
    ports = {processes.free_port() for _ in range(20)}
    assert all(low <= p < high and p not in processes._RESERVED_PORTS for p in ports)
    assert len(ports) > 10  # random, not one sequence every process would repeat
    with socket.socket() as held:
        held.bind(("127.0.0.1", min(ports)))
        monkeypatch.setattr(processes, "LISTEN_PORTS", (min(ports), min(ports) + 1))
        # the one port to try is in use: skipped, the kernel picks one instead
        assert processes.free_port() >= processes._ephemeral_low()
