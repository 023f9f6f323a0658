"""``flower-superlink`` with more patience for its apps' heartbeats on a loaded machine.

Flower's SuperLink (1.40 and later, ``flwr.supercore.corestate``) gives a claimed task
(the ``flwr-serverapp`` of a run) ``HEARTBEAT_DEFAULT_INTERVAL`` = 30 s to send its first
heartbeat and then ``HEARTBEAT_PATIENCE`` x 30 s = 60 s between heartbeats, after which
it marks the run *failed* ("No heartbeat received from the task") while the ServerApp is
still training. On a shared 2-core machine at load 13 this happened to a healthy run (a
test of the first tier, beside a second tier-1 run). Flower has no flag for these
values, so the federations this project starts run the SuperLink through this module,
which sets them in the task store's module only (:data:`CLAIM_S`, :data:`PATIENCE`)
and then runs Flower's own ``flower-superlink`` entry point unchanged. SuperNode
liveness (the Fleet's node heartbeats, ``flwr.server.superlink.linkstate``) keeps
Flower's values, so a killed SuperNode is noticed as before. On a Flower line without
that module (1.39) nothing is changed.

Run as ``python -m fedram_flwr.engines.flwr.patient_superlink [flower-superlink args]``.
"""

from __future__ import annotations

import sys

CLAIM_S = 120
"""Seconds a claimed app has to send its first heartbeat (Flower: 30)."""

PATIENCE = 3
"""Missed intervals tolerated: CLAIM_S x PATIENCE = 360 s between heartbeats (Flower: 60 s)."""

TASK_STORES = (
    "flwr.supercore.corestate.in_memory_corestate",
    "flwr.supercore.corestate.sql_corestate",
)


def patch_task_stores() -> list[str]:
    """Set the task stores' heartbeat windows; the names of the modules patched."""
    patched = []
    for name in TASK_STORES:
        try:
            module = __import__(name, fromlist=["_"])
        except ImportError:  # another Flower line
            continue
        if hasattr(module, "HEARTBEAT_PATIENCE") and hasattr(module, "HEARTBEAT_DEFAULT_INTERVAL"):
            module.HEARTBEAT_DEFAULT_INTERVAL = CLAIM_S
            module.HEARTBEAT_PATIENCE = PATIENCE
            patched.append(name)
    return patched


def main() -> None:
    """Patch the task stores, then run Flower's ``flower-superlink`` with our arguments."""
    from flwr.superlink.cli import flower_superlink

    patch_task_stores()
    sys.argv[0] = "flower-superlink"
    sys.exit(flower_superlink())


if __name__ == "__main__":
    main()
