"""run_with_flwr without Flower: the attempt is replaced by a fake, or the run fails before
any Flower process would be needed.

* a Simulation run whose Ray node times out during start-up starts again, and only then;
* the time limit scales with the scenario by default, and running out of it says which
  limit it was and how to raise it;
* ``--kill-supernode`` naming no SuperNode of the run, and a SuperLink that fails to
  start three times, end in ``fedram: error:`` naming the cause.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

import fedram_flwr.cli.commands as cli
from fedram_flwr.engines.flwr import federation
from fedram_flwr.engines.flwr import run as run_module
from fedram_flwr.engines.flwr.errors import FlwrRunError, TimeLimitError
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.rundir.outputs import RunDirectory
from tests.helpers import TINY_GAUSSIAN


def write_scenario(tmp_path: Path, **fields) -> Path:
    """The tiny 6-round scenario as a file (``fields`` override)."""
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY_GAUSSIAN, **fields}))
    return path


def fake_attempts(
    monkeypatch: pytest.MonkeyPatch, errors: list[str], kind: type[FlwrRunError] = FlwrRunError
) -> list[float]:
    """Replace one attempt by: raise the next of ``errors`` (writing a log first), or
    succeed once they are used up. Returns the timeouts the attempts were given."""
    timeouts: list[float] = []

    def attempt(path, scenario, seed, run_dir, *, timeout, **kwargs):
        timeouts.append(timeout)
        logs = Path(run_dir) / "flwr-logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / "flwr-run.log").write_text(f"attempt {len(timeouts)}\n")
        if len(timeouts) <= len(errors):
            raise kind(errors[len(timeouts) - 1])
        return RunDirectory(run_dir)

    monkeypatch.setattr(run_module, "_run_once", attempt)
    return timeouts


RAY = f"the Flower run failed: Exception: {run_module.RAY_STARTUP_TIMEOUT}. This could happen"


def test_a_ray_start_up_timeout_starts_the_run_again(monkeypatch, tmp_path: Path) -> None:
    timeouts = fake_attempts(monkeypatch, [RAY, RAY])
    run = run_module.run_with_flwr(write_scenario(tmp_path), 0, tmp_path, timeout=600)
    assert run.path == tmp_path and len(timeouts) == 3
    assert timeouts == sorted(timeouts, reverse=True) and timeouts[0] <= 600
    for k in (1, 2):  # each failed attempt's logs are kept
        assert (tmp_path / f"flwr-logs-attempt{k}" / "flwr-run.log").read_text() == (
            f"attempt {k}\n"
        )
    assert (tmp_path / "flwr-logs" / "flwr-run.log").read_text() == "attempt 3\n"


def test_retries_are_bounded(monkeypatch, tmp_path: Path) -> None:
    timeouts = fake_attempts(monkeypatch, [RAY] * 5)
    with pytest.raises(FlwrRunError, match="timed out during startup"):
        run_module.run_with_flwr(write_scenario(tmp_path), 0, tmp_path)
    assert len(timeouts) == run_module.RAY_STARTUP_RETRIES + 1


@pytest.mark.parametrize(
    ("error", "engine"),
    [("ValueError: bad client", "simulation"), (RAY, "deployment")],
)
def test_other_failures_are_not_retried(monkeypatch, tmp_path: Path, error, engine) -> None:
    timeouts = fake_attempts(monkeypatch, [error])
    with pytest.raises(FlwrRunError):
        run_module.run_with_flwr(write_scenario(tmp_path), 0, tmp_path, engine=engine)
    assert len(timeouts) == 1 and not list(tmp_path.glob("flwr-logs-attempt*"))


def test_the_default_time_limit_scales_with_the_scenario(monkeypatch, tmp_path) -> None:
    """600 s start-up + rounds x (30 s simulation / 60 s deployment + round_timeout)."""
    limit = run_module.default_time_limit
    tiny = scenario_from_dict({**TINY_GAUSSIAN, "rounds": 6})
    assert limit(tiny, "simulation").seconds == 600 + 6 * 30
    long_run = scenario_from_dict({**TINY_GAUSSIAN, "rounds": 200})
    assert limit(long_run, "deployment").seconds == 600 + 200 * 60  # 900 s before
    connected = {"oracle": "connected", "params": {"round_timeout": 120.0}}
    waits = scenario_from_dict({**TINY_GAUSSIAN, "rounds": 3, "availability": connected})
    assert limit(waits, "deployment").seconds == 600 + 3 * (60 + 120)
    # run_with_flwr without a timeout gives its attempt the default (less what loading took).
    timeouts = fake_attempts(monkeypatch, [])
    run_module.run_with_flwr(write_scenario(tmp_path), 0, tmp_path / "run")
    assert 600 + 6 * 30 - 60 < timeouts[0] <= 600 + 6 * 30


@pytest.mark.parametrize(
    ("timeout", "origin"),
    [
        (
            None,
            "780 s (the default for 6 rounds on the simulation engine: 600 s start-up + 6 x 30 s)",
        ),
        (50, "50 s (set by the caller)"),
    ],
)
def test_a_run_out_of_time_says_which_limit_and_how_to_raise_it(
    monkeypatch, tmp_path: Path, timeout, origin
) -> None:
    fake_attempts(monkeypatch, ["flwr run timed out after 49 s"], TimeLimitError)
    with pytest.raises(TimeLimitError) as err:
        run_module.run_with_flwr(write_scenario(tmp_path), 0, tmp_path / "run", timeout=timeout)
    first = str(err.value).splitlines()[0]
    assert f"used up its time limit of {origin}" in first
    assert "fedram run --time-limit SECONDS" in first
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["status"] == "failed" and origin in status["error"]


def test_kill_supernode_of_no_supernode_fails_before_the_run_starts(tmp_path, capsys) -> None:
    """``--kill-supernode 7@1`` with 3 clients: an error naming the allowed partitions,
    and no status file claiming a start (it said ``starting`` and gave a traceback)."""
    argv = ["run", str(write_scenario(tmp_path)), "--engine", "deployment"]
    assert cli.main([*argv, "--kill-supernode", "7@1", "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "fedram: error: kill_after (--kill-supernode): partition ids [7]" in err
    assert "allowed partitions: 0..2" in err
    assert not list((tmp_path / "runs").rglob("status.json"))


def test_a_superlink_that_fails_three_times_is_named_with_its_cause(
    monkeypatch, tmp_path, capsys
) -> None:
    """A SuperLink exiting at start-up three times (here a stand-in printing Flower's
    error): the run fails naming flower-superlink and the cause, not with a traceback, and
    the sweep ends ``fedram: error:`` naming the failed run (exit 1: a run failed, the
    input was fine)."""
    fake = tmp_path / "flower-superlink"
    fake.write_text("#!/bin/sh\necho 'OSError: [Errno 98] Address already in use'\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(federation, "superlink_command", lambda: [str(fake)])
    argv = ["run", str(write_scenario(tmp_path)), "--engine", "flwr"]
    assert cli.main([*argv, "--out", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first = err.split("failed: FlwrRunError: ")[1].splitlines()[0]
    assert first.startswith("flower-superlink failed to start 3 times; ")
    assert "exited with code 1 at startup: OSError: [Errno 98] Address already in use" in first
    assert err.strip().splitlines()[-1].startswith("fedram: error: 1 of 1 run(s) failed: ")
    (run,) = (tmp_path / "runs").rglob("status.json")
    assert json.loads(run.read_text())["status"] == "failed"
