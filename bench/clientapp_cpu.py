"""CPU of each ``flwr-clientapp`` process during one ``fedram run`` on the Deployment Engine.

Under the Deployment Engine every message (a partition-id query, a training round) starts
a fresh ``flwr-clientapp`` process, which imports flwr, torch and the project's ClientApp
before it answers (docs/engines.md). This runs the given ``fedram run`` command, polls
``/proc`` every 20 ms for ``flwr-clientapp`` processes and keeps each one's last
user + system CPU time (its final value to within one poll; Linux only), then prints the
count, median, range and sum as JSON. The processes that used no measurable CPU (a
launcher that execs at once) are counted apart.

    OMP_NUM_THREADS=1 .venv/bin/python bench/clientapp_cpu.py .venv/bin/fedram run \\
        scenarios/fig2a_gaussian_3users.yaml --engine deployment --seeds 0 \\
        --set rounds=6 --set algorithm.alpha=0.1 --out /tmp/clientapp-cpu
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.02


def process_cpu(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def parent_of(pid: int) -> int:
    """The parent process id of ``pid`` (``/proc/<pid>/stat``; 0 once it has ended)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def descends_from(pid: int, root: int) -> bool:
    """Whether ``root`` is ``pid`` or one of its ancestors (walking the parent links)."""
    while pid > 1:
        if pid == root:
            return True
        pid = parent_of(pid)
    return False


def clientapp_pids(name: bytes = b"flwr-clientapp", root: int | None = None) -> list[int]:
    """The running processes whose command line names ``name``; with ``root``, only the
    descendants of process ``root`` (so another run's processes on the machine never
    count)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if name in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:  # ended meanwhile
                pass
    return [p for p in pids if root is None or descends_from(p, root)]


def measure(command: list[str]) -> dict[str, object]:
    """Run ``command``; the CPU seconds of every ``flwr-clientapp`` it started (its
    descendants: other runs on the machine are not counted)."""
    seen: dict[int, float] = {}
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    while proc.poll() is None:
        for pid in clientapp_pids(root=proc.pid):
            try:
                seen[pid] = process_cpu(pid)
            except (OSError, IndexError):
                pass
        time.sleep(POLL_S)
    busy = sorted(cpu for cpu in seen.values() if cpu > 0.1)
    return {
        "returncode": proc.returncode,
        "wall_s": round(time.perf_counter() - start, 1),
        "clientapp_processes": len(busy),
        "idle_processes": len(seen) - len(busy),
        "cpu_s_median": round(statistics.median(busy), 2) if busy else None,
        "cpu_s_range": [busy[0], busy[-1]] if busy else None,
        "cpu_s_sum": round(sum(busy), 2),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1:])))
