"""``examples/fedram_app`` (a Flower app in the shape of Flower's templates, built on this
library) runs with ``flwr run .`` on Flower's Simulation Engine: each round trains
exactly the oracle's draws, and the run equals the same app run in-process.

The SuperLink, its private FLWR_HOME and every process of the run are a
:class:`~fedram_flwr.engines.flwr.federation.Federation`'s: all stopped by pid when the
test ends, also on failure (checked: none carries the federation's token afterwards).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomli
from flwr.app import Context, RecordDict

from fedram_flwr.availability import BernoulliClientManager
from fedram_flwr.engines import InProcessGrid
from fedram_flwr.engines.flwr.federation import Federation
from fedram_flwr.engines.flwr.processes import executable
from fedram_flwr.registry.app_config import APP_ROOT
from tests.helpers import RUN_LIMIT_S, token_processes

EXAMPLE = APP_ROOT / "examples" / "fedram_app"
CONFIG = tomli.loads((EXAMPLE / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]


def copy_app(tmp_path: Path) -> Path:
    """The example as a user's checkout of it (nothing is written into the repository)."""
    app = tmp_path / "fedram_app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__"))
    return app


def in_process(app: Path, result: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The app's ``main`` over an in-process grid of its ClientApp (no Flower engine)."""
    monkeypatch.syspath_prepend(str(app))
    for name in [m for m in sys.modules if m == "fedram_app" or m.startswith("fedram_app.")]:
        monkeypatch.delitem(sys.modules, name)
    from fedram_app import client_app, server_app

    config = {**CONFIG, "result-file": str(result)}
    grid = InProcessGrid(client_app.app, num_partitions=CONFIG["num-clients"], run_config=config)
    server_app.main(grid, Context(0, 0, {}, RecordDict(), config))
    return json.loads(result.read_text())


def flwr_run(app: Path, logs: Path, run_config: str) -> str:
    """``flwr run .`` of ``app`` on the Simulation Engine, in a Federation of its own, with
    ``--run-config run_config``; its log. Fails unless it exits 0 and leaves no process."""
    nodes = CONFIG["num-clients"]
    with Federation("simulation", nodes, logs) as fed:
        cmd = [executable("flwr"), "run", ".", fed.connection, "--stream"]
        cmd += ["--federation-config", f"num-supernodes={nodes}", "--run-config", run_config]
        proc = fed.tracker.spawn(cmd, logs / "flwr-run.log", cwd=app, env=fed.env)
        try:
            proc.wait(timeout=RUN_LIMIT_S)  # a hang guard only
        except subprocess.TimeoutExpired:
            pass
        log = (logs / "flwr-run.log").read_text()
        assert proc.returncode == 0, log[-3000:]
        token = fed.token
    assert token_processes(token) == {}, "processes of the run outlived it"
    return log


@pytest.mark.flwr
@pytest.mark.breadth  # a whole app under flwr run: the second tier
def test_example_app_runs_with_flwr_run_and_trains_the_oracles_draws(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, result = copy_app(tmp_path), tmp_path / "flwr-run.json"
    nodes = CONFIG["num-clients"]
    log = flwr_run(app, tmp_path / "logs", f'result-file="{result}"')
    assert result.is_file(), log[-3000:]
    run = json.loads(result.read_text())

    # each round trained exactly the oracle's draw, recomputed apart from the run
    p = [0.9 - (0.9 - 0.3) * k / (nodes - 1) for k in range(nodes)]
    assert (CONFIG["availability-max"], CONFIG["availability-min"]) == (0.9, 0.3)
    fresh = BernoulliClientManager(p, seed=CONFIG["seed"])
    rounds = range(1, CONFIG["num-server-rounds"] + 1)
    assert run["relayed"] == {str(r): fresh.draw(r) for r in rounds}
    assert any(len(v) < nodes for v in run["relayed"].values())  # the oracle left nodes out
    assert sorted(run["evaluate"]) == [str(r) for r in range(len(rounds) + 1)]
    assert run["evaluate"][str(len(rounds))]["t"] != 0.0  # Fed-CVaR-Avg moved t from 0
    # the Simulation Engine's run is the in-process run, bit for bit
    assert run == in_process(app, tmp_path / "in-process.json", monkeypatch)
