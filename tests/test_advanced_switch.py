"""An app in the shape of Flower's advanced examples keeps itself whole when switched.

``tests/advanced_app/`` is such an app: its strategy subclasses Flower's FedAvg, decays
the learning rate in ``configure_train`` and overrides ``start`` (its own round loop
writes ``results.json`` every round and saves each new best model); its ClientApp keeps
its own classification head in ``context.state`` and restores it over the global one
before training. Each diff of ``tests/advanced_switch/`` switches it, as a user would:
to availability by an oracle (Flower's FedAvg under Bernoulli availability), and to
Fed-CVaR-Avg under the RAM with the app's strategy subclassing the library's (its
schedule and loop kept) and the client's ``train_cvar.local(...)``. After each run: the
results file has every round, the checkpoints exist, each round trained exactly the
oracle's draw (recomputed apart), with the scheduled lr, and every client trained from
the head it kept (its trace of the first forward pass). In-process over
``InProcessGrid``, and through ``flwr run`` on Flower's Simulation Engine (``flwr``).
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomli

from fedram_flwr.availability import BernoulliClientManager
from fedram_flwr.availability.laws import ram_relay
from fedram_flwr.engines import InProcessGrid
from tests.helpers import server_identity
from tests.test_examples import changed_lines

APP = Path(__file__).parent / "advanced_app"
DIFFS = Path(__file__).parent / "advanced_switch"
NODES, ROUNDS, LR, DECAY = 3, 4, 0.1, 0.5
MODULES = (
    "advancedapp",
    *(f"advancedapp.{m}" for m in ("task", "client_app", "strategy", "server_app")),
)


def draws(diff: str) -> dict[int, list[int]]:
    """Round -> partitions the diff's oracle makes available, computed apart from the run."""
    rounds = range(1, ROUNDS + 1)
    if diff == "bernoulli_availability.diff":
        oracle = BernoulliClientManager([0.9, 0.6, 0.3], seed=0)
        return {r: oracle.draw(r) for r in rounds}
    return {r: ram_relay([0.5, 0.3, 0.2], 1, 0, r) for r in rounds}


def switched_app(tmp_path: Path, diff: str) -> Path:
    """A copy of the app with ``diff`` applied (``git apply``)."""
    app = tmp_path / Path(diff).stem
    shutil.copytree(APP, app, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "apply", str(DIFFS / diff)], cwd=app, check=True, capture_output=True)
    return app


def run_config(out: Path) -> dict:
    config = tomli.loads((APP / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    return {**config, "num-server-rounds": ROUNDS, "out-dir": str(out)}


def run_in_process(app: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's ``main`` over an ``InProcessGrid`` of NODES nodes running its ClientApp."""
    from flwr.app import Context, RecordDict

    monkeypatch.syspath_prepend(str(app))
    for name in MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    server = importlib.import_module("advancedapp.server_app")
    client = importlib.import_module("advancedapp.client_app")
    for name in MODULES:
        monkeypatch.setitem(sys.modules, name, sys.modules[name])  # forgotten at teardown
    config = run_config(out)
    with server_identity():
        grid = InProcessGrid(client.app, NODES, run_config=config)
        server.main(grid, Context(0, 0, {}, RecordDict(), config))


def assert_whole(out: Path, expected: dict[int, list[int]]) -> None:
    """Its files, its schedule, its personal heads, and exactly the draws trained."""
    results = json.loads((out / "results.json").read_text())
    assert [row["round"] for row in results] == list(range(1, ROUNDS + 1))
    assert list(out.glob("model_state_round_*.pt"))  # its best-model checkpoints
    rows = [json.loads(line) for line in (out / "clients.jsonl").read_text().splitlines()]
    trained = {r: sorted(row["partition"] for row in rows if row["round"] == r) for r in expected}
    assert trained == expected
    for row in rows:
        assert row["lr"] == pytest.approx(LR * DECAY ** (row["round"] - 1))  # its schedule
        if row["head-kept"] is not None:  # trained before: its own head, not the global one
            assert row["head-in"] == row["head-kept"]
    assert any(row["head-kept"] is not None for row in rows)


@pytest.mark.parametrize("diff", ["bernoulli_availability.diff", "fed_cvar_avg.diff"])
def test_switched_advanced_app_in_process(
    diff: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = switched_app(tmp_path, diff)
    run_in_process(app, tmp_path / "out", monkeypatch)
    assert_whole(tmp_path / "out", draws(diff))


@pytest.mark.flwr
@pytest.mark.breadth  # a whole app under flwr run: the second tier
@pytest.mark.parametrize("diff", ["bernoulli_availability.diff", "fed_cvar_avg.diff"])
def test_switched_advanced_app_under_flwr_run(diff: str, tmp_path: Path) -> None:
    """``flwr run .`` on a SuperLink of its own with ``--simulation`` (3 SuperNodes)."""
    from fedram_flwr.engines.flwr.federation import Federation
    from fedram_flwr.engines.flwr.processes import executable

    app, out = switched_app(tmp_path, diff), tmp_path / "out"
    cmd = [executable("flwr"), "run", ".", "", "--run-config", f'out-dir="{out}"']
    cmd += ["--federation-config", f"num-supernodes={NODES}", "--stream"]
    started = time.monotonic()
    with Federation("simulation", NODES, tmp_path / "logs") as fed:  # stops what it started
        cmd[3] = fed.connection
        done = subprocess.run(
            cmd, cwd=app, env=fed.env, capture_output=True, text=True, timeout=600
        )
    print(f"{diff}: flwr run {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_whole(out, draws(diff))


@pytest.mark.parametrize("diff", ["bernoulli_availability.diff", "fed_cvar_avg.diff"])
def test_each_advanced_switch_is_a_few_lines(diff: str) -> None:
    """``git apply --numstat``: 7 lines for availability, 17 for Fed-CVaR-Avg."""
    assert changed_lines(DIFFS / diff) == {"bernoulli_availability.diff": 7}.get(diff, 17)
