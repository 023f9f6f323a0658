"""A docker-compose file that puts every service of docker-compose.yml (and of its TLS
override) on the host's network, each process on ports of its own.

The private Docker daemon of ``scripts/test_docker.sh`` runs with ``--bridge=none``: no
container network, no change to the machine's. On the host network the services cannot
find each other by name and would all bind the same ports, so this file rewrites the
addresses of the merged configuration (``docker-compose config``): the SuperLink binds
loopback on free ports, every SuperNode gets its own ClientAppIo and health ports, and
``flwr run`` reads a connection file pointing at the SuperLink's Control API. It is a
whole file, not an override: an override can add but not remove the published ports,
which Docker refuses on the host network. Anything left that still names a container
address is an error: the compose file changed in a way this module does not know.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONTROL, FLEET, HEALTH = 8000, 9092, 9099  # the ports the compose files use (FLEET: 1.39's)
CONFIG_TARGET = "/flwr/config.toml"  # the submit service's FLWR_HOME/config.toml


@dataclass(frozen=True)
class HostPorts:
    """Loopback ports of one run: the SuperLink's Control and Fleet APIs, and per
    service its health server (and per SuperNode its ClientAppIo API)."""

    control: int
    fleet: int
    health: dict[str, int]
    clientappio: dict[str, int]


def command_of(service: dict[str, Any]) -> list[str]:
    """A service's whole command: its ``entrypoint`` (docker-compose.yml names the
    executable there, and the flag that differs between Flower lines), then ``command``."""
    return [str(w) for w in (*service.get("entrypoint", []), *service["command"])]


def rewrite(arg: str, service: str, ports: HostPorts) -> str:
    """One command argument or health-check word with host-network addresses."""
    arg = re.sub(rf"(superlink|0\.0\.0\.0):{FLEET}\b", f"127.0.0.1:{ports.fleet}", arg)
    arg = re.sub(rf"superlink:{CONTROL}\b", f"127.0.0.1:{ports.control}", arg)
    arg = re.sub(rf"127\.0\.0\.1:{HEALTH}\b", f"127.0.0.1:{ports.health.get(service)}", arg)
    arg = re.sub(rf"^--port={CONTROL}$", f"--port={ports.control}", arg)
    return "--host=127.0.0.1" if arg == "--host=0.0.0.0" else arg


def check_rewritten(service: str, words: list[str]) -> None:
    stale = [w for w in words if re.search(r"superlink:|0\.0\.0\.0|:None\b", w)]
    if stale:
        raise ValueError(
            f"service {service}: {stale} still name a container address; "
            "tests/docker/hostnet.py does not know this compose file's ports"
        )


def connection_file(source: Path, ports: HostPorts) -> str:
    """The submit service's config.toml with the SuperLink at its loopback port."""
    text = source.read_text()
    if f'"superlink:{CONTROL}"' not in text:
        raise ValueError(f'{source}: no address "superlink:{CONTROL}" to rewrite')
    return text.replace(f'"superlink:{CONTROL}"', f'"127.0.0.1:{ports.control}"')


def host_network_config(
    merged: dict[str, Any], ports: HostPorts, config_dir: Path
) -> dict[str, Any]:
    """``merged`` (the output of ``docker-compose -f ... config``) with every service on
    ``network_mode: host``, its published ports dropped (Docker refuses both together,
    and a compose override cannot remove a list), its command and health check on its
    own loopback ports; the submit service's connection file is written to
    ``config_dir``."""
    config = copy.deepcopy(merged)
    for name, service in config["services"].items():
        service["network_mode"] = "host"
        service.pop("ports", None)
        service.pop("networks", None)
        command = [rewrite(a, name, ports) for a in command_of(service)]
        service.pop("entrypoint", None)  # the image has none: the command is whole
        if command[0] == "flower-supernode":
            command += ["--host=127.0.0.1", f"--port={ports.clientappio[name]}"]
        check_rewritten(name, command)
        service["command"] = command
        if "healthcheck" in service:
            test = [rewrite(str(w), name, ports) for w in service["healthcheck"]["test"]]
            check_rewritten(name, test)
            service["healthcheck"]["test"] = test
        volumes = []
        for volume in service.get("volumes", []):
            host, target = volume.split(":")[:2]
            if target == CONFIG_TARGET:
                config_dir.mkdir(parents=True, exist_ok=True)
                (config_dir / "config.toml").write_text(connection_file(Path(host), ports))
                volume = f"{config_dir / 'config.toml'}:{CONFIG_TARGET}:ro"
            volumes.append(volume)
        if volumes:
            service["volumes"] = volumes
    config.pop("networks", None)
    return config
