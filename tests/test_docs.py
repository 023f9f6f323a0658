"""The README and the pages under docs/ link only to files and headings that exist, and every
results folder that scripts/reproduce_readme.sh fills is linked from a results page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def relative_links(text: str) -> list[str]:
    """Targets of the markdown links and images outside code, minus web and mail links."""
    prose = FENCE.sub("", text)
    prose = "\n".join(line for line in prose.split("\n") if not line.startswith("    "))
    prose = INLINE_CODE.sub("x", prose)
    found = LINK.findall(prose)
    return [t for t in found if not re.match(r"^[a-z]+:", t)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(m) for m in re.findall(r"^#+ (.+)$", FENCE.sub("", text), re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    text = page.read_text()
    broken = []
    for target in relative_links(text):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(target)
    return broken


def test_link_checker_finds_a_broken_link_and_skips_code(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading, with `code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok too](there.md#a-heading-with-code) [web](https://x.org/missing)\n"
        "[gone](missing.md) ![gone image](img/none.png) [bad anchor](there.md#nope)\n"
        "`[in code](missing2.md)`\n```\n[in a block](missing3.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md", "img/none.png", "there.md#nope"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_every_generated_results_folder_is_linked_from_a_page() -> None:
    script = (ROOT / "scripts" / "reproduce_readme.sh").read_text()
    folders = set(re.findall(r"docs/results/([a-z0-9_]+)", script))
    linked = {
        Path(t.partition("#")[0]).parts[1]
        for page in PAGES
        if page.parent.name == "docs"
        for t in relative_links(page.read_text())
        if t.startswith("results/") and len(Path(t).parts) > 1
    }
    assert folders, "the script names no docs/results folder"
    assert folders - linked == set()


NUMBER = re.compile(r"\d+(?:\.\d+)?(?: ± \d+(?:\.\d+)?)?")


def uncopied_numbers(page: Path) -> list[str]:
    """Numbers in ``page``'s table rows (a mean ± std as one) that none of the pages the
    row links to contains: a measured line copied from a results page must read as there."""
    missing = []
    for row in re.findall(r"^\|.*\|$", page.read_text(), flags=re.MULTILINE):
        sources = [t.partition("#")[0] for t in relative_links(row)]
        texts = [(page.parent / s).read_text() for s in sources if s.endswith(".md")]
        if not texts:
            continue
        cells = LINK.sub("", INLINE_CODE.sub("x", row))
        for number in NUMBER.findall(re.sub(r"\*\*", "", cells)):
            exact = re.compile(rf"(?<![\d.]){re.escape(number)}(?![\d])")
            if ("." in number or "±" in number) and not any(map(exact.search, texts)):
                missing.append(number)
    return missing


def test_the_copy_check_finds_a_number_the_linked_page_lacks(tmp_path: Path) -> None:
    (tmp_path / "results.md").write_text("| a | 45.17 ± 4.33 | 0.000247 |\n")
    page = tmp_path / "guide.md"
    page.write_text(
        "| a | **45.17 ± 4.33 %** and 0.000247 ([r](results.md#x)) |\n"
        "| b | 45.17 ± 4.3 and 0.00025 and 5.17 ± 4.33 ([r](results.md)) |\n"
        "| c | 1.5 with no link |\n"
    )
    assert uncopied_numbers(page) == ["45.17 ± 4.3", "0.00025", "5.17 ± 4.33"]


def test_the_decision_guide_copies_its_numbers_from_the_pages_it_links() -> None:
    assert uncopied_numbers(ROOT / "docs" / "choosing.md") == []
