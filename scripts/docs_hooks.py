"""MkDocs hooks of the documentation site (mkdocs.yml, ``hooks:``).

- Links that leave ``docs/`` (``../strategies/core.py``, ``../scenarios/demo.yaml``) and
  links to a folder of ``docs/`` (``results/fedar/``) read well on GitHub but are not
  pages of the site. Each must name a file or folder that exists in the repository (else
  a warning, which fails ``mkdocs build --strict``); it then points at the repository
  (``repo_url`` in mkdocs.yml) or, without one, is kept as its text and path. A folder
  holding a ``README.md`` page links to that page.
- The API reference reads the package as installed: ``strategies/`` and ``clients/`` are
  ``fedram_flwr.strategies`` and ``fedram_flwr.clients`` (``[tool.setuptools.package-dir]``
  of pyproject.toml), a mapping the docstring reader (griffe) does not follow. Before a
  build, :data:`SOURCE` gets the package laid out so, as links to the repository's files
  (mkdocs.yml's mkdocstrings ``paths``).
- ``<!-- fedram-help: run -->`` in a page becomes ``fedram run --help``, from the
  command line's own parser (:func:`fedram_flwr.cli.args.parser`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import warnings
from pathlib import Path, PurePosixPath

log = logging.getLogger("mkdocs.plugins.fedram")

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "build" / "docs-src"
"""The package as installed, made of links to the repository's files (ignored by git)."""

LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE = re.compile(r"`[^`]*`")
HELP = re.compile(r"<!-- fedram-help: ?([a-z]*) -->")


def _outside(target: str) -> bool:
    return "://" in target or target.startswith(("#", "mailto:", "/"))


def _rewrite(match: re.Match, page_dir: Path, docs: Path, repo: Path, repo_url: str, src: str):
    bang, text, target = match.groups()
    if _outside(target):
        return match.group(0)
    path, _, anchor = target.partition("#")
    resolved = Path(os.path.normpath(page_dir / path))
    inside = resolved.is_relative_to(docs)
    if inside and not resolved.is_dir():
        return match.group(0)  # a page or file of the site: MkDocs checks it
    if inside and (resolved / "README.md").is_file():
        page = PurePosixPath(path.rstrip("/")) / "README.md"
        return f"{bang}[{text}]({page}{'#' + anchor if anchor else ''})"
    if not resolved.exists() or not resolved.is_relative_to(repo):
        log.warning("%s: the link to '%s' names no file or folder of the repository", src, target)
        return match.group(0)
    rel = resolved.relative_to(repo).as_posix() + ("/" if resolved.is_dir() else "")
    if repo_url:
        kind = "tree" if resolved.is_dir() else "blob"
        return f"{bang}[{text}]({repo_url.rstrip('/')}/{kind}/main/{rel})"
    return text if rel.rstrip("/") in text else f"{text} (`{rel}`)"


def on_startup(command: str, dirty: bool) -> None:
    """Lay :data:`SOURCE` out: ``fedram_flwr/`` linking every entry of the repository's
    package, and each folder of the package-dir mapping inside it."""
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    mapping = pyproject["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(SOURCE, ignore_errors=True)
    package = SOURCE / "fedram_flwr"
    package.mkdir(parents=True)
    for entry in (REPO / "fedram_flwr").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        (SOURCE / name.replace(".", "/")).symlink_to(REPO / folder)


def _help(command: str) -> str:
    """``fedram [command] --help`` as the command line prints it, 88 columns wide."""
    os.environ["COLUMNS"] = "88"
    with warnings.catch_warnings():  # typer's use of click's deprecated names, via flwr
        warnings.simplefilter("ignore", DeprecationWarning)
        from fedram_flwr.cli import commands
        from fedram_flwr.cli.args import parser

    root = parser((commands.__doc__ or "").split("\n")[0])
    if not command:
        return root.format_help()
    subparsers = next(a for a in root._actions if a.dest == "command")
    return subparsers.choices[command].format_help()


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Check and rewrite the page's links that are not pages of the site; expand the
    ``fedram-help`` markers."""
    docs = Path(config["docs_dir"]).resolve()
    repo = Path(config["config_file_path"]).resolve().parent
    page_dir = (docs / page.file.src_path).parent
    repo_url = config.get("repo_url") or ""
    out, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        if fenced:
            out.append(line)
            continue
        if m := HELP.fullmatch(line.strip()):
            out.append(f"```text\n{_help(m.group(1)).rstrip()}\n```")
            continue
        code = [m.span() for m in CODE.finditer(line)]  # links inside inline code stay

        def rewrite(m: re.Match) -> str:
            if any(a < m.start() < b for a, b in code):
                return m.group(0)
            return _rewrite(m, page_dir, docs, repo, repo_url, page.file.src_path)

        out.append(LINK.sub(rewrite, line))
    return "\n".join(out)
