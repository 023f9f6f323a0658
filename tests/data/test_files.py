"""Where a data set's files go (fedram_flwr/data/files.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedram_flwr.data.files import DatasetNotFoundError, writable_folder


def test_writable_folder_creates_it(tmp_path: Path) -> None:
    writable_folder(tmp_path / "a" / "b", "cinic10")
    assert (tmp_path / "a" / "b").is_dir()


def test_a_folder_that_cannot_be_made_names_data_root(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DatasetNotFoundError, match=r"data.root: cinic10 is not under .*file/x"):
        writable_folder(tmp_path / "file" / "x", "cinic10")
