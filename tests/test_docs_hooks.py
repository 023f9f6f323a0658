"""The documentation site's hooks (scripts/docs_hooks.py), without MkDocs: links out of
docs/ are checked against the repository and kept as text (or sent to ``repo_url``), a
folder with a README links to it, links in code are left alone, and the command line's
help is its parser's."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from fedram_flwr.registry.app_config import APP_ROOT

spec = importlib.util.spec_from_file_location("docs_hooks", APP_ROOT / "scripts" / "docs_hooks.py")
hooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hooks)


def render(markdown: str, repo_url: str = "", page: str = "time.md") -> str:
    config = {
        "docs_dir": str(APP_ROOT / "docs"),
        "config_file_path": str(APP_ROOT / "mkdocs.yml"),
        "repo_url": repo_url,
    }
    return hooks.on_page_markdown(
        markdown, SimpleNamespace(file=SimpleNamespace(src_path=page)), config, None
    )


def test_links_out_of_docs_name_repository_files() -> None:
    assert render("see [the policy](../fedram_flwr/clock/policy.py).") == (
        "see the policy (`fedram_flwr/clock/policy.py`)."
    )
    assert render("[`strategies/core.py`](../strategies/core.py)") == "`strategies/core.py`"
    assert render("[the core](../strategies/core.py#L3)", repo_url="https://h/o/r/") == (
        "[the core](https://h/o/r/blob/main/strategies/core.py)"
    )
    assert render("[scenarios](../scenarios/)", repo_url="https://h/o/r") == (
        "[scenarios](https://h/o/r/tree/main/scenarios/)"
    )


def test_pages_of_the_site_and_code_are_left_to_mkdocs() -> None:
    for text in (
        "[API](API.md#message-api)",
        "[out](https://flower.ai)",
        "`[x](../nowhere.py)`",
        "```\n[x](../nowhere.py)\n```",
    ):
        assert render(text) == text


def test_a_folder_with_a_readme_links_to_it() -> None:
    assert render("[switched](quickstart-switch/)", page="API.md") == (
        "[switched](quickstart-switch/README.md)"
    )


def test_a_link_to_nothing_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mkdocs.plugins.fedram"):
        assert render("[gone](../strategies/gone.py)") == "[gone](../strategies/gone.py)"
    assert [r.getMessage() for r in caplog.records] == [
        "time.md: the link to '../strategies/gone.py' names no file or folder of the repository"
    ]


def test_the_command_lines_help_is_its_parsers() -> None:
    from fedram_flwr.cli import commands
    from fedram_flwr.cli.args import parser

    out = render("<!-- fedram-help: show -->")
    assert out.startswith("```text\nusage: fedram show") and out.endswith("\n```")
    subparsers = next(a for a in parser("x")._actions if a.dest == "command")
    assert set(subparsers.choices) == {"run", "report", "show"}
    assert (commands.__doc__ or "").split("\n")[0] in render("<!-- fedram-help: -->")


def test_the_source_layout_is_the_installed_package(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(hooks, "SOURCE", tmp_path / "src")
    hooks.on_startup("build", False)
    package = tmp_path / "src" / "fedram_flwr"
    assert (package / "strategies" / "core.py").resolve() == APP_ROOT / "strategies" / "core.py"
    assert (package / "clients" / "app.py").resolve() == APP_ROOT / "clients" / "app.py"
    assert (package / "server_app.py").resolve() == APP_ROOT / "fedram_flwr" / "server_app.py"
