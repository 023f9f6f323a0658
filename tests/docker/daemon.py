"""A private Docker daemon, a Debian base image and this project's image, for the
container tests (``scripts/test_docker.sh``); everything they create goes again.

The daemon runs as root with its own data and exec roots under a folder of the test and
touches nothing of the machine's networking (``--iptables=false --bridge=none``; the
containers use the host's network). No image registry is needed: the base image is a
Debian bookworm root file system from ``debootstrap``, imported with ``docker import``,
and the project's wheels come from the host's pip (``pip download``), served to the
build over loopback (the Dockerfile's ``WHEELHOUSE``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("dockerd", "docker", "docker-compose", "debootstrap")
DEBIAN_MIRROR = os.environ.get("FEDRAM_DEBIAN_MIRROR", "http://deb.debian.org/debian")
GENEROUS_S = 900.0  # bounds only against hanging forever; a loaded machine stays far below


def missing_requirements() -> str | None:
    """Why the container tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "starting a private dockerd needs root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"not installed: {', '.join(missing)} (Debian: docker.io docker-compose debootstrap)"
    return None


def log_tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def processes_under(root: Path) -> dict[int, str]:
    """Processes whose command line names ``root`` (dockerd, its containerd, the shims)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(root) in cmd:
                found[int(entry.name)] = cmd.strip()
    return found


def mounts_under(root: Path) -> list[str]:
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    return [p for p in points if p == str(root) or p.startswith(f"{root}/")]


def remove_tree(path: Path) -> None:
    """Unmount what is mounted below ``path`` (debootstrap's /proc, overlays), deepest
    first, then delete it without crossing into another file system."""
    for point in sorted(mounts_under(path), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False)
    if mounts_under(path):
        raise RuntimeError(f"still mounted under {path}: {mounts_under(path)}")
    subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=True)


def wait_until(done, what: str, timeout: float = GENEROUS_S) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(0.5)


@dataclass
class PrivateDocker:
    """A running private daemon: ``run`` calls the docker CLI and docker-compose on it."""

    root: Path
    process: subprocess.Popen

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.root / 'docker.sock'}"}

    def run(self, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        result = subprocess.run(
            list(args), env={**self.env, **kwargs.pop("env", {})}, capture_output=True,
            text=True, **kwargs,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result

    def ids(self, *args: str) -> list[str]:
        return self.run("docker", *args, "-q").stdout.split()

    def clear(self) -> None:
        """Remove every container and image of this daemon (tagged images first: their
        untagged parents go with them), and check that none is left."""
        if containers := self.ids("ps", "-a"):
            self.run("docker", "rm", "-f", "-v", *containers)
        tags = self.run("docker", "images", "--format", "{{.Repository}}:{{.Tag}}").stdout
        if tagged := [t for t in tags.split() if "<none>" not in t]:
            self.run("docker", "rmi", "-f", *tagged)
        self.run("docker", "image", "prune", "-a", "-f")
        if left := self.ids("images", "-a") + self.ids("ps", "-a"):
            raise RuntimeError(f"images or containers left on the private daemon: {left}")


@contextmanager
def private_docker(root: Path) -> Iterator[PrivateDocker]:
    """Start ``dockerd`` with everything under ``root``; on exit (also on failure) remove
    its containers and images, stop it by pid, check that none of its processes and
    mounts are left, and delete ``root``."""
    root.mkdir(parents=True)
    log = root / "dockerd.log"
    # SIGTERM (a CI job cancelled) becomes KeyboardInterrupt, so pytest runs every
    # teardown below, as on Ctrl-C (the main thread only: pytest's).
    previous = signal.signal(signal.SIGTERM, interrupt)
    with open(log, "w") as out:
        process = subprocess.Popen(
            ["dockerd", "--iptables=false", "--bridge=none", "--data-root", str(root / "data"),
             "--exec-root", str(root / "exec"), "--pidfile", str(root / "dockerd.pid"),
             "-H", f"unix://{root / 'docker.sock'}"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    docker = PrivateDocker(root, process)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"dockerd exited {process.returncode}:\n{log_tail(log)}")
            return docker.run("docker", "info", check=False).returncode == 0

        wait_until(ready, "dockerd answering")
        yield docker
    finally:
        try:
            if process.poll() is None:
                docker.clear()
        finally:
            stop_daemon(docker)
            signal.signal(signal.SIGTERM, previous)


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_daemon(docker: PrivateDocker) -> None:
    """SIGTERM to dockerd (it stops its containerd), SIGKILL to whatever of it is left,
    then delete its folder."""
    if docker.process.poll() is None:
        docker.process.send_signal(signal.SIGTERM)
        try:
            docker.process.wait(timeout=GENEROUS_S)
        except subprocess.TimeoutExpired:
            docker.process.kill()
            docker.process.wait()
    for pid in processes_under(docker.root):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_until(lambda: not processes_under(docker.root), "the daemon's processes gone", 120)
    remove_tree(docker.root)


def run_as_group(cmd: list[str], log: Path) -> None:
    """Run ``cmd`` in a process group of its own; if it fails or this process is
    interrupted, the whole group (debootstrap's dpkg and wget too) is killed."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if proc.wait() != 0:
            raise RuntimeError(f"{cmd[0]} exited {proc.returncode}:\n{log_tail(log)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def debootstrap_base(docker: PrivateDocker, work: Path, tag: str) -> None:
    """Debian bookworm (minbase, python3, venv, CA certificates) as image ``tag``."""
    rootfs = work / "rootfs"
    try:
        run_as_group(
            ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
             "bookworm", str(rootfs), DEBIAN_MIRROR], work / "debootstrap.log",
        )  # fmt: skip
        for point in sorted(mounts_under(rootfs), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], check=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        docker.run("docker", "import", "-", tag, stdin=tar.stdout)
        if tar.wait() != 0:
            raise RuntimeError(f"tar of {rootfs} exited {tar.returncode}")
    finally:
        if rootfs.exists():
            remove_tree(rootfs)


@contextmanager
def wheelhouse_server(wheels: Path, project: Path, constraints: str) -> Iterator[str]:
    """``pip download`` of the project's requirements (under ``constraints``, a file of
    the project) into ``wheels``, served on loopback while the context lasts; yields its
    URL."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), "-c",
         constraints, ".[experiments]", "setuptools>=68"],
        cwd=project, check=True, capture_output=True, text=True,
    )  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "-b", "127.0.0.1", "-d", str(wheels), "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        line = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (...)"
        port = int(line.split(" port ")[1].split()[0])
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(wheels)
