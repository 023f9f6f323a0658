"""The package as pip installs it: the wheel holds ``fedram_flwr/**`` only (with
``strategies/`` and ``clients/`` mapped inside it), and the repository root is never on
the package's search path."""

from __future__ import annotations

import importlib
import itertools
import pkgutil
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import fedram_flwr
from fedram_flwr.app_config import APP_ROOT

MAPPED = {"strategies": "fedram_flwr/strategies", "clients": "fedram_flwr/clients"}


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Files of the wheel built (offline, no isolation) from a copy of the project: its
    pyproject.toml, README.md and every top-level Python package folder (tests/ too, so
    that a wheel picking it up would show)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(APP_ROOT / name, src / name)
    for folder in APP_ROOT.iterdir():
        if (folder / "__init__.py").is_file():
            shutil.copytree(folder, src / folder.name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["--no-index", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=1800,  # a hang guard only
    )
    assert res.returncode == 0, res.stdout + res.stderr
    (wheel,) = out.glob("fedram_flwr-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_wheel_holds_only_the_package(wheel_names: list[str]) -> None:
    outside = [
        n for n in wheel_names if not n.startswith(("fedram_flwr/", "fedram_flwr-0.1.0.dist-info/"))
    ]
    assert not outside, f"the wheel holds files outside fedram_flwr/: {outside}"


def test_wheel_holds_every_module_at_its_installed_place(wheel_names: list[str]) -> None:
    expected = {
        p.relative_to(APP_ROOT).as_posix() for p in (APP_ROOT / "fedram_flwr").rglob("*.py")
    }
    for folder, target in MAPPED.items():
        expected |= {
            f"{target}/{p.relative_to(APP_ROOT / folder).as_posix()}"
            for p in (APP_ROOT / folder).rglob("*.py")
        }
    packaged = {n for n in wheel_names if n.endswith(".py")}
    assert sorted(expected - packaged) == [], "modules missing from the wheel (pyproject packages)"
    assert sorted(packaged - expected) == []


@pytest.mark.parametrize(
    "name", ["fedram_flwr.tests", "fedram_flwr.fedram_flwr", "fedram_flwr.bench"]
)
def test_repository_folders_are_not_subpackages(name: str) -> None:
    assert all(Path(p).resolve() != APP_ROOT for p in fedram_flwr.__path__)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


def test_mapped_packages_come_from_their_root_folders() -> None:
    for folder, target in MAPPED.items():
        module = importlib.import_module(target.replace("/", "."))
        assert Path(module.__file__).resolve() == APP_ROOT / folder / "__init__.py"


def test_walk_packages_ends() -> None:
    """Once the repository root was on ``__path__``, ``fedram_flwr.fedram_flwr...`` went
    on forever; each module now appears once. (Bounded by a count, not a clock: a loaded
    machine must not fail it.)"""
    walk = pkgutil.walk_packages(fedram_flwr.__path__, "fedram_flwr.")
    names = [m.name for m in itertools.islice(walk, 1000)]
    assert len(names) < 1000, "the walk did not end"
    assert "fedram_flwr.engines.flwr.run" in names and "fedram_flwr.cli" in names
    assert len(names) == len(set(names))
    assert not [n for n in names if n.startswith(("fedram_flwr.fedram_flwr", "fedram_flwr.tests"))]
