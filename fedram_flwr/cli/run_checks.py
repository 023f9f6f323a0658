"""The checks ``fedram run`` makes on run folders: before a sweep starts (complete runs
made with other settings, checkpoints only the in-process engine resumes) and before each
run (complete and whole: skip it)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from fedram_flwr.rundir import ACTIVE, code_version, resume_point
from fedram_flwr.rundir.nofollow import what_is
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.config import Scenario, ScenarioError


def refuse_changed(jobs: list[tuple[str, Scenario, int, Path]]) -> None:
    """Refuse, before running anything, to skip complete runs of another scenario."""
    changed = []
    for _, variant, seed, run_dir in jobs:
        run = RunDirectory(run_dir)
        if run.status() == "complete" and run.damage() is None:
            diff = run.changes(variant.to_dict(), seed)
            if diff is not None:
                changed.append(f"  {run_dir}: {diff}")
    if changed:
        raise ScenarioError(
            "these complete runs were made with other settings:\n"
            + "\n".join(changed)
            + "\nrerun with --force to replace them, or choose another --out"
        )


def refuse_resumable(jobs: list[tuple[str, Scenario, int, Path]], engine: str) -> None:
    """Refuse, before running anything, to start over on a Flower engine a run that the
    in-process engine would resume from its checkpoint (Flower's engines keep the
    clients' ``Context.state`` in their own processes: they cannot resume)."""
    resumable = []
    for _, variant, seed, run_dir in jobs:
        saved, _ = resume_point(RunDirectory(run_dir), variant.to_dict(), seed)
        if saved is not None:
            resumable.append(f"  {run_dir}: after round {saved.round} of {variant.rounds}")
    if resumable:
        raise ScenarioError(
            "these interrupted runs have a checkpoint that only the in-process engine "
            "resumes:\n" + "\n".join(resumable) + f"\nrerun without --engine {engine} to "
            "resume them, with --force to start them over, or choose another --out"
        )


def skip(run: RunDirectory, tag: str, api: str) -> bool:
    """Whether ``run`` (locked by us) is complete, whole and made through ``api``: skip
    it (saying so)."""
    status = run.status()
    if status in ACTIVE:  # we hold its lock: whoever wrote that is gone
        status = "interrupted"
    if status != "complete":
        record = run.path / "status.json"
        if status != "missing":
            print(f"{tag}: {status}, running it again", file=sys.stderr)
        elif os.path.lexists(record) and not stat.S_ISREG(os.lstat(record).st_mode):
            print(f"{tag}: {record} is {what_is(record)}, running it again", file=sys.stderr)
        return False
    why = run.damage()
    if why is not None:
        print(f"{tag}: complete but damaged ({why}), running it again", file=sys.stderr)
        return False
    if run.api() != api:
        print(f"{tag}: complete with the {run.api()} API, running it again", file=sys.stderr)
        return False
    recorded = run.fingerprint().get("code", {}).get("source")
    note = ""
    if not run.fingerprint():
        note = " (without fingerprint.json the code that made it is unknown: --force reruns it)"
    elif recorded != code_version()["source"]:
        note = " (made by other code: --force reruns it)"
    print(f"{tag}: complete, skipped{note}", file=sys.stderr)
    return True
