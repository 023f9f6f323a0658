"""Where a data set's files go: the error that says they are missing, and the check that
``data.root`` can take a download. Shared by :mod:`~fedram_flwr.data.sources` and
:mod:`~fedram_flwr.data.cinic10`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are missing and could not be fetched."""


def writable_folder(folder: Path, name: str) -> None:
    """Create ``folder`` for ``name``'s files, or say that data.root cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK):
            raise PermissionError(13, "Permission denied", str(folder))
    except OSError as err:
        raise DatasetNotFoundError(
            f"data.root: {name} is not under {folder}, which cannot be written to fetch it "
            f"({err.strerror}: {err.filename}). Set data.root or $FEDRAM_DATA to a folder "
            "that holds the files or can be written."
        ) from None


def fetch_into(folder: Path, name: str, fetch: Callable[[], object], how_to_get: str) -> None:
    """Run ``fetch`` (a download into ``folder``); any failure becomes one
    :class:`DatasetNotFoundError` that names ``name``, the folder and ``how_to_get``."""
    writable_folder(folder, name)
    try:
        fetch()
    except Exception as err:  # noqa: BLE001 - any download failure means "not here"
        raise DatasetNotFoundError(
            f"{name} not found under {folder} and the download failed "
            f"({err.__class__.__name__}). To get it: {how_to_get}. Set data.root or "
            "$FEDRAM_DATA to use another folder."
        ) from err
