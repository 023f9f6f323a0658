"""Experiment tracking: runs, sweeps and Flower apps log to TensorBoard, MLflow or
Weights & Biases (the ``tracking`` extra; nothing of a tracker is imported unless asked).

- ``fedram run ... --track tensorboard --track mlflow`` (or ``FEDRAM_TRACK=mlflow,wandb``):
  each run of a sweep is one tracked run (:class:`~fedram_flwr.tracking.run.TrackedRun`),
  its rows logged as the run writes them; see ``docs/tracking.md``.
- In a Flower app: :func:`~fedram_flwr.tracking.app.with_tracking` wraps a Message-API
  strategy so that each round's metrics of its ``start()`` reach the trackers.
"""

from __future__ import annotations

import importlib.util
import os

from fedram_flwr.scenario.schema import ScenarioError
from fedram_flwr.tracking.run import TrackedRun, tracked
from fedram_flwr.tracking.trackers import EXTRA, INSTALL, MODULES, TRACKERS, RunInfo

TRACK_ENV = "FEDRAM_TRACK"
"""The environment variable whose comma-separated trackers ``fedram run`` logs to when
no ``--track`` is given."""


def requested(given: list[str] | None) -> list[str]:
    """The trackers a run logs to: those ``given`` (``--track``), else those
    ``$FEDRAM_TRACK`` names; each checked (a known name, its package installed)."""
    source = "--track"
    if not given:
        source = f"${TRACK_ENV}"
        given = [n.strip() for n in os.environ.get(TRACK_ENV, "").split(",") if n.strip()]
    names = list(dict.fromkeys(given))
    for name in names:
        if name not in TRACKERS:
            raise ScenarioError(
                f"{source}: unknown tracker {name!r}; allowed: {', '.join(TRACKERS)}"
            )
        if importlib.util.find_spec(MODULES[name]) is None:
            raise ScenarioError(
                f"{source} {name}: the {MODULES[name]} package is not installed; it comes "
                f"with the '{EXTRA}' extra: {INSTALL}"
            )
    return names


__all__ = ["EXTRA", "TRACKERS", "TRACK_ENV", "RunInfo", "TrackedRun", "requested", "tracked"]
