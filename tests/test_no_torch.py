"""``fedram`` installed without the ``experiments`` extra: ``--help``
and ``show`` work, ``run`` and ``report`` say which extra to install (exit 2), instead of
``ModuleNotFoundError: No module named 'torch'``. A fresh interpreter whose import
system finds no torch, torchvision or ray stands in for such an install; the commands
fork from it (one interpreter start for all, :func:`tests.helpers.run_forked`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from fedram_flwr.cli.extras import INSTALL
from tests.helpers import TINY_GAUSSIAN, run_forked

WITHOUT_TORCH = """
import sys

class NotInstalled:
    '''What the import system does for a package that is not installed.'''

    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'torchvision', 'ray'):
            raise ModuleNotFoundError(f'No module named {name!r}', name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from fedram_flwr.cli.commands import main

def fedram(*argv):
    try:
        code = main(list(argv))
    finally:
        assert 'torch' not in sys.modules, 'torch was imported'
    sys.exit(code)
"""


def test_fedram_without_torch_helps_shows_and_names_the_extra(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(yaml.safe_dump({**TINY_GAUSSIAN, "sweep": {"training.lr": [0.1, 0.2]}}))
    out = tmp_path / "runs"
    jobs = [
        "fedram('--help')",
        "fedram('run', '--help')",
        f"fedram('show', {str(scenario)!r})",
        f"fedram('run', {str(scenario)!r}, '--out', {str(out)!r})",
        f"fedram('report', {str(tmp_path)!r})",
    ]
    ends, err = run_forked(WITHOUT_TORCH, jobs)
    assert ends == [0, 0, 0, 2, 2], err[-3000:]
    assert "ModuleNotFoundError" not in err and "Traceback" not in err, err[-3000:]
    for command in ("fedram run", "fedram report"):
        assert f"fedram: error: {command} needs the 'experiments' extra" in err, err
    assert err.count(INSTALL) == 2 and not out.exists()
