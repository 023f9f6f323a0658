"""The product speaks to its users: no tracked text file (docs, code, comments, tests,
scripts, scenarios) cites the tasks it was built in (a tracker's numbers, which sitting built
what), which its users cannot see. Say the thing itself: "the deadline policy",
"before the change to F3AST's estimator on 2026-11-26". The samples below are spelled
with placeholders so that this file passes a plain ``git grep`` for such words too."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

WORK_WORDS = re.compile(
    r"""
      \bissues?\s+\#?\d+                    # a tracker's number
    | \bthe\s+issue\b                       # and its possessive
    | \bwork\s+items?\b
    | \bsession\s+\d+\b                     # a numbered sitting
    | \b(?:this|that|the|a|one|second|third|fourth|previous|earlier|last|next|later|other)
      \s+sessions?\b(?!\s+of\s+its\s+own)   # not a process's "session of its own"
    | \bthe\s+card's\b
    """,
    re.IGNORECASE | re.VERBOSE,
)
"""Words about how the project was built. Legitimate uses pass: pytest's "test session"
(no determiner right before "session"), a process "in a session of its own"."""

ALLOWED: dict[str, str] = {}
"""Tracked files exempt from the check, each with the reason (none so far)."""


def work_words(text: str) -> list[str]:
    """The work-item words in ``text``, as written."""
    return [m.group(0) for m in WORK_WORDS.finditer(text)]


W = {"I": "iss" + "ue", "S": "sess" + "ion", "WI": "work " + "item", "C": "card" + "'s"}
"""The words the samples are spelled with."""


@pytest.mark.parametrize(
    "text",
    [
        "Tried as a new user would ({I} 40).",
        "{I} 28, item 3. Pure functions",
        "the rule before {I}s 27 and 28",
        "see {I} #12",
        "the {I}'s smallest case",
        "as the {I} states the step",
        "no GPU was lent to this {S}",
        "It ran in the third {S}, at 5e26006.",
        "the p_min = 0.1 half ran in {S} 8",
        "FedAR logreg (earlier {S})",
        "a VM shared with five other {S}s",
        "the next {WI}",
        "the {C} ClientManager",
        "checked against the\n{I} and the code",
    ],
)
def test_the_matcher_finds_work_item_words(text: str) -> None:
    assert work_words(text.format(**W)), text


@pytest.mark.parametrize(
    "text",
    [
        "every run joins the test session's Ray cluster",
        '@pytest.fixture(scope="session")',
        "started in a session of its own, its output to log",
        "before the change to F3AST's estimator on 2026-11-26",
        "the deadline policy drops late updates",
        "Flower's issues are tracked upstream",
        "sessions of SuperNodes",
    ],
)
def test_the_matcher_passes_plain_wording(text: str) -> None:
    assert work_words(text) == []


def tracked_text_files() -> list[Path]:
    """Every file git tracks under the repository root that reads as UTF-8 text."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if not name or name in ALLOWED or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        files.append(path)
    return files


def test_no_tracked_text_file_cites_work_items() -> None:
    files = tracked_text_files()
    assert any(p.name == "README.md" for p in files)
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")  # whole: a phrase may wrap across lines
        for match in WORK_WORDS.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert found == [], "say the thing itself:\n" + "\n".join(found)
