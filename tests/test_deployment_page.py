"""The commands of docs/deployment.md (and the README's) are right for each Flower line:
every flag of their ``flower-superlink``, ``flower-supernode`` and ``flwr run`` exists in
that line's own ``--help`` (its parsers), and the Fleet ports and flags are the ones
:mod:`fedram_flwr.engines.flwr.flower_line` knows for the line. The installed line is
always checked; the other line where its virtualenv is there (``.venv-flwr1.39`` from
``scripts/test_flower_line.sh``, ``.venv`` seen from that one, or
``$FEDRAM_OTHER_LINE_VENV``), else skipped, saying so."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from fedram_flwr.engines.flwr.flower_line import LINE, FlowerLine, line_of

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "deployment.md"
LINES = {"1.42": line_of("1.42.0"), "1.39": line_of("1.39.0")}
"""The two lines the page has blocks for, by the name it gives them."""
PROGRAMS = ("flower-superlink", "flower-supernode", "flwr")
FENCE = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"flwr (1\.\d+)")


@dataclass(frozen=True)
class Command:
    """One command of the page: which line it is for (None: both), the program, its
    flags (``--name``, without a value), and the ``host:port`` given to ``--superlink``."""

    line: str | None
    program: str
    flags: tuple[str, ...]
    superlink: str | None
    text: str


def block_commands(block: str, line: str | None) -> list[Command]:
    """The commands of one ```bash block; a ``# flwr 1.39`` comment switches the line for
    the lines after it."""
    commands = []
    for raw in block.replace("\\\n", " ").splitlines():
        code, _, comment = (
            raw.partition(" #") if not raw.lstrip().startswith("#") else ("", "", raw)
        )
        if marker := MARKER.search(comment):
            line = marker.group(1)
        try:
            tokens = shlex.split(code, comments=False)
        except ValueError:  # a here-document's body and the like: no command of ours
            continue
        for i, token in enumerate(tokens):
            if token not in PROGRAMS:
                continue
            args = tokens[i + 1 :]
            if token == "flwr":  # its subcommand's flags: `flwr run --help`
                if not args or args[0].startswith("-"):
                    continue
                token = f"flwr {args[0]}"
            end = next((j for j, a in enumerate(args) if a in {"&", "&&", ";", "|"}), len(args))
            args = args[:end]
            flags = tuple(a.split("=", 1)[0] for a in args if a.startswith("--"))
            superlink = next(
                (
                    (a.split("=", 1)[1] if "=" in a else args[j + 1])
                    for j, a in enumerate(args)
                    if a.split("=", 1)[0] == "--superlink"
                ),
                None,
            )
            commands.append(Command(line, token, flags, superlink, " ".join(tokens[i:])))
            break
    return commands


LEAD = re.compile(r"\*\*flwr (1\.\d+)")


def page_commands(text: str) -> list[Command]:
    """Every command of the page's ```bash blocks, each with its line: the one a comment
    in the block names (``# flwr 1.39``), else the one the paragraph right before the
    block starts with (``**flwr 1.39: ...**``); None where neither names one (a command
    for both lines)."""
    commands = []
    for match in FENCE.finditer(text):
        paragraph = text[: match.start()].rstrip().rsplit("\n\n", 1)[-1].lstrip()
        lead = LEAD.match(paragraph)
        commands += block_commands(match.group(1), lead.group(1) if lead else None)
    return commands


FLAGS_SCRIPT = """
import argparse, json, typer
from flwr.cli.app import app
from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink
from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

def shown(parser):
    return sorted(
        o for a in parser._actions if a.help != argparse.SUPPRESS
        for o in a.option_strings if o.startswith("--")
    )

run = typer.main.get_command(app).commands["run"]
FLAGS = {
    "flower-superlink": shown(_parse_args_run_superlink()),
    "flower-supernode": shown(_parse_args_run_supernode()),
    "flwr run": sorted(o for p in run.params if not p.hidden for o in p.opts if o[:2] == "--"),
}
"""
"""The flags each program's ``--help`` shows, read from the line's own parsers (argparse
for the SuperLink and SuperNode, Typer for ``flwr``), hidden ones left out."""


def installed_flags() -> dict[str, frozenset[str]]:
    namespace: dict = {}
    exec(FLAGS_SCRIPT, namespace)
    return {k: frozenset(v) for k, v in namespace["FLAGS"].items()}


def venv_flags(python: Path) -> dict[str, frozenset[str]]:
    code = FLAGS_SCRIPT + "\nprint(json.dumps(FLAGS))"
    env = {**os.environ, "FLWR_DISABLE_UPDATE_CHECK": "1"}
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    return {k: frozenset(v) for k, v in json.loads(out.stdout.splitlines()[-1]).items()}


def venv_line(bin_dir: Path) -> FlowerLine | None:
    """The Flower line installed in the virtualenv of ``bin_dir``, from its dist-info."""
    for info in bin_dir.parent.glob("lib/python3*/site-packages/flwr*-*.dist-info"):
        if m := re.match(r"flwr(?:_nightly)?-(\d+\.\d+[^-]*)\.dist-info", info.name):
            return line_of(m.group(1))
    return None


@cache
def flags_of_line(fleet: str) -> dict[str, frozenset[str]] | None:
    """Each program's flags on a line with this Fleet transport: the installed line's,
    else from a virtualenv that has it (the project's ``.venv`` or ``.venv-flwr1.39``, or
    ``$FEDRAM_OTHER_LINE_VENV``); None when none has it."""
    if LINE.fleet == fleet:
        return installed_flags()
    candidates = [ROOT / ".venv", ROOT / ".venv-flwr1.39"]
    if other := os.environ.get("FEDRAM_OTHER_LINE_VENV"):
        candidates.append(Path(other))
    for venv in candidates:
        line = venv_line(venv / "bin")
        if line is not None and line.fleet == fleet and (venv / "bin" / "python").exists():
            return venv_flags(venv / "bin" / "python")
    return None


COMMANDS = page_commands(PAGE.read_text()) + page_commands((ROOT / "README.md").read_text())


def test_the_page_has_commands_for_each_line() -> None:
    for name in LINES:
        programs = {c.program for c in COMMANDS if c.line == name}
        assert {"flower-superlink", "flower-supernode"} <= programs, name
    assert any(c.program == "flwr run" for c in COMMANDS)


def test_the_parser_reads_lines_flags_and_the_superlink_address() -> None:
    text = (
        "## A\n\nSome flwr 1.42 prose.\n\n**flwr 1.39: gRPC.**\n\n```bash\n"
        'flower-supernode --insecure --superlink=HOST:9092 \\\n    --node-config "a=1"  # x\n'
        "# flwr 1.42\nflower-superlink --insecure --port $((8000 + i)) &\n```\n\n"
        "## B\n\nOn flwr 1.39 too.\n\n```bash\n"
        "flwr run . mine --stream --run-config 'k=\"v\"'\n```\n"
    )
    found = page_commands(text)
    assert [(c.line, c.program, c.flags, c.superlink) for c in found] == [
        ("1.39", "flower-supernode", ("--insecure", "--superlink", "--node-config"), "HOST:9092"),
        ("1.42", "flower-superlink", ("--insecure", "--port"), None),
        (None, "flwr run", ("--stream", "--run-config"), None),
    ]


def unknown_flags(commands: list[Command], fleet: str, flags: dict[str, frozenset[str]]):
    """``(command, flag)`` for each flag a command of this line uses that its help lacks."""
    return [
        (c.text, f)
        for c in commands
        if c.line is None or LINES[c.line].fleet == fleet
        for f in c.flags
        if f not in flags[c.program]
    ]


def test_a_stale_flag_is_found() -> None:
    helps = {
        "flower-superlink": frozenset({"--insecure"}),
        "flower-supernode": frozenset(),
        "flwr run": frozenset(),
    }
    stale = block_commands("flower-superlink --insecure --fleet-api-type grpc-rere", "1.42")
    assert unknown_flags(stale, "HTTP", helps) == [(stale[0].text, "--fleet-api-type")]


@pytest.mark.parametrize("name", sorted(LINES))
def test_every_flag_is_in_that_lines_own_help(name: str) -> None:
    fleet = LINES[name].fleet
    flags = flags_of_line(fleet)
    if flags is None:
        pytest.skip(
            f"no virtualenv with flwr {name} here (make one: FLOWER_LINE={name} "
            f"VENV=.venv-flwr{name} bash scripts/setup.sh); its flags are not checked"
        )
    assert unknown_flags(COMMANDS, fleet, flags) == []


@pytest.mark.parametrize("name", sorted(LINES))
def test_fleet_ports_and_flags_are_the_lines(name: str) -> None:
    """The SuperNodes of a line's blocks connect to its Fleet port (8000 on HTTP-Fleet
    lines, where Fleet shares the SuperLink's port; 9092 or a moved gRPC port on 1.39), and
    its SuperLinks carry the Fleet flags flower_line gives the line."""
    line = LINES[name]
    fleet_flags = set(line.superlink_fleet_flags("0.0.0.0", 9092)[::2])
    for c in COMMANDS:
        if c.line != name:
            continue
        if c.program == "flower-supernode":
            port = int(c.superlink.rsplit(":", 1)[1])
            assert (port == 9092) == (line.fleet == "gRPC"), c.text
        if c.program == "flower-superlink":
            assert fleet_flags <= set(c.flags), c.text
            assert "--fleet-api-address" not in c.flags or line.fleet == "gRPC", c.text
