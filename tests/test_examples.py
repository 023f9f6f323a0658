"""Plug-in use: a stock Flower app switched to our strategies and oracles by a few lines.

``examples/stock_app`` is a small legacy-API Flower app (FedAvg, NumPyClient, numpy
softmax regression); each ``examples/switch_to_*.patch`` is the whole change that
switches it to Fed-CVaR-Avg (RAM), FedAR (Bernoulli) or CA-Fed (Markov). Every app runs
through its own ``server_fn`` / ``client_fn`` in Flower's legacy ``Server`` loop
(in-process clients: no Ray, well under a second), and a switched one must really use
the new pieces: in each round exactly the clients the oracle relays train (for the RAM,
recomputed from its law), and the algorithm's own state moves (Fed-CVaR-Avg's t, FedAR's
update memory, CA-Fed's loss estimates). The Python examples of docs/API.md run too, so
its import paths and constructor arguments stay true.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import tomli
from flwr.common import Context, RecordDict, parameters_to_ndarrays
from flwr.server import Server, ServerApp
from flwr.server.client_manager import SimpleClientManager

from fedram_flwr.app_config import APP_ROOT
from fedram_flwr.availability import (
    BernoulliClientManager,
    MarkovClientManager,
    RandomAccessClientManager,
    ram_relay,
)
from fedram_flwr.engines import InProcessClientProxy, node_context
from fedram_flwr.strategies import CAFed, FedAR, FedCVaRAvg

EXAMPLES = APP_ROOT / "examples"
NUM_CLIENTS = 3
ROUNDS = 12


def switched(tmp_path: Path, patch: Path) -> Path:
    """A copy of the stock app with ``patch`` applied (as a user would apply it)."""
    app = tmp_path / patch.stem
    shutil.copytree(EXAMPLES / "stock_app", app)
    subprocess.run(["git", "apply", str(patch)], cwd=app, check=True, capture_output=True)
    return app


def load_app(app: Path, monkeypatch: pytest.MonkeyPatch):
    """Import the app's server and client modules as Flower would: its folder first on
    sys.path (the stock and switched apps share module names, so forget them after)."""
    components = tomli.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    monkeypatch.syspath_prepend(str(app))
    for name in ("task", "client_app", "server_app"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    server_ref, client_ref = (components["components"][k] for k in ("serverapp", "clientapp"))
    server_module = importlib.import_module(server_ref.split(":")[0])
    client_module = importlib.import_module(client_ref.split(":")[0])
    assert isinstance(getattr(server_module, server_ref.split(":")[1]), ServerApp)
    for name in ("task", "client_app", "server_app"):
        monkeypatch.setitem(sys.modules, name, sys.modules[name])  # removed at teardown
    return server_module.server_fn, client_module.client_fn, components["config"]


def run_app(app: Path, monkeypatch: pytest.MonkeyPatch):
    """Run the app in Flower's legacy Server loop; returns (strategy, manager, final
    arrays, {round: sorted partition ids that trained})."""
    server_fn, client_fn, run_config = load_app(app, monkeypatch)
    run_config = {**run_config, "num-server-rounds": ROUNDS}
    components = server_fn(Context(0, 0, {}, RecordDict(), run_config))
    strategy = components.strategy
    manager = components.client_manager or SimpleClientManager()
    trained: dict[int, list[int]] = defaultdict(list)
    current = {"round": 0}

    class RecordingProxy(InProcessClientProxy):
        def fit(self, ins, timeout, group_id):
            trained[current["round"]].append(int(self.cid))
            return super().fit(ins, timeout, group_id)

    configure_fit = strategy.configure_fit

    def configure_and_count(server_round, parameters, client_manager):
        current["round"] = server_round
        return configure_fit(server_round, parameters, client_manager)

    strategy.configure_fit = configure_and_count
    for pid in range(NUM_CLIENTS):
        context = node_context(pid, NUM_CLIENTS, run_config)
        manager.register(RecordingProxy(str(pid), client_fn, context))
    server = Server(client_manager=manager, strategy=strategy)
    server.fit(num_rounds=components.config.num_rounds, timeout=None)
    final = parameters_to_ndarrays(server.parameters)
    return strategy, manager, final, {r: sorted(ids) for r, ids in trained.items()}


def test_stock_app_runs_fedavg_on_every_client(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, final, trained = run_app(EXAMPLES / "stock_app", monkeypatch)
    assert trained == {r: list(range(NUM_CLIENTS)) for r in range(1, ROUNDS + 1)}
    assert [a.shape for a in final] == [(3, 3)]


def test_fed_cvar_avg_patch_follows_the_ram_and_trains_t(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = switched(tmp_path, EXAMPLES / "switch_to_fed_cvar_avg.patch")
    strategy, manager, final, trained = run_app(app, monkeypatch)
    assert isinstance(strategy, FedCVaRAvg) and isinstance(manager, RandomAccessClientManager)
    # Exactly the client the RAM's law relays in each round trained, not FedAvg's choice.
    relays = {r: ram_relay(manager.rho, 1, manager.seed, r) for r in range(1, ROUNDS + 1)}
    assert trained == relays
    assert len({ids[0] for ids in relays.values()}) > 1
    # The global state is (theta, t), and the relayed clients moved t from 0.
    assert [a.shape for a in final] == [(3, 3), (1,)]
    assert final[1][0] != 0.0


SWITCHES = {
    "switch_to_fedar.patch": (FedAR, BernoulliClientManager),
    "switch_to_ca_fed.patch": (CAFed, MarkovClientManager),
}


@pytest.mark.parametrize("patch", sorted(SWITCHES))
def test_patch_switches_to_strategy_and_oracle(
    patch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    strategy, manager, final, trained = run_app(switched(tmp_path, EXAMPLES / patch), monkeypatch)
    strategy_cls, oracle_cls = SWITCHES[patch]
    assert isinstance(strategy, strategy_cls) and isinstance(manager, oracle_cls)
    draws = {r: manager.draw(r) for r in range(1, ROUNDS + 1)}
    assert trained == {r: ids for r, ids in draws.items() if ids}
    assert any(0 < len(ids) < NUM_CLIENTS for ids in draws.values())  # some absent
    assert [a.shape for a in final] == [(3, 3)] and np.any(final[0] != 0)
    if isinstance(strategy, FedAR):  # the stale-update memory holds every client seen
        assert strategy.state.memory.seen.tolist() == [
            any(k in ids for ids in draws.values()) for k in range(NUM_CLIENTS)
        ]
    else:  # CA-Fed read the received losses and tracked availability every round
        assert strategy.state.losses is not None and strategy.state.tracker.rounds == ROUNDS


@pytest.mark.parametrize("patch", sorted(EXAMPLES.glob("switch_to_*.patch")), ids=lambda p: p.stem)
def test_switches_are_a_few_lines(patch: Path) -> None:
    lines = patch.read_text().splitlines()
    changed = [line for line in lines if re.match(r"[+-](?![+-]{2} )", line)]
    assert len(changed) <= 30, f"{patch.name}: {len(changed)} changed lines"


def api_examples() -> list[str]:
    """The ```python blocks of docs/API.md."""
    text = (APP_ROOT / "docs" / "API.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(api_examples())))
def test_api_doc_examples_run_and_check_what_they_show(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each example runs from the repository root (its paths are the README's) and
    asserts what it shows; an example without an assertion checks nothing and fails."""
    code = api_examples()[index]
    assert re.search(r"^\s*assert ", code, flags=re.M), f"API.md example {index} asserts nothing"
    monkeypatch.chdir(APP_ROOT)
    exec(compile(code, f"docs/API.md example {index}", "exec"), {"np": np})
