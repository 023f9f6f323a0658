"""Run directories (:mod:`.directory`), their one writer (:mod:`.lock`), the
fingerprint of what a run computed (:mod:`.fingerprint`) and the checkpoint an
interrupted run resumes from (:mod:`.checkpoint`)."""

from fedram_flwr.rundir.checkpoint import (
    Checkpoint,
    CheckpointError,
    default_checkpoint_every,
    read_checkpoint,
    resume_point,
)
from fedram_flwr.rundir.directory import (
    ACTIVE,
    CHECKPOINT_FILE,
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
    "CHECKPOINT_FILE",
    "Checkpoint",
    "CheckpointError",
    "FINGERPRINT_FILE",
    "LOCK_FILE",
    "PLOT_INPUTS_FILE",
    "VARIANT_FILE",
    "WEIGHTS_FILE",
    "RunDirectory",
    "RunDirectoryBusy",
    "code_version",
    "default_checkpoint_every",
    "label_fields",
    "read_checkpoint",
    "resume_point",
    "lock_held",
    "lock_holder",
    "run_folder",
    "safe_component",
    "scenario_fingerprint",
]
