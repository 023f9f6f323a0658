"""A run folder's life cycle searched (hypothesis, stateful): runs killed at a random
round, files damaged in random ways (truncated, garbled, rows deleted, a link planted, the
checkpoint swapped for an older one) and reruns, interleaved. After every step the folder
is either the run never interrupted, bit for bit (rows without their timings, the final
model), or not complete and whole; a rerun ends with that run or with a refusal naming
the file at fault (which the test then removes, as a user would). Never a wrong complete
run.

Each step runs a tiny in-process run (SCAFFOLD: clients carry state; 6 rounds, a
checkpoint every round), so the default profile is kept small; ``HYPOTHESIS_PROFILE=
thorough`` (tests/conftest.py) searches far more sequences."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fedram_flwr.engines import run_in_process
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.rundir import CHECKPOINT_FILE, checkpoint
from fedram_flwr.rundir.nofollow import UnsafePathError
from fedram_flwr.rundir.outputs import RunDirectory
from tests.helpers import final_arrays, tiny_ca_fed_dict, without_timings

ROUNDS = 6
SCENARIO = scenario_from_dict(
    {
        **tiny_ca_fed_dict(pi=(0.6, 0.5, 0.5, 0.3, 0.2, 0.1), rounds=ROUNDS, eval_every=2),
        "algorithm": {"name": "scaffold", "params": {}},
    }
)
FILES = ("metrics.jsonl", CHECKPOINT_FILE, "summary.json", "final_model.npz", "status.json")


class Killed(Exception):
    """Raised in place of a round's checkpoint: the run dies there."""


class RunFolderLife(RuleBasedStateMachine):
    reference: RunDirectory  # the run never interrupted, made once

    @initialize()
    def fresh_folder(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="fedram-life-"))
        self.run = RunDirectory(self.root / "run")
        self.older: list[bytes] = []  # checkpoints seen, oldest first
        self.go(None)  # every sequence starts from a complete run

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def go(self, kill_at: int | None) -> None:
        """Run (again) in the folder; ``kill_at``: die at that round's checkpoint (its
        row written) and leave the status ``running`` for a process that is gone."""
        write = checkpoint.write_checkpoint

        def write_or_die(folder: Path, saved: checkpoint.Checkpoint) -> Path:
            if saved.round == kill_at:
                raise Killed
            path = write(folder, saved)
            self.older.append(path.read_bytes())
            return path

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(checkpoint, "write_checkpoint", write_or_die)
            try:
                run_in_process(SCENARIO, 0, self.run.path, checkpoint_every=1)
            except Killed:
                record = {"status": "running", "pid": 2**22 + 1}
                (self.run.path / "status.json").write_text(json.dumps(record))
            except UnsafePathError as err:  # a refusal names the file at fault
                planted = [p for p in self.run.path.iterdir() if p.is_symlink()]
                assert planted and str(planted[0]) in str(err), err
                for link in planted:
                    link.unlink()

    @rule(kill_at=st.one_of(st.none(), st.integers(1, ROUNDS - 1)))
    def run_or_kill(self, kill_at: int | None) -> None:
        self.go(kill_at)

    @rule(
        name=st.sampled_from(FILES),
        how=st.sampled_from(["delete rows", "truncate", "garble", "link", "older checkpoint"]),
        at=st.floats(0.0, 1.0),
    )
    def damage(self, name: str, how: str, at: float) -> None:
        path = self.run.path / name
        if not path.is_file() or path.is_symlink():
            return
        data = path.read_bytes()
        cut = int(at * len(data))
        if how == "truncate":
            path.write_bytes(data[:cut])
        elif how == "garble" and data:
            i = min(cut, len(data) - 1)
            path.write_bytes(data[:i] + bytes([data[i] ^ 0x5A]) + data[i + 1 :])
        elif how == "delete rows" and name == "metrics.jsonl":
            lines = data.splitlines(True)
            start = int(at * len(lines))
            path.write_bytes(b"".join(lines[:start] + lines[start + 1 + start % 3 :]))
        elif how == "link":
            target = self.root / f"outside-{name}"
            target.write_bytes(b"outside")
            path.unlink()
            path.symlink_to(target)
        elif how == "older checkpoint" and name == CHECKPOINT_FILE and self.older:
            path.write_bytes(self.older[int(at * (len(self.older) - 1))])

    @rule()
    def rerun(self) -> None:
        self.go(None)
        assert self.run.status() == "complete" or any(
            p.is_symlink() for p in self.run.path.iterdir()
        )

    @invariant()
    def never_a_wrong_complete_run(self) -> None:
        if not hasattr(self, "run"):
            return
        for outside in self.root.glob("outside-*"):
            assert outside.read_bytes() == b"outside"  # nothing written through a link
        if self.run.status() != "complete" or self.run.damage() is not None:
            return
        reference = RunFolderLife.reference
        assert without_timings(self.run.read_metrics()) == without_timings(reference.read_metrics())
        for a, b in zip(final_arrays(self.run), final_arrays(reference), strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> RunDirectory:
    root = tmp_path_factory.mktemp("life")
    return run_in_process(SCENARIO, 0, root / "reference", checkpoint_every=0)


def test_a_run_folder_never_ends_a_wrong_complete_run(reference: RunDirectory) -> None:
    RunFolderLife.reference = reference
    machine = RunFolderLife.TestCase
    thorough = settings.default.max_examples > 50  # HYPOTHESIS_PROFILE=thorough
    machine.settings = settings(
        settings.default, max_examples=60 if thorough else 4, stateful_step_count=8
    )
    machine().runTest()
