"""``flwr build`` of the app, staged as ``flwr run`` ships it: a FAB of format 1 (what
Flower Hub takes) holding the package laid out as installed, the scenarios, README and
LICENSE, and nothing else (no tests, docs, results, bench, examples or scripts)."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
import tomli
from flwr.cli.build import build, build_fab_from_files
from flwr.cli.utils import collect_files
from flwr.supercore.constant import MAX_FILE_BYTES, MAX_FILE_COUNT

from fedram_flwr.engines.flwr.staging import installed_layout, stage_app
from fedram_flwr.registry.app_config import APP_ROOT

NOT_IN_FAB = ("tests", "docs", "bench", "examples", "scripts", "deploy", "runs", ".venv")
"""Top-level folders of the repository that a FAB must not hold (``strategies/`` and
``clients/`` go inside the package)."""


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stage_app(APP_ROOT, tmp_path_factory.mktemp("fab") / "fedram-app")


def expected_files() -> set[str]:
    """The FAB's files, listed from the repository apart from Flower's rules: every file
    of the package and of its mapped folders (inside it), the scenarios, README, LICENSE,
    the pyproject and Flower's manifest."""
    layout = {"fedram_flwr": "fedram_flwr"} | installed_layout(
        tomli.loads((APP_ROOT / "pyproject.toml").read_text())
    )
    files = {"pyproject.toml", ".info/CONTENT", "README.md", "LICENSE"}
    for src, target in layout.items():
        for path in (APP_ROOT / src).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                files.add(f"{target}/{path.relative_to(APP_ROOT / src).as_posix()}")
    files |= {f"scenarios/{p.name}" for p in (APP_ROOT / "scenarios").glob("*.yaml")}
    return files


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_flwr_build_makes_a_fab_of_the_app_alone(
    staged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # flwr build writes the FAB here
    build(app=staged)
    (fab,) = tmp_path.glob("fedram.fedram-flwr.0-1-0.*.fab")
    with zipfile.ZipFile(fab) as bundle:
        names = set(bundle.namelist())
        sizes = [info.file_size for info in bundle.infolist()]
        assert bundle.read("LICENSE").decode().split()[:3] == ["Apache", "License", "Version"]
    assert not {n.split("/")[0] for n in names} & {*NOT_IN_FAB, "strategies", "clients"}
    assert names == expected_files()
    assert {"fedram_flwr/strategies/__init__.py", "fedram_flwr/clients/app.py"} <= names
    # within Flower Hub's limits on what it publishes
    assert len(names) <= MAX_FILE_COUNT and max(sizes) <= MAX_FILE_BYTES


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_fab_is_format_1_targeting_the_default_flower_line(staged: Path) -> None:
    _, meta = build_fab_from_files(collect_files(staged))
    pinned = re.search(r"^flwr==(\S+)$", (APP_ROOT / "constraints.txt").read_text(), re.M)
    dependency = next(
        d
        for d in tomli.loads((APP_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if d.startswith("flwr")
    )
    assert meta.fab_format_version == 1
    assert pinned and meta.flwr_version_target == pinned.group(1)  # the default line
    assert f"flwr>={meta.flwr_version_min}," in dependency  # the lower bound of the range
