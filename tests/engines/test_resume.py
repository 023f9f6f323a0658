"""Resumable in-process runs: a run SIGKILLed mid-way and resumed ends with the files of a
run never interrupted (bit-identical final model, the same metrics rows, summary,
weights and availability record apart from wall-clock fields), for Fed-CVaR-Avg, CA-Fed
(its estimators), FedAR (its update memory) and SCAFFOLD (the clients' control
variates); every algorithm resumes after a failure; checkpoints never change a run."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from flwr.common import Parameters
from flwr.server.client_manager import SimpleClientManager

from fedram_flwr.cli.commands import main
from fedram_flwr.engines import run_in_process
from fedram_flwr.engines.resume import ResumableServer
from fedram_flwr.registry import ALGORITHMS, scenario_from_dict
from fedram_flwr.rundir import CHECKPOINT_FILE, checkpoint, read_checkpoint
from fedram_flwr.rundir.outputs import RunDirectory
from tests.helpers import TINY_GAUSSIAN, final_arrays, run_killed, tiny_ca_fed_dict, without_timings

ROUNDS, EVERY = 8, 2


def tiny(algorithm: str, pi: tuple[float, ...] = (0.9, 0.9, 0.5, 0.5, 0.2, 0.2)) -> dict:
    """An 8-round scenario of ``algorithm``: the 2-D Gaussian one for Fed-CVaR-Avg, else
    the 6-client CA-Fed one (Markov availability ``pi``) with the algorithm's defaults."""
    if algorithm == "fed-cvar-avg":
        return {**copy.deepcopy(TINY_GAUSSIAN), "rounds": ROUNDS, "eval_every": 2}
    raw = tiny_ca_fed_dict(pi=pi, rounds=ROUNDS, eval_every=2)
    if algorithm != "ca-fed":
        raw["algorithm"] = {"name": algorithm, "params": PARAMS.get(algorithm, {})}
    return raw


# rFedFair: alpha_i >= p_i (one client holds 75% of the samples), K = 3 draws a round;
# Amplified SCAFFOLD: periods of 3 rounds, so one closes on each side of a checkpoint
PARAMS = {
    "rfedfair": {"alpha": [1.0], "clients_per_round": 3},
    "amplified-scaffold": {"period": 3},
}


# algorithm -> (scenario, killed right "before"/"after" writing round r's checkpoint)
KILLED: dict[str, tuple[dict, str, int]] = {
    "fed-cvar-avg": (tiny("fed-cvar-avg"), "after", 4),
    "ca-fed": (tiny("ca-fed"), "before", 6),  # rows 5 and 6 written, then dropped
    # rounds 2 and 3 have nobody available: FedAR steps from memory in round 3, resumed
    "fedar": (tiny("fedar", pi=(0.3, 0.2, 0.2, 0.1, 0.1, 0.1)), "after", 2),
    "scaffold": (tiny("scaffold", pi=(0.5, 0.3, 0.3, 0.2, 0.2, 0.1)), "before", 6),
}


def resumed_round(when: str, r: int) -> int:
    """The round of the last checkpoint on disk when killed ``when`` writing round r's."""
    return r if when == "after" else r - EVERY


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> dict[str, RunDirectory]:
    """The four runs, each SIGKILLed at its point (one interpreter start for all), in
    ``<root>/<name>`` beside their scenarios ``<root>/<name>.yaml``; tests resume copies."""
    root = tmp_path_factory.mktemp("killed")
    jobs = []
    for name, (raw, when, r) in KILLED.items():
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw))
        jobs.append((path, root / name, EVERY, r, when))
    run_killed(jobs)
    return {name: RunDirectory(root / name) for name in KILLED}


def carried(name: str, saved: checkpoint.Checkpoint) -> Any:
    """What the checkpoint holds of the state each case is about."""
    state = saved.strategy["strategy"]["state"]
    if name == "fed-cvar-avg":
        return state.arrays[-1]  # the threshold t, moved by training
    if name == "ca-fed":
        return state.tracker.active_counts  # pi_hat's counts
    if name == "fedar":
        return state.memory.updates[state.memory.seen]  # the stored updates G_i
    return sorted(saved.clients)  # the clients holding a control variate c_i


@pytest.mark.parametrize("name", list(KILLED))
def test_a_killed_run_resumes_to_the_files_of_an_uninterrupted_run(
    killed: dict[str, RunDirectory], name: str, tmp_path: Path, capsys
) -> None:
    raw, when, r = KILLED[name]
    scenario = scenario_from_dict(raw)
    run = copy_run(killed[name], tmp_path / "killed")
    assert run.status() == "interrupted"  # "running", and its process is gone
    saved = read_checkpoint(run.path / CHECKPOINT_FILE)
    assert saved.round == resumed_round(when, r)
    assert [row["round"] for row in run.read_metrics()] == list(range(r + 1))
    assert np.any(carried(name, saved))

    capsys.readouterr()
    resumed = run_in_process(scenario, 0, run.path, checkpoint_every=EVERY)
    err = capsys.readouterr().err
    assert f"resuming from its checkpoint after round {saved.round} of {ROUNDS}" in err
    reference = run_in_process(scenario, 0, tmp_path / "reference", checkpoint_every=0)

    for a, b in zip(final_arrays(resumed), final_arrays(reference), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    rows = resumed.read_metrics()
    assert [row["round"] for row in rows] == list(range(ROUNDS + 1))  # none twice
    assert without_timings(rows) == without_timings(reference.read_metrics())
    assert without_timings(resumed.read_summary()) == without_timings(reference.read_summary())
    for name_ in ("availability.csv", "plot_inputs.npz", "weights.npy"):
        ours, theirs = resumed.path / name_, reference.path / name_
        assert ours.is_file() == theirs.is_file()
        if theirs.is_file():
            assert ours.read_bytes() == theirs.read_bytes(), name_
    status = yaml.safe_load((resumed.path / "status.json").read_text())
    assert status["status"] == "complete" and status["resumed-from"] == saved.round
    assert not (resumed.path / CHECKPOINT_FILE).exists()  # a complete run needs none


def copy_run(run: RunDirectory, dest: Path) -> RunDirectory:
    """A copy of ``run`` at ``dest`` (the module's killed runs stay as they were)."""
    shutil.copytree(run.path, dest)
    return RunDirectory(dest)


def test_fedram_run_resumes_an_interrupted_run_and_says_so(
    killed: dict[str, RunDirectory], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fed-CVaR-Avg SIGKILLed after its round-4 checkpoint: ``fedram run --engine flwr``
    refuses it naming ``--force``; ``fedram run`` resumes it (saying so) to the model of a
    run never interrupted."""
    monkeypatch.setattr("fedram_flwr.cli.commands.plot_run", lambda *args: None)
    path, out = killed["fed-cvar-avg"].path.with_suffix(".yaml"), tmp_path / "runs"
    run = copy_run(killed["fed-cvar-avg"], out / "tiny-gaussian" / "default" / "seed0")
    assert run.status() == "interrupted"

    def fedram(*argv: str | Path) -> tuple[int, str]:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        return code, capsys.readouterr().err

    code, err = fedram("run", path, "--out", out, "--engine", "flwr")
    assert code == 2 and "--force" in err and f"{run.path}: after round 4 of {ROUNDS}" in err
    code, err = fedram("run", path, "--out", out, "--checkpoint-every", str(EVERY))
    assert code == 0 and f"resuming from its checkpoint after round 4 of {ROUNDS}" in err
    assert fedram("run", path, "--out", tmp_path / "ref")[0] == 0
    reference = RunDirectory(tmp_path / "ref" / "tiny-gaussian" / "default" / "seed0")
    for a, b in zip(final_arrays(run), final_arrays(reference), strict=True):
        assert np.array_equal(a, b)
    assert without_timings(run.read_metrics()) == without_timings(reference.read_metrics())


class Failure(Exception):
    """Raised in place of a checkpoint: the run fails there."""


def fail_at(monkeypatch: pytest.MonkeyPatch, failing_round: int) -> None:
    write = checkpoint.write_checkpoint

    def write_or_fail(folder: Path, saved: checkpoint.Checkpoint) -> Path:
        if saved.round == failing_round:
            raise Failure(f"round {failing_round}")
        return write(folder, saved)

    monkeypatch.setattr(checkpoint, "write_checkpoint", write_or_fail)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_resumes_after_a_failure(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever an algorithm carries across rounds is in its checkpoint: failed after
    round 6 (last checkpoint: 4) and resumed, it ends where a run never stopped ends."""
    scenario = scenario_from_dict(tiny(name, pi=(0.6, 0.5, 0.5, 0.3, 0.2, 0.1)))
    reference = run_in_process(scenario, 0, tmp_path / "reference", checkpoint_every=0)
    with monkeypatch.context() as patch:
        fail_at(patch, 6)
        with pytest.raises(Failure):
            run_in_process(scenario, 0, tmp_path / "run", checkpoint_every=EVERY)
    run = RunDirectory(tmp_path / "run")
    assert run.status() == "failed" and read_checkpoint(run.path / CHECKPOINT_FILE).round == 4
    resumed = run_in_process(scenario, 0, run.path, checkpoint_every=EVERY)
    status = yaml.safe_load((resumed.path / "status.json").read_text())
    assert status["resumed-from"] == 4  # its checkpoint fits the live run's state
    for a, b in zip(final_arrays(resumed), final_arrays(reference), strict=True):
        assert np.array_equal(a, b)
    assert without_timings(resumed.read_metrics()) == without_timings(reference.read_metrics())


def test_checkpoints_do_not_change_a_run(tiny_scenario, tmp_path: Path, monkeypatch) -> None:
    """A checkpoint every round, none, or the default: the same arrays and rows; the
    checkpoints are written (and the last one removed when the run completes)."""
    written: list[int] = []
    write = checkpoint.write_checkpoint
    monkeypatch.setattr(
        checkpoint,
        "write_checkpoint",
        lambda folder, saved: written.append(saved.round) or write(folder, saved),
    )
    runs = [
        run_in_process(tiny_scenario, 0, tmp_path / str(every), checkpoint_every=every)
        for every in (0, 1, None)
    ]
    assert written == [1, 2, 3, 4, 5] * 2  # rounds 1..5 of 6: every round, and the default
    for run in runs[1:]:
        for a, b in zip(final_arrays(run), final_arrays(runs[0]), strict=True):
            assert np.array_equal(a, b)
        assert without_timings(run.read_metrics()) == without_timings(runs[0].read_metrics())
        assert not (run.path / CHECKPOINT_FILE).exists()


def test_a_checkpoint_of_another_scenario_or_seed_is_never_used(
    tiny_scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    with monkeypatch.context() as patch:
        fail_at(patch, 4)
        with pytest.raises(Failure):
            run_in_process(tiny_scenario, 0, tmp_path / "failed", checkpoint_every=1)
    other = scenario_from_dict({**copy.deepcopy(TINY_GAUSSIAN), "training": {"lr": 0.5}})
    for scenario, seed in ((other, 0), (tiny_scenario, 1)):
        folder = tmp_path / f"run{seed}"
        shutil.copytree(tmp_path / "failed", folder)
        capsys.readouterr()
        run = run_in_process(scenario, seed, folder, checkpoint_every=1)
        err = capsys.readouterr().err
        assert "checkpoint not used (it was made for another scenario or seed)" in err
        assert "starting from round 1" in err and "resuming" not in err
        reference = run_in_process(scenario, seed, tmp_path / f"ref{seed}", checkpoint_every=0)
        for a, b in zip(final_arrays(run), final_arrays(reference), strict=True):
            assert np.array_equal(a, b)
        assert without_timings(run.read_metrics()) == without_timings(reference.read_metrics())


def test_resume_false_starts_over(tiny_scenario, tmp_path: Path, monkeypatch, capsys) -> None:
    with monkeypatch.context() as patch:
        fail_at(patch, 4)
        with pytest.raises(Failure):
            run_in_process(tiny_scenario, 0, tmp_path / "run", checkpoint_every=1)
    capsys.readouterr()
    run_in_process(tiny_scenario, 0, tmp_path / "run", checkpoint_every=0, resume=False)
    assert "resuming" not in capsys.readouterr().err
    status = yaml.safe_load((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "complete" and "resumed-from" not in status
    assert not (tmp_path / "run" / CHECKPOINT_FILE).exists()


def test_a_negative_interval_is_refused(tiny_scenario, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="checkpoint_every"):
        run_in_process(tiny_scenario, 0, tmp_path / "run", checkpoint_every=-1)


class CountingServer(ResumableServer):
    """Records the rounds it trains; evaluates through the stub strategy."""

    def fit_round(self, server_round, timeout):
        self.trained.append(server_round)
        return Parameters(tensors=[bytes([server_round])], tensor_type="t"), {}, ([], [])


class StubStrategy:
    def __init__(self) -> None:
        self.evaluated: list[tuple[int, bytes]] = []

    def initialize_parameters(self, client_manager):
        return Parameters(tensors=[b"init"], tensor_type="t")

    def evaluate(self, server_round, parameters):
        self.evaluated.append((server_round, parameters.tensors[0]))

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []


@pytest.mark.parametrize("start", [0, 3])
def test_the_server_starts_after_its_start_round(start: int) -> None:
    """``start_round`` 0: Flower's fit (round 0's evaluation, rounds 1..R); r > 0: rounds
    r + 1..R from the restored model; the hook ends every round."""
    strategy, ended = StubStrategy(), []
    server = CountingServer(
        client_manager=SimpleClientManager(), strategy=strategy, after_round=ended.append
    )
    server.trained, server.start_round = [], start
    if start:
        server.parameters = Parameters(tensors=[b"restored"], tensor_type="t")
    server.fit(num_rounds=5, timeout=None)
    assert server.trained == ended == list(range(start + 1, 6))
    first = [(0, b"init")] if start == 0 else []
    assert strategy.evaluated == first + [(r, bytes([r])) for r in range(start + 1, 6)]


def test_a_time_limit_stops_the_run_after_a_round_and_a_rerun_continues(
    tiny_scenario, tmp_path: Path
) -> None:
    """An in-process time limit already spent (0 s): the run fails after round 1, with
    round 1's checkpoint written first, naming the limit; the rerun without a limit
    resumes there and ends with the files of a run never stopped."""
    from fedram_flwr.engines.flwr.errors import TimeLimitError

    reference = run_in_process(tiny_scenario, 0, tmp_path / "reference", checkpoint_every=0)
    with pytest.raises(TimeLimitError, match="--time-limit: 0 s ran out after round 1 of"):
        run_in_process(tiny_scenario, 0, tmp_path / "run", checkpoint_every=1, time_limit=0.0)
    run = RunDirectory(tmp_path / "run")
    status = yaml.safe_load((run.path / "status.json").read_text())
    assert status["status"] == "failed" and "TimeLimitError" in status["error"]
    assert read_checkpoint(run.path / CHECKPOINT_FILE).round == 1
    resumed = run_in_process(tiny_scenario, 0, run.path, checkpoint_every=1)
    assert yaml.safe_load((resumed.path / "status.json").read_text())["resumed-from"] == 1
    for a, b in zip(final_arrays(resumed), final_arrays(reference), strict=True):
        assert np.array_equal(a, b)
