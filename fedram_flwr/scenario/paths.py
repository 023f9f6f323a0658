"""Where the app's files are: the app root (``flwr run`` finds a relative ``scenario`` of
the run config there). Paths inside a scenario resolve against the working directory
when it is loaded (:mod:`fedram_flwr.scenario.config`)."""

from __future__ import annotations

from pathlib import Path

APP_ROOT = Path(__file__).resolve().parents[2]
"""The app's root: the repository, or the folder ``flwr run`` unpacked the FAB into."""
