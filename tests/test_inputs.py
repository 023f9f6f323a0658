"""Hostile and careless inputs: YAML bombs in a scenario file, a
``--set`` value and a sweep value; names that would be path components; names too long
for the file system; ``--out ""``. Each is refused with ``fedram: error: ...`` (exit 2)
naming the source, before anything is run."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.registry import load_scenario, scenario_from_dict
from fedram_flwr.rundir import run_folder
from fedram_flwr.scenario.config import ScenarioError
from fedram_flwr.scenario.schema import (
    MAX_INT_DIGITS,
    MAX_YAML_CHARS,
    MAX_YAML_DEPTH,
    NAME_MAX,
    load_yaml,
)
from tests.helpers import TINY_GAUSSIAN

# Nine levels of nine aliases: 9^9 = 387 million strings once expanded, 200 bytes written.
BOMB = (
    "["
    + ", ".join(
        [f"&l0 [{', '.join(['lol'] * 9)}]"]
        + [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    )
    + "]"
)
DEEP = "[" * 5000 + "]" * 5000
HUGE_INT = "9" * 5000


def fedram(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    """``fedram ARGV``: (exit code, stderr)."""
    capsys.readouterr()
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def scenario_text(**top: str) -> str:
    """The tiny scenario as YAML text, with top-level ``key: <raw YAML>`` lines added."""
    raw = copy.deepcopy(TINY_GAUSSIAN)
    return yaml.safe_dump(raw, sort_keys=False) + "".join(f"{k}: {v}\n" for k, v in top.items())


# ------------------------------------------------------------------------- YAML
@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f"description: {BOMB}", "expands to more than"),
        (f"sweep: {{description: {BOMB}}}", "expands to more than"),
        (f"description: {DEEP}", f"nested more than {MAX_YAML_DEPTH} levels deep"),
        (f"rounds: {HUGE_INT}", f"an integer of 5000 digits; at most {MAX_INT_DIGITS}"),
        (f"seeds: [0x{'f' * 5000}]", "digits; at most"),
    ],
)
def test_yaml_over_the_limits_is_refused_naming_where(text: str, says: str) -> None:
    with pytest.raises(ScenarioError, match="scenario.yaml: refused: line 1") as err:
        load_yaml(text, "scenario.yaml")
    assert says in str(err.value)


def test_an_alias_bomb_names_the_field_it_is_in() -> None:
    with pytest.raises(ScenarioError, match=r"sweep\.description\[6\]: expands"):
        load_yaml(f"sweep: {{description: {BOMB}}}", "s.yaml")


def test_yaml_longer_than_the_limit_is_refused_unread() -> None:
    with pytest.raises(ScenarioError, match=f"at most {MAX_YAML_CHARS:,}"):
        load_yaml("#" * (MAX_YAML_CHARS + 1), "big.yaml")


def test_aliases_within_the_limits_still_load() -> None:
    raw = load_yaml("a: &x [1, 2]\nb: *x\nn: 12345678901234567890", "ok.yaml")
    assert raw == {"a": [1, 2], "b": [1, 2], "n": 12345678901234567890}


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        ("set", BOMB, "override description: refused"),
        ("set", DEEP, "override description: refused"),
        ("set", HUGE_INT, "override description: refused"),
        ("file", BOMB, "tiny.yaml: refused"),
        ("file", DEEP, "tiny.yaml: refused"),
        ("sweep", BOMB, "tiny.yaml: refused"),
        ("sweep", HUGE_INT, "tiny.yaml: refused"),
    ],
)
def test_the_cli_refuses_a_yaml_bomb_with_exit_2(
    tmp_path: Path, capsys, where: str, value: str, says: str
) -> None:
    path = tmp_path / "tiny.yaml"
    out = tmp_path / "runs"
    if where == "set":
        path.write_text(scenario_text())
        argv = ["--set", f"description={value}"]
    elif where == "file":
        path.write_text(scenario_text(description=value))
        argv = []
    else:
        path.write_text(scenario_text(sweep=f"{{description: [{value}]}}"))
        argv = []
    code, err = fedram(capsys, "run", path, "--out", out, *argv)
    assert code == 2, err
    assert err.startswith(f"fedram: error: {says}") or says in err, err
    assert "Traceback" not in err
    assert not out.exists()  # refused before anything was written


# ------------------------------------------------------------------- names, paths
LONG = "n" * (NAME_MAX + 1)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--set", f"name={LONG}"],
            f"name: '{'n' * 40}'... is 256 bytes long; a folder name is at most 255",
        ),
        (["--set", "name='a\tb'"], "name: 'a\\tb' cannot name a run folder"),
        (["--set", "name=.."], "name: '..' cannot name a run folder"),
        (["--set", f"sweep={{description: [{LONG}]}}"], "sweep: variant label: "),
        (
            ["--set", "sweep={description: ['a/..']}"],
            "sweep: variant label: 'description=a/..'",
        ),
        (["--out", ""], "argument --out: '' names no folder"),
        (["--out", "/".join(["d" * 200] * 21)], "argument --out: 'ddd"),
        (["--out", "/".join(["d" * 200] * 19), "--set", f"name={'n' * 200}"], "--out: run folder"),
    ],
)
def test_names_that_cannot_be_a_folder_are_refused(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, argv: list[str], says: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("tiny.yaml").write_text(scenario_text())
    if argv[0] == "--out" and "argument" in says:
        with pytest.raises(SystemExit) as stop:
            main(["run", "tiny.yaml", *argv])
        code, err = stop.value.code, capsys.readouterr().err
    else:
        code, err = fedram(capsys, "run", "tiny.yaml", *argv)
    assert code == 2 and says in err, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]  # nothing written


def test_a_name_of_255_bytes_is_a_folder(tmp_path: Path) -> None:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw["name"] = "é" * 127 + "n"  # 255 bytes of UTF-8
    scenario = scenario_from_dict(raw)
    folder = run_folder(tmp_path, scenario.name, "default", 0)
    folder.mkdir(parents=True)
    with pytest.raises(ScenarioError, match="is 256 bytes long"):
        scenario_from_dict({**raw, "name": "é" * 128})


def test_a_scenario_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as fh:
        fh.truncate(4 * MAX_YAML_CHARS + 2)  # sparse: no disk used
    with pytest.raises(ScenarioError, match="big.yaml: refused: over"):
        load_scenario(path)


def test_a_scenario_that_is_a_fifo_is_refused_unread(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.yaml")  # reading it would block until someone writes
    with pytest.raises(ScenarioError, match="fifo.yaml: not a regular file"):
        load_scenario(tmp_path / "fifo.yaml")
