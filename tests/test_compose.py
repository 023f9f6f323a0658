"""docker-compose.yml (and its TLS override) against the pinned Flower CLIs.

No Docker engine runs here: Debian's ``docker-compose`` (v1) validates and resolves the
files offline (``config``), and every service's command is then parsed by the very
argument parsers of the installed Flower (``flower-superlink``, ``flower-supernode``:
argparse; ``flwr run``: click), which is the pinned one. Beyond the flags, the services
must agree with each other: ports, partition ids, the connection ``flwr run`` uses, the
certificates each side mounts, the health checks, and the scenario's number of clients.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import flwr
import pytest
import tomli
import yaml
from flwr.cli.app import app as flwr_cli
from flwr.cli.flower_config import parse_superlink_connection
from flwr.common.config import parse_config_args
from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink
from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode
from packaging.requirements import Requirement
from typer.main import get_command

from fedram_flwr.engines.flwr.flower_line import LINE
from fedram_flwr.registry.app_config import APP_ROOT, scenario_from_run_config
from tests.docker.hostnet import HostPorts, command_of, host_network_config
from tests.docker.lines import LINE_FILES

CONSTRAINTS_FILES = ("constraints.txt", "constraints-1.39.txt")
"""The Flower lines' exact versions: the default first (scripts/setup.sh)."""

COMPOSE_FILES = {
    "plain": ("docker-compose.yml", *LINE_FILES),
    "tls": ("docker-compose.yml", "docker-compose.tls.yml", *LINE_FILES),
}
IN_CI = bool(os.environ.get("CI"))


def require(tool: str) -> str:
    """The tool's path; skip outside CI when it is missing (CI must have it)."""
    path = shutil.which(tool)
    if path is None:
        if IN_CI:
            pytest.fail(f"{tool} is missing in CI (scripts/setup.sh installs it with apt-get)")
        pytest.skip(f"{tool} is not installed (scripts/setup.sh installs it where apt exists)")
    return path


# ------------------------------------------------------------- parsing commands
class FlagError(ValueError):
    """A command the pinned Flower CLI would reject."""


def parse_argparse(
    parser: argparse.ArgumentParser, prog: str, args: list[str]
) -> argparse.Namespace:
    def error(message: str):
        raise FlagError(f"{prog}: {message}")

    parser.error = error  # argparse reports every bad flag or value through error()
    return parser.parse_args(args)


def parse_flwr(args: list[str]) -> dict[str, Any]:
    """Options of ``flwr <args>``; only ``flwr run`` is used by the compose files."""
    group = get_command(flwr_cli)
    root = group.make_context("flwr", list(args), resilient_parsing=True)
    if not args or args[0] != "run":
        raise FlagError(f"flwr {' '.join(args[:1])}: only `flwr run` is expected here")
    try:
        return group.get_command(root, "run").make_context("run", args[1:], parent=root).params
    except click.UsageError as err:
        raise FlagError(f"flwr run: {err.format_message()}") from None


def parse_command(command: list[str]) -> tuple[str, Any]:
    """(executable, parsed options) of a service command, by the pinned Flower's parsers."""
    exe, args = command[0], list(command[1:])
    if exe == "flower-superlink":
        return exe, parse_argparse(_parse_args_run_superlink(), exe, args)
    if exe == "flower-supernode":
        return exe, parse_argparse(_parse_args_run_supernode(), exe, args)
    if exe == "flwr":
        return exe, parse_flwr(args)
    raise FlagError(f"unexpected executable {exe!r}")


def test_parsers_reject_wrong_flags() -> None:
    """The check has teeth: a misspelt flag, a bad choice or an extra argument fails."""
    for bad in (
        ["flower-superlink", "--insecure", "--fleet-api-adress", "0.0.0.0:9092"],
        ["flower-superlink", "--isolation", "thread"],
        ["flower-supernode", "--insecure", "--super-link", "superlink:9092"],
        ["flower-supernode", "--port", "not-a-port"],
        ["flwr", "run", "/app", "compose", "--streaming"],
        ["flwr", "run", "/app", "compose", "extra"],
    ):
        with pytest.raises(FlagError):
            parse_command(bad)
    assert parse_command(["flower-supernode", "--insecure"])[1].insecure


# ------------------------------------------------------------- the compose files
def compose_config(files: tuple[str, ...]) -> dict[str, Any]:
    """``docker-compose -f ... config``: validated, merged, variables substituted (with
    their defaults: FEDRAM_* variables of the caller's environment are left out)."""
    exe = require("docker-compose")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDRAM_")}
    args = [a for f in files for a in ("-f", f)]
    res = subprocess.run(
        [exe, *args, "config"], cwd=APP_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, f"docker-compose {' '.join(args)} config failed:\n{res.stderr}"
    return yaml.safe_load(res.stdout)


@pytest.fixture(scope="module", params=sorted(COMPOSE_FILES))
def compose(request: pytest.FixtureRequest) -> dict[str, Any]:
    return compose_config(COMPOSE_FILES[request.param])


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts (``host:target[:mode]``,
    as ``docker-compose config`` writes them)."""
    return {v.split(":")[1]: Path(v.split(":")[0]) for v in service.get("volumes", [])}


def mounted(service: dict[str, Any], path: str) -> Path:
    """The host file behind container ``path`` (a mounted file, or inside a mounted folder)."""
    for target, host in mounts(service).items():
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return host / Path(path).relative_to(target)
    raise AssertionError(f"{path} is not mounted in the container")


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def parsed_services(compose: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    out = {}
    for name, service in compose["services"].items():
        try:
            out[name] = parse_command(command_of(service))
        except FlagError as err:
            pytest.fail(f"service {name}: {err}")
    return out


def test_every_command_is_accepted_by_the_pinned_flower(compose: dict[str, Any]) -> None:
    kinds = sorted(exe for exe, _ in parsed_services(compose).values())
    assert kinds.count("flower-superlink") == 1 and kinds.count("flwr") == 1
    assert kinds.count("flower-supernode") >= 1


def test_services_agree_with_each_other(compose: dict[str, Any]) -> None:
    services, parsed = compose["services"], parsed_services(compose)
    (link_name,) = [n for n, (exe, _) in parsed.items() if exe == "flower-superlink"]
    link, link_args = services[link_name], parsed[link_name][1]
    node_names = sorted(n for n, (exe, _) in parsed.items() if exe == "flower-supernode")
    secure = not link_args.insecure
    if secure:
        for flag in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certfile"):
            assert getattr(link_args, flag), f"TLS SuperLink without --{flag.replace('_', '-')}"
            mounted(link, getattr(link_args, flag))

    # Reachable from the other containers, and published on the host.
    assert link_args.host not in ("127.0.0.1", "localhost", "::1"), (
        "the SuperLink's HTTP API (Control API for flwr run) must bind beyond loopback"
    )
    # Fleet: its own gRPC port on 1.39, the one HTTP port on later lines
    fleet_port = link_args.port
    if LINE.fleet == "gRPC":
        fleet_port = split_address(link_args.fleet_api_address)[1]
    published = {int(p["target"]) for p in link.get("ports", [])}
    assert {link_args.port, fleet_port} <= published

    # SuperNodes: the SuperLink's Fleet API, the same security, partitions 0..N-1.
    partitions = []
    for name in node_names:
        args = parsed[name][1]
        assert split_address(args.superlink) == (link_name, fleet_port), name
        assert args.insecure != secure, f"{name}: TLS must match the SuperLink's"
        if secure:
            assert args.root_certificates, f"{name}: no --root-certificates"
            mounted(services[name], args.root_certificates)
        config = parse_config_args([args.node_config])
        assert config["num-partitions"] == len(node_names), name
        partitions.append(config["partition-id"])
    assert sorted(partitions) == list(range(len(node_names)))

    # The run submission: its connection points at the SuperLink's Control API.
    (submit_name,) = [n for n, (exe, _) in parsed.items() if exe == "flwr"]
    submit, run = services[submit_name], parsed[submit_name][1]
    home = submit["environment"]["FLWR_HOME"]
    toml = tomli.loads(mounted(submit, f"{home}/config.toml").read_text())
    name = run["superlink"] or toml["superlink"]["default"]
    conn = parse_superlink_connection(toml["superlink"][name], name)
    assert split_address(conn.address) == (link_name, link_args.port)
    assert bool(conn.insecure) != secure
    if secure:
        assert mounted(submit, conn.root_certificates).name == "ca.crt"
    assert run["app"] == "/app" and run["stream"]

    # The run config: known keys, a scenario with one client per SuperNode.
    run_config: dict[str, Any] = {}
    for item in run["run_config_overrides"]:
        run_config.update(parse_config_args([item]))
    pyproject = tomli.loads((APP_ROOT / "pyproject.toml").read_text())
    assert set(run_config) <= set(pyproject["tool"]["flwr"]["app"]["config"])
    scenario = scenario_from_run_config(run_config["scenario"], run_config.get("overrides", ""))
    assert scenario.data.num_clients == len(node_names)


def test_healthchecks_ask_each_service_own_health_server(compose: dict[str, Any]) -> None:
    for name, (exe, args) in parsed_services(compose).items():
        if exe == "flwr":
            continue
        test = compose["services"][name]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "python", "/app/deploy/healthcheck.py"], name
        assert test[3] == args.health_server_address, name


def test_flower_is_pinned_in_the_constraints_file_only() -> None:
    """Each Flower line's constraints file pins flwr once (a different version each),
    inside pyproject.toml's ranges; the venv runs the one its set-up installed, the image
    installs the project under the file its CONSTRAINTS build argument names (the
    default line's unless told), the tests parse commands with that very version, and
    no deployment file pins its own."""
    project = tomli.loads((APP_ROOT / "pyproject.toml").read_text())["project"]
    flwr_specs = [
        d
        for d in [*project["dependencies"], *project["optional-dependencies"]["experiments"]]
        if re.match(r"flwr\b", d)
    ]
    pins = {}
    for line_file in CONSTRAINTS_FILES:
        found = re.findall(r"^flwr==(\S+)$", (APP_ROOT / line_file).read_text(), re.M)
        assert len(found) == 1, f"expected one exact flwr pin in {line_file}, got {found}"
        assert all(Requirement(d).specifier.contains(found[0]) for d in flwr_specs), line_file
        pins[line_file] = found[0]
    assert flwr_specs and len(set(pins.values())) == len(CONSTRAINTS_FILES)
    stamp = Path(sys.prefix) / ".fedram-installed"  # scripts/setup.sh: the file it used
    installed_with = stamp.read_text().strip() if stamp.is_file() else None
    allowed = [pins[installed_with]] if installed_with in pins else list(pins.values())
    assert flwr.__version__ in allowed, f"the installed Flower is not one pinned: {pins}"
    assert not any("==" in d for d in project["dependencies"]), "the library pins exactly"
    for file in ("Dockerfile", *COMPOSE_FILES["tls"]):
        lines = (APP_ROOT / file).read_text().splitlines()
        text = "\n".join(line for line in lines if not line.lstrip().startswith("#"))
        assert not re.search(r"flwr[^\s\"']*\s*[=<>~]=", text), f"{file} pins flwr itself"
    dockerfile = (APP_ROOT / "Dockerfile").read_text()
    assert "['optional-dependencies']['experiments']" in dockerfile
    assert re.search(r"^ARG CONSTRAINTS=constraints\.txt$", dockerfile, re.M)
    assert re.search(
        r"pip install [^\n]*-c \"/src/\$CONSTRAINTS\" -r /tmp/requirements\.txt", dockerfile
    )


def test_host_network_file_gives_every_process_its_own_ports(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """The container tests' host-network file (tests/docker/hostnet.py): every command
    still parses with the pinned Flower, health checks still ask their own server, every
    process binds loopback on a port of its own, and every client dials the SuperLink."""
    names = sorted(compose["services"])
    nodes = [n for n in names if n.startswith("supernode")]
    ports = HostPorts(
        control=18000,
        fleet=19092,
        health={n: 20000 + i for i, n in enumerate(names)},
        clientappio={n: 21000 + i for i, n in enumerate(nodes)},
    )
    config = host_network_config(compose, ports, tmp_path)
    assert "ports" not in config["services"]["superlink"]
    assert {s["network_mode"] for s in config["services"].values()} == {"host"}
    test_every_command_is_accepted_by_the_pinned_flower(config)
    test_healthchecks_ask_each_service_own_health_server(config)
    bound = []
    for name, (exe, args) in parsed_services(config).items():
        if exe == "flower-superlink":
            bound.append((args.host, args.port))
            if LINE.fleet == "gRPC":
                bound.append(split_address(args.fleet_api_address))
        if exe == "flower-supernode":
            fleet = ports.fleet if LINE.fleet == "gRPC" else ports.control
            assert args.superlink == f"127.0.0.1:{fleet}", name
            bound.append((args.host, args.port))
        if exe != "flwr":
            bound.append(split_address(args.health_server_address))
    assert {host for host, _ in bound} == {"127.0.0.1"}
    own_fleet = LINE.fleet == "gRPC"
    assert (
        len({port for _, port in bound})
        == len(bound)
        == (1 + own_fleet + len(names) - 1 + len(nodes))
    )
    submit = config["services"]["submit"]
    toml = tomli.loads(mounted(submit, "/flwr/config.toml").read_text())
    assert toml["superlink"]["compose"]["address"] == "127.0.0.1:18000"
    original = tomli.loads(mounted(compose["services"]["submit"], "/flwr/config.toml").read_text())
    assert {k: v for k, v in toml["superlink"]["compose"].items() if k != "address"} == {
        k: v for k, v in original["superlink"]["compose"].items() if k != "address"
    }
    with pytest.raises(ValueError, match="supernode-0.*container address"):
        changed = copy.deepcopy(compose)
        changed["services"]["supernode-0"]["command"].append("--superlink=superlink:9093")
        host_network_config(changed, ports, tmp_path)
    with pytest.raises(ValueError, match="supernode-1.*container address"):
        changed = copy.deepcopy(compose)
        changed["services"]["supernode-1"]["entrypoint"].append("--superlink=superlink:9093")
        host_network_config(changed, ports, tmp_path)


# ------------------------------------------------------------- health and TLS
def load_healthcheck():
    spec = importlib.util.spec_from_file_location(
        "healthcheck", APP_ROOT / "deploy" / "healthcheck.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_healthcheck_script_sees_flower_health_server() -> None:
    from flwr.supercore.grpc_health import run_health_server_grpc_no_tls

    serving = load_healthcheck().serving
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    server = run_health_server_grpc_no_tls(address)
    try:
        assert serving(address)
    finally:
        server.stop(grace=None).wait()
    assert not serving(address, timeout=0.5)


def tls_handshake(certs: Path, hostname: str) -> None:
    """An in-memory TLS handshake: the SuperLink's certificate against a client that
    trusts only ca.crt and expects ``hostname`` (what SuperNodes and flwr run do)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(certs / "server.pem", certs / "server.key")
    client_ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    bios = [ssl.MemoryBIO() for _ in range(4)]
    server = server_ctx.wrap_bio(bios[0], bios[1], server_side=True)
    client = client_ctx.wrap_bio(bios[2], bios[3], server_hostname=hostname)
    done = {"client": False, "server": False}
    for _ in range(10):
        for side, conn, (out_bio, peer_in) in (
            ("client", client, (bios[3], bios[0])),
            ("server", server, (bios[1], bios[2])),
        ):
            if not done[side]:
                try:
                    conn.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
            peer_in.write(out_bio.read())
        if all(done.values()):
            return
    raise AssertionError("TLS handshake did not finish")


def test_generated_certificates_serve_the_compose_names(tmp_path: Path) -> None:
    require("openssl")
    env = {**os.environ, "SUPERLINK_SANS": "DNS:superlink.lan"}
    subprocess.run(
        ["bash", str(APP_ROOT / "deploy" / "generate_certs.sh"), str(tmp_path)],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    # The service name SuperNodes and flwr run dial, the SuperLink's own runtime
    # (127.0.0.1) and the extra name; any other name is refused.
    for hostname in ("superlink", "127.0.0.1", "superlink.lan"):
        tls_handshake(tmp_path, hostname)
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_handshake(tmp_path, "elsewhere.example")


def test_dockerfile_copies_what_the_services_run() -> None:
    """Every COPY source exists and survives .dockerignore (``$CONSTRAINTS``: each
    line's constraints file), and the health check script the compose files call is
    among them."""
    ignored = [
        line.strip()
        for line in (APP_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = []
    for line in (APP_ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            *sources, _ = line.split()[1:]
            copied += sources
    if "$CONSTRAINTS" in copied:
        copied = [s for s in copied if s != "$CONSTRAINTS"] + list(CONSTRAINTS_FILES)
    for source in copied:
        assert (APP_ROOT / source).exists(), f"Dockerfile copies missing {source}"
        hit = [p for p in ignored if source == p or source.startswith(p.rstrip("/") + "/")]
        assert not hit, f".dockerignore ({hit}) drops {source}, which the Dockerfile copies"
    assert "deploy/healthcheck.py" in copied
