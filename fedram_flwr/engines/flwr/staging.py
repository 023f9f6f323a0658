"""The Flower app as ``flwr run`` ships it (a FAB), staged in a folder of its own.

The repository keeps ``strategies/`` and ``clients/`` at its root; an installed wheel
maps them to ``fedram_flwr.strategies`` / ``fedram_flwr.clients``
(``[tool.setuptools.package-dir]``). Flower puts a FAB's folder first on ``sys.path``
and imports ``fedram_flwr`` from it, so a FAB must hold the package laid out as
installed: :func:`stage_app` copies each mapped folder inside the package and drops the
mapping from the staged ``pyproject.toml``. The Docker image stages its app the same
way (see the Dockerfile).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path, PurePosixPath

import tomli
import tomli_w
from flwr.cli.utils import build_pathspec, load_gitignore_patterns
from flwr.common.constant import FAB_EXCLUDE_PATTERNS

from fedram_flwr.engines.flwr.errors import FlwrRunError


def check_app(app_dir: Path) -> None:
    """``flwr run`` rewrites a pyproject that still has ``[tool.flwr.federations]``
    (1.39 migrates it to FLWR_HOME and comments it out): refuse instead."""
    pyproject = tomli.loads((app_dir / "pyproject.toml").read_text())
    if "federations" in pyproject.get("tool", {}).get("flwr", {}):
        raise FlwrRunError(
            f"{app_dir / 'pyproject.toml'} has a [tool.flwr.federations] section: "
            "flwr 1.39 would migrate it and rewrite the file. Remove it; SuperLink "
            "connections live in $FLWR_HOME/config.toml."
        )


def installed_layout(pyproject: dict) -> dict[str, str]:
    """Source folder -> folder inside the staged app, from ``[tool.setuptools.package-dir]``
    (``{"strategies": "fedram_flwr/strategies", ...}``)."""
    package_dir = pyproject.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {src.strip("/"): package.replace(".", "/") for package, src in package_dir.items()}


def _staged(rel: PurePosixPath, layout: dict[str, str]) -> PurePosixPath:
    """Where the file or folder ``rel`` of the source app goes in the staged app."""
    for src, target in layout.items():
        if rel.parts[: len(PurePosixPath(src).parts)] == PurePosixPath(src).parts:
            return PurePosixPath(target) / rel.relative_to(src)
    return rel


def stage_app(app_dir: Path, dest: Path) -> Path:
    """Copy the app's files that a FAB may hold to ``dest``, laid out as installed, and
    return ``dest``.

    ``flwr run .`` (1.39) walks *every* file under the app before filtering, and with
    the virtualenv inside the project that is ~40k files (8+ s per run here). This
    copies what is left after ``.gitignore`` and Flower's own exclusions, pruning
    ignored directories without descending into them; Flower then filters the copy as
    it would the original. Folders mapped by ``[tool.setuptools.package-dir]`` go inside
    the package (``strategies/`` -> ``fedram_flwr/strategies/``), and the staged
    ``pyproject.toml`` drops that mapping."""
    pyproject = tomli.loads((app_dir / "pyproject.toml").read_text())
    layout = installed_layout(pyproject)
    gitignore = app_dir / ".gitignore"
    patterns = load_gitignore_patterns(gitignore) if gitignore.is_file() else []
    with warnings.catch_warnings():  # Flower's pattern style, deprecated by pathspec
        warnings.simplefilter("ignore", DeprecationWarning)
        ignored = build_pathspec(patterns)
        pruned = build_pathspec([*patterns, *FAB_EXCLUDE_PATTERNS, ".git/"])
    for dirpath, dirnames, filenames in os.walk(app_dir):
        here = Path(dirpath)
        rel = here.relative_to(app_dir)
        dirnames[:] = [
            d
            for d in dirnames
            if not (here / d).is_symlink()
            and not pruned.match_file(f"{(rel / d).as_posix()}/")
            and not pruned.match_file(f"{(rel / d).as_posix()}/_")
        ]
        for name in filenames:
            src = here / name
            if src.is_symlink() or ignored.match_file((rel / name).as_posix()):
                continue
            target = dest / _staged(PurePosixPath(rel.as_posix()) / name, layout)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    if layout:
        del pyproject["tool"]["setuptools"]["package-dir"]
        (dest / "pyproject.toml").write_text(tomli_w.dumps(pyproject))
    return dest


def publish_app(app_dir: Path, dest: Path) -> Path:
    """:func:`stage_app` into a new folder beside ``dest``, then renamed to ``dest`` in
    one step: ``dest`` is absent or whole, never half-staged. When ``dest`` is already
    there (staged by another process) the new copy goes and ``dest`` is kept."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        stage_app(app_dir, staging)
        try:
            os.rename(staging, dest)
        except OSError:  # ENOTEMPTY / EEXIST: published by another process
            if not (dest / "pyproject.toml").is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return dest
