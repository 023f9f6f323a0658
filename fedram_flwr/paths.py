"""Where the app's files are: the app root, and paths relative to it."""

from __future__ import annotations

from pathlib import Path

APP_ROOT = Path(__file__).resolve().parent.parent
"""The app's root: the repository, or the folder ``flwr run`` unpacked the FAB into."""


def resolve_app_path(path: str | Path) -> Path:
    """An absolute path, or one relative to the working directory if it exists there,
    else to the app's root (where ``flwr run`` finds files shipped in the FAB)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() or p.exists() else APP_ROOT / p
