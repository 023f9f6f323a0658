"""The staged app (what ``flwr run`` ships as a FAB) is laid out as installed and imports
without the repository root or the editable install's mapping."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomli
from flwr.cli.build import build_fab_from_disk

from fedram_flwr.engines.flwr import FlwrRunError
from fedram_flwr.engines.flwr.staging import check_app, installed_layout, stage_app
from fedram_flwr.registry.app_config import APP_ROOT


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stage_app(APP_ROOT, tmp_path_factory.mktemp("staged") / "app")


def test_layout_follows_the_package_dir_mapping() -> None:
    pyproject = tomli.loads((APP_ROOT / "pyproject.toml").read_text())
    assert installed_layout(pyproject) == {
        "strategies": "fedram_flwr/strategies",
        "clients": "fedram_flwr/clients",
    }
    assert installed_layout({}) == {}


def test_staged_app_holds_the_mapped_folders_inside_the_package(staged: Path) -> None:
    for folder in ("strategies", "clients"):
        assert not (staged / folder).exists(), f"{folder}/ left at the top of the FAB"
        sources = sorted(p.name for p in (APP_ROOT / folder).glob("*.py"))
        assert (
            sources
            and sorted(p.name for p in (staged / "fedram_flwr" / folder).glob("*.py")) == sources
        )
    assert (staged / "fedram_flwr" / "server_app.py").is_file()
    assert (staged / "scenarios" / "demo.yaml").is_file()
    assert not (staged / ".venv").exists() and not (staged / ".git").is_dir()
    pyproject = tomli.loads((staged / "pyproject.toml").read_text())
    assert "package-dir" not in pyproject["tool"]["setuptools"]
    original = tomli.loads((APP_ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["flwr"] == original["tool"]["flwr"]
    assert pyproject["project"] == original["project"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_flowers_fab_of_the_staged_app_holds_the_package(staged: Path) -> None:
    with zipfile.ZipFile(io.BytesIO(build_fab_from_disk(staged))) as fab:
        names = set(fab.namelist())
    assert {"fedram_flwr/strategies/__init__.py", "fedram_flwr/clients/__init__.py"} <= names
    assert not any(n.startswith(("strategies/", "clients/")) for n in names)


def test_staged_app_imports_on_its_own(staged: Path) -> None:
    """As Flower loads a FAB: its folder first on sys.path, here with the editable
    install's finder removed, so nothing can come from the repository."""
    code = (
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        f"sys.path.insert(0, {str(staged)!r})\n"
        "import fedram_flwr.server_app, fedram_flwr.clients.app\n"
        "import fedram_flwr.strategies as s, fedram_flwr.clients as c\n"
        "print(s.__file__); print(c.__file__)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, cwd=staged
    )
    assert res.returncode == 0, res.stderr
    files = [Path(line) for line in res.stdout.split()]
    assert files == [
        staged / "fedram_flwr" / "strategies" / "__init__.py",
        staged / "fedram_flwr" / "clients" / "__init__.py",
    ]


def test_check_app_refuses_a_federations_section(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.flwr.federations]\ndefault = 'local'\n")
    with pytest.raises(FlwrRunError, match="federations"):
        check_app(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.flwr.app]\npublisher = 'x'\n")
    check_app(tmp_path)


def test_runs_started_together_on_one_federation_stage_the_app_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many runs asking one federation for its staged app at the same moment (threads
    released together by a barrier) get the same folder, staged once and whole: each
    sees a ``pyproject.toml`` with its ``[project]``, and no half-staged copy is left."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from fedram_flwr.engines.flwr import staging
    from fedram_flwr.engines.flwr.federation import Federation

    calls: list[Path] = []
    real = staging.stage_app

    def counted(app_dir: Path, dest: Path) -> Path:
        calls.append(dest)
        return real(app_dir, dest)

    monkeypatch.setattr(staging, "stage_app", counted)
    runs = 16
    together = Barrier(runs)
    fed = Federation("deployment", 3, tmp_path / "logs")

    def one_run(_: int) -> tuple[Path, dict]:
        together.wait()
        app = fed.staged_app(APP_ROOT)
        return app, tomli.loads((app / "pyproject.toml").read_text())

    try:
        with ThreadPoolExecutor(runs) as pool:
            seen = list(pool.map(one_run, range(runs)))
        left = [p.name for p in fed.home.iterdir() if p.name.startswith(".app")]
    finally:
        fed.stop()
    assert len(calls) == 1 and left == []
    assert {app for app, _ in seen} == {fed.home / "app"}
    assert all(pyproject["project"]["name"] == "fedram-flwr" for _, pyproject in seen)


def test_an_app_published_by_another_process_is_kept(tmp_path: Path) -> None:
    from fedram_flwr.engines.flwr.staging import publish_app

    first = publish_app(APP_ROOT, tmp_path / "app")
    marker = first / "marker"
    marker.write_text("first")
    assert publish_app(APP_ROOT, tmp_path / "app") == first and marker.read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app"]
