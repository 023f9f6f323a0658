"""Run directories (:mod:`.directory`), their one writer (:mod:`.lock`) and the
fingerprint of what a run computed (:mod:`.fingerprint`)."""

from fedram_flwr.rundir.directory import (
    ACTIVE,
    FINGERPRINT_FILE,
    PLOT_INPUTS_FILE,
    VARIANT_FILE,
    WEIGHTS_FILE,
    RunDirectory,
    label_fields,
    run_folder,
    safe_component,
)
from fedram_flwr.rundir.fingerprint import code_version, scenario_fingerprint
from fedram_flwr.rundir.lock import LOCK_FILE, RunDirectoryBusy, lock_held, lock_holder

__all__ = [
    "ACTIVE",
    "FINGERPRINT_FILE",
    "LOCK_FILE",
    "PLOT_INPUTS_FILE",
    "VARIANT_FILE",
    "WEIGHTS_FILE",
    "RunDirectory",
    "RunDirectoryBusy",
    "code_version",
    "label_fields",
    "lock_held",
    "lock_holder",
    "run_folder",
    "safe_component",
    "scenario_fingerprint",
]
