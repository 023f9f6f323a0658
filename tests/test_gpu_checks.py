"""scripts/gpu_checks.sh, the GPU checks as one command: without a GPU it runs nothing and
says so (exit 2), so a machine without one never reports them passed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the script would run")
def test_without_a_gpu_the_checks_refuse_to_run(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_checks.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "no GPU visible" in done.stderr
    assert list((tmp_path / "out").iterdir()) == []
