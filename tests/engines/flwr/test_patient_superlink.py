"""The project's SuperLink: Flower's, with more patience for its apps' heartbeats."""

from __future__ import annotations

import subprocess
import sys

from fedram_flwr.engines.flwr.federation import superlink_command
from fedram_flwr.engines.flwr.patient_superlink import CLAIM_S, PATIENCE


def test_only_the_task_stores_get_more_patience() -> None:
    """In a fresh interpreter (as the SuperLink runs): the task stores' windows become
    CLAIM_S and CLAIM_S x PATIENCE seconds, the SuperNodes' liveness keeps Flower's."""
    code = (
        "from fedram_flwr.engines.flwr.patient_superlink import patch_task_stores\n"
        "import flwr.common.constant as c\n"
        "print(len(patch_task_stores()))\n"
        "import flwr.supercore.corestate.in_memory_corestate as t\n"
        "import flwr.server.superlink.linkstate.in_memory_linkstate as n\n"
        "print(t.HEARTBEAT_DEFAULT_INTERVAL, t.HEARTBEAT_PATIENCE)\n"
        "print(n.HEARTBEAT_PATIENCE == c.HEARTBEAT_PATIENCE, c.HEARTBEAT_DEFAULT_INTERVAL)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    patched, task, node = out.stdout.split("\n")[:3]
    assert int(patched) >= 1
    assert task.split() == [str(CLAIM_S), str(PATIENCE)]
    assert node == "True 30"  # Flower's own constants untouched


def test_the_federation_starts_the_patient_superlink() -> None:
    assert superlink_command()[1:] == ["-m", "fedram_flwr.engines.flwr.patient_superlink"]
