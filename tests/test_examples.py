"""Plug-in use: stock Flower apps switched to our strategies and oracles by a few lines.

Message API (what Flower hands new users): ``examples/message_app`` is a stock app in the
style of Flower's PyTorch quickstart (``@app.main()`` with Flower's FedAvg and
``strategy.start``, ``@app.train()`` / ``@app.evaluate()`` with a small torch model);
each ``examples/message_switch_to_*.patch`` switches it to Fed-CVaR-Avg (RAM), CA-Fed
(Markov) or leaves Flower's own FedAvg unchanged under Bernoulli availability. Each app's
``@app.main()`` runs over an ``InProcessGrid`` of its own ClientApp with the app's own
run config (fraction-evaluate 0.5 as Flower's template): in each round exactly the
nodes the oracle makes available train *and* evaluate (the draws recomputed by a fresh
oracle, or for the RAM from its law), and the algorithm's state moves.

Legacy API: ``examples/stock_app`` is a small legacy-API Flower app (FedAvg,
NumPyClient, numpy softmax regression); each ``examples/switch_to_*.patch`` switches it
to Fed-CVaR-Avg (RAM), FedAR (Bernoulli) or CA-Fed (Markov). Every app runs through its
own ``server_fn`` / ``client_fn`` in Flower's legacy ``Server`` loop (in-process
clients: no Ray), with the same checks (FedAR: its update memory).

The Python examples of docs/API.md run too, so its import paths and constructor
arguments stay true.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import tomli
import torch
from flwr.app import Message, MessageType
from flwr.clientapp import ClientApp
from flwr.common import Context, RecordDict, parameters_to_ndarrays
from flwr.server import Server, ServerApp
from flwr.server.client_manager import SimpleClientManager
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

from fedram_flwr import message_api
from fedram_flwr.availability import (
    BernoulliClientManager,
    MarkovClientManager,
    OracleClientManager,
    RandomAccessClientManager,
    ram_relay,
)
from fedram_flwr.engines import InProcessClientProxy, node_context
from fedram_flwr.engines.grid import InProcessGrid
from fedram_flwr.message_api import AvailabilityStrategy
from fedram_flwr.protocol import RECEIVED_LOSS, THRESHOLD_T, split_theta_t
from fedram_flwr.registry.app_config import APP_ROOT
from fedram_flwr.strategies import CAFed, FedAR, FedCVaRAvg
from fedram_flwr.strategies.rounds import FailedRoundsError
from tests.helpers import server_identity

EXAMPLES = APP_ROOT / "examples"
NUM_CLIENTS = 3
ROUNDS = 12
APP_MODULES = ("task", "client_app", "server_app")


def switched(tmp_path: Path, patch: Path, stock: str = "stock_app") -> Path:
    """A copy of the stock app with ``patch`` applied (as a user would apply it)."""
    app = tmp_path / patch.stem
    shutil.copytree(EXAMPLES / stock, app, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "apply", str(patch)], cwd=app, check=True, capture_output=True)
    return app


def load_app(app: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType, dict]:
    """The app's server and client modules, imported as Flower would (its folder first on
    sys.path; the apps share module names, so they are forgotten after), and its run
    config."""
    components = tomli.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    monkeypatch.syspath_prepend(str(app))
    for name in APP_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    server_ref, client_ref = (components["components"][k] for k in ("serverapp", "clientapp"))
    server_module = importlib.import_module(server_ref.split(":")[0])
    client_module = importlib.import_module(client_ref.split(":")[0])
    assert isinstance(getattr(server_module, server_ref.split(":")[1]), ServerApp)
    assert isinstance(getattr(client_module, client_ref.split(":")[1]), ClientApp)
    for name in APP_MODULES:
        monkeypatch.setitem(sys.modules, name, sys.modules[name])  # removed at teardown
    return server_module, client_module, components["config"]


def changed_lines(patch: Path) -> int:
    """Added plus removed lines of ``patch``, as ``git apply --numstat`` counts them."""
    out = subprocess.run(
        ["git", "apply", "--numstat", str(patch)], capture_output=True, text=True, check=True
    ).stdout
    return sum(int(added) + int(removed) for added, removed, _ in map(str.split, out.splitlines()))


# ------------------------------------------------------------------- Message API
class RecordingGrid(InProcessGrid):
    """An ``InProcessGrid`` that records whom each message went to: ``sent[(type,
    round)]`` the partitions of the train and evaluate messages of each server round
    (their ``config["server-round"]``), ``queried`` those asked other things (the
    partition-id query), ``train_replies`` (round, partition, metrics) of every train
    reply."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sent: dict[tuple[str, int], list[int]] = defaultdict(list)
        self.queried: list[int] = []
        self.train_replies: list[tuple[int, int, dict]] = []
        self.round_of: dict[str, int] = {}  # train message id -> its round

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        messages = list(messages)
        ids = super().push_messages(messages)
        for message, message_id in zip(messages, ids, strict=True):
            kind, pid = (
                message.metadata.message_type,
                self.partition_of(message.metadata.dst_node_id),
            )
            if kind not in (MessageType.TRAIN, MessageType.EVALUATE):
                self.queried.append(pid)
                continue
            server_round = int(message.content["config"]["server-round"])
            self.sent[kind, server_round].append(pid)
            if kind == MessageType.TRAIN:
                self.round_of[message_id] = server_round
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        replies = super().pull_messages(message_ids)
        for reply in replies:
            server_round = self.round_of.get(reply.metadata.reply_to_message_id)
            if server_round is not None and not reply.has_error():
                pid = self.partition_of(reply.metadata.src_node_id)
                self.train_replies.append((server_round, pid, dict(reply.content["metrics"])))
        return replies

    def rounds(self, kind: str) -> dict[int, list[int]]:
        """Round -> sorted partitions that got a ``kind`` message in it."""
        return {r: sorted(pids) for (k, r), pids in sorted(self.sent.items()) if k == kind}


def run_message_app(app: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Run the app's ``@app.main()`` over a :class:`RecordingGrid` of ``NUM_CLIENTS``
    nodes running its ClientApp, with its own run config (ROUNDS rounds); returns (the
    ``with_availability`` strategy it built or None, the grid, its task module, the
    final model it saved)."""
    server_module, client_module, run_config = load_app(app, monkeypatch)
    run_config = {**run_config, "num-server-rounds": ROUNDS}
    built: list[AvailabilityStrategy] = []
    if hasattr(server_module, "with_availability"):
        real = server_module.with_availability

        def keep(*args, **kwargs) -> AvailabilityStrategy:
            built.append(real(*args, **kwargs))
            return built[-1]

        monkeypatch.setattr(server_module, "with_availability", keep)
    monkeypatch.chdir(tmp_path)  # the app saves final_model.pt in the working directory
    with server_identity():
        grid = RecordingGrid(client_module.app, NUM_CLIENTS, run_config=run_config)
        server_module.main(grid, Context(0, 0, {}, RecordDict(), run_config))
    final = torch.load(tmp_path / "final_model.pt")
    return (built[0] if built else None), grid, sys.modules["task"], final


def initial_model(task: ModuleType) -> dict[str, torch.Tensor]:
    """The model the stock server starts from (``torch.manual_seed(0)``, ``Net()``)."""
    torch.manual_seed(0)
    return task.Net().state_dict()


def moved(final: dict[str, torch.Tensor], task: ModuleType) -> bool:
    start = initial_model(task)
    assert list(final) == list(start)  # the user's state_dict, keys and all
    return any(not torch.equal(final[k], start[k]) for k in start)


def test_stock_message_app_runs_flower_fedavg_under_in_process_grid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper, grid, task, final = run_message_app(EXAMPLES / "message_app", monkeypatch, tmp_path)
    assert wrapper is None and grid.queried == []
    # Flower's own sampling: max(int(0.5 * 3), min_train_nodes = 2) = 2 nodes each phase
    for kind in (MessageType.TRAIN, MessageType.EVALUATE):
        nodes = grid.rounds(kind)
        assert list(nodes) == list(range(1, ROUNDS + 1))
        assert all(len(set(pids)) == 2 for pids in nodes.values()), nodes
    assert moved(final, task)


def redrawn(oracle: OracleClientManager) -> dict[int, list[int]]:
    """Round -> the partitions available in it, recomputed apart from ``oracle``: the
    RAM's from its law (``ram_relay``), the others by a fresh oracle of the same law and
    seed."""
    law, rounds = oracle.hidden_law(), range(1, ROUNDS + 1)
    if isinstance(oracle, RandomAccessClientManager):
        return {r: ram_relay(law.pi, oracle.clients_per_round, oracle.seed, r) for r in rounds}
    if isinstance(oracle, MarkovClientManager):
        fresh = MarkovClientManager(pi=law.pi, lam=law.lam, seed=oracle.seed)
    else:
        fresh = BernoulliClientManager(law.pi, seed=oracle.seed)
    return {r: fresh.draw(r) for r in rounds}


MESSAGE_SWITCHES = {
    "message_switch_to_fed_cvar_avg.patch": (message_api.FedCVaRAvg, RandomAccessClientManager),
    "message_switch_to_ca_fed.patch": (message_api.CAFed, MarkovClientManager),
    "message_switch_to_bernoulli_availability.patch": (FlowerFedAvg, BernoulliClientManager),
}


@pytest.mark.parametrize("patch", sorted(MESSAGE_SWITCHES))
def test_message_patch_trains_and_evaluates_exactly_the_oracles_nodes(
    patch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = switched(tmp_path, EXAMPLES / patch, stock="message_app")
    wrapper, grid, task, final = run_message_app(app, monkeypatch, tmp_path)
    strategy_cls, oracle_cls = MESSAGE_SWITCHES[patch]
    assert type(wrapper.strategy) is strategy_cls and type(wrapper.oracle) is oracle_cls
    assert wrapper.strategy.fraction_evaluate == 0.5  # the stock app's own setting
    draws = redrawn(wrapper.oracle)
    assert wrapper.relayed == draws
    # each round, exactly the available nodes train and evaluate (none in an empty round)
    available = {r: pids for r, pids in draws.items() if pids}
    assert grid.rounds(MessageType.TRAIN) == available
    assert grid.rounds(MessageType.EVALUATE) == available
    assert sorted(grid.queried) == list(range(NUM_CLIENTS))  # partition ids, asked once
    if oracle_cls is RandomAccessClientManager:
        assert len({pids[0] for pids in draws.values()}) > 1
    else:
        assert any(0 < len(pids) < NUM_CLIENTS for pids in draws.values())  # some absent
    assert moved(final, task)
    strategy, last = wrapper.strategy, {}
    for server_round, pid, metrics in grid.train_replies:
        last[pid] = metrics
    if strategy_cls is message_api.FedCVaRAvg:  # one node a round: the global t is its t
        _, t = split_theta_t(strategy.broadcast_arrays())
        (pid,) = draws[ROUNDS]
        assert t != 0.0 and np.isclose(t, last[pid][THRESHOLD_T])
    elif strategy_cls is message_api.CAFed:  # availability seen, losses estimated
        state = strategy.state
        assert state.tracker.rounds == ROUNDS
        counts = [sum(k in pids for pids in draws.values()) for k in range(NUM_CLIENTS)]
        assert state.tracker.active_counts.tolist() == counts
        reported = [last[k][RECEIVED_LOSS] for k in range(NUM_CLIENTS)]  # beta = 1: the last
        assert np.allclose(state.losses.f_hat, reported)


def test_the_switched_app_stops_when_its_clients_fail_every_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flower's own FedAvg under ``with_availability``, a ClientApp that
    fails in every round. Was: "Received 0 results and n failures" each round, the
    untrained model saved, success; now the third such round stops the app, quoting the
    client's error."""
    app = switched(
        tmp_path, EXAMPLES / "message_switch_to_bernoulli_availability.patch", "message_app"
    )
    client = app / "client_app.py"
    client.write_text(
        client.read_text().replace(
            "from task import train as train_fn\n",
            "def train_fn(*args, **kwargs):\n"
            "    raise AttributeError(\"module 'task' has no attribute 'to_xy'\")\n",
        )
    )
    with pytest.raises(FailedRoundsError, match=r"3 rounds in a row \(\d+\.\.\d+\) trained") as err:
        run_message_app(app, monkeypatch, tmp_path)
    assert "no attribute 'to_xy'" in str(err.value)
    assert not (tmp_path / "final_model.pt").exists()


@pytest.mark.parametrize("patch", sorted(EXAMPLES.glob("*switch_to_*.patch")), ids=lambda p: p.stem)
def test_switches_are_a_few_lines(patch: Path) -> None:
    """At most 20 added plus removed lines for the Message-API app, 30 for the legacy one;
    the README quotes each Message-API patch's count."""
    count, limit = changed_lines(patch), 20 if patch.name.startswith("message_") else 30
    assert count <= limit, f"{patch.name}: {count} changed lines"
    if limit == 20:
        readme = (APP_ROOT / "README.md").read_text()
        assert re.search(rf"{re.escape(patch.name)}\S*\s*\|\s*{count}\s*\|", readme), patch.name


# ------------------------------------------------------------------- legacy API
def run_app(app: Path, monkeypatch: pytest.MonkeyPatch):
    """Run the app in Flower's legacy Server loop; returns (strategy, manager, final
    arrays, {round: sorted partition ids that trained})."""
    server_module, client_module, run_config = load_app(app, monkeypatch)
    client_fn = client_module.client_fn
    run_config = {**run_config, "num-server-rounds": ROUNDS}
    components = server_module.server_fn(Context(0, 0, {}, RecordDict(), run_config))
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
    with server_identity():  # an InProcessGrid sets the process's ServerApp identity
        exec(compile(code, f"docs/API.md example {index}", "exec"), {"np": np})
