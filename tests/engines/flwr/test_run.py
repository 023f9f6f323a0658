"""run_with_flwr starts a Simulation run again when Ray's node times out during start-up,
and only then (no Flower process is started: the attempt is replaced by a fake)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedram_flwr.engines.flwr import run as run_module
from fedram_flwr.engines.flwr.errors import FlwrRunError
from fedram_flwr.outputs import RunDirectory


def fake_attempts(monkeypatch: pytest.MonkeyPatch, errors: list[str]) -> list[float]:
    """Replace one attempt by: raise the next of ``errors`` (writing a log first), or
    succeed once they are used up. Returns the timeouts the attempts were given."""
    timeouts: list[float] = []

    def attempt(scenario_path, seed, run_dir, *, timeout, **kwargs):
        timeouts.append(timeout)
        logs = Path(run_dir) / "flwr-logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / "flwr-run.log").write_text(f"attempt {len(timeouts)}\n")
        if len(timeouts) <= len(errors):
            raise FlwrRunError(errors[len(timeouts) - 1])
        return RunDirectory(run_dir)

    monkeypatch.setattr(run_module, "_run_once", attempt)
    return timeouts


RAY = f"the Flower run failed: Exception: {run_module.RAY_STARTUP_TIMEOUT}. This could happen"


def test_a_ray_start_up_timeout_starts_the_run_again(monkeypatch, tmp_path: Path) -> None:
    timeouts = fake_attempts(monkeypatch, [RAY, RAY])
    run = run_module.run_with_flwr("s.yaml", 0, tmp_path, timeout=600)
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
        run_module.run_with_flwr("s.yaml", 0, tmp_path)
    assert len(timeouts) == run_module.RAY_STARTUP_RETRIES + 1


@pytest.mark.parametrize(
    ("error", "engine"),
    [("ValueError: bad client", "simulation"), (RAY, "deployment")],
)
def test_other_failures_are_not_retried(monkeypatch, tmp_path: Path, error, engine) -> None:
    timeouts = fake_attempts(monkeypatch, [error])
    with pytest.raises(FlwrRunError):
        run_module.run_with_flwr("s.yaml", 0, tmp_path, engine=engine)
    assert len(timeouts) == 1 and not list(tmp_path.glob("flwr-logs-attempt*"))
