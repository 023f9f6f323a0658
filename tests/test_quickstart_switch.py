"""Flower's own quickstart-pytorch (Message API), switched to this library by the diffs
of docs/quickstart-switch/, runs in-process and keeps the app's optimizer.

``tests/quickstart_pytorch/`` holds the upstream app's files unchanged (adap/flower,
``examples/quickstart-pytorch`` at :data:`UPSTREAM_COMMIT`). Each test applies one diff
to a copy, as a user would, swaps the CIFAR-10 download for tiny synthetic images in the
same dict batches ({"img": ..., "label": ...}) and runs the app's ``@app.main()`` for 2
rounds over an in-process grid of 2 nodes running its own ClientApp (Flower's default
simulation has 2 SuperNodes). It checks that every local step is the app's momentum SGD
(before, the client blocks trained plain SGD and dropped it), that exactly the oracle's
draws train, and that each diff stays within 20 changed lines.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import tomli
import torch
from flwr.app import Context, MessageType, RecordDict
from torch.utils.data import DataLoader

from fedram_flwr.availability import (
    BernoulliClientManager,
    MarkovClientManager,
    RandomAccessClientManager,
)
from fedram_flwr.availability.laws import ram_relay
from fedram_flwr.protocol import THRESHOLD_T
from fedram_flwr.registry.app_config import APP_ROOT
from tests.helpers import server_identity
from tests.test_examples import RecordingGrid, changed_lines

UPSTREAM = Path(__file__).parent / "quickstart_pytorch"
UPSTREAM_COMMIT = "fdef7afb1dca3030553be302366cfd285ed6632c"
DIFFS = APP_ROOT / "docs" / "quickstart-switch"
ROUNDS, NODES, TRAIN_SIZE, BATCH = 2, 2, 16, 8
MODULES = ("pytorchexample", *(f"pytorchexample.{m}" for m in ("task", "client_app", "server_app")))
SWITCHES = {
    "fed_cvar_avg.diff": RandomAccessClientManager,
    "ca_fed.diff": MarkovClientManager,
    "bernoulli_availability.diff": BernoulliClientManager,
}


class RecordingSGD(torch.optim.SGD):
    """torch's SGD, recording each instance's (lr, momentum) of every group at each step."""

    made: list[RecordingSGD] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[list[tuple[float, float]]] = []
        RecordingSGD.made.append(self)

    def step(self, closure=None):
        self.steps.append([(g["lr"], g["momentum"]) for g in self.param_groups])
        return super().step(closure)


def images(seed: int, n: int) -> list[dict]:
    """n CIFAR-shaped rows as Flower Datasets gives them: {"img": 3x32x32, "label": 0..9}."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)
    return [{"img": a, "label": int(b)} for a, b in zip(x, y)]


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """The quickstart's ``load_data`` on synthetic rows (its CIFAR-10 download is not
    reachable here): a shuffled train loader and a test loader of dict batches."""
    train = DataLoader(images(partition_id, TRAIN_SIZE), batch_size=batch_size, shuffle=True)
    return train, DataLoader(images(100 + partition_id, 4), batch_size=batch_size)


def stub_data_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """``datasets`` and ``flwr_datasets`` (the quickstart's imports, not installed here)."""
    partitioner = types.ModuleType("flwr_datasets.partitioner")
    partitioner.IidPartitioner = object
    flwr_datasets = types.ModuleType("flwr_datasets")
    flwr_datasets.FederatedDataset, flwr_datasets.partitioner = object, partitioner
    datasets = types.ModuleType("datasets")
    datasets.load_dataset = None
    for name, module in (
        ("datasets", datasets),
        ("flwr_datasets", flwr_datasets),
        ("flwr_datasets.partitioner", partitioner),
    ):
        monkeypatch.setitem(sys.modules, name, module)


def switched_app(tmp_path: Path, diff: str) -> Path:
    """A copy of the upstream quickstart with ``diff`` applied (``git apply``)."""
    app = tmp_path / Path(diff).stem
    shutil.copytree(UPSTREAM, app, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "apply", str(DIFFS / diff)], cwd=app, check=True, capture_output=True)
    return app


def run_app(app: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The app's ``main`` for ROUNDS rounds over a :class:`RecordingGrid` of NODES nodes
    running its ClientApp; returns (its ``with_availability`` strategy, the grid, the
    final state_dict it saved)."""
    stub_data_packages(monkeypatch)
    monkeypatch.syspath_prepend(str(app))
    for name in MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    server = importlib.import_module("pytorchexample.server_app")
    client = importlib.import_module("pytorchexample.client_app")
    for name in MODULES:
        monkeypatch.setitem(sys.modules, name, sys.modules[name])  # forgotten at teardown
    task = sys.modules["pytorchexample.task"]
    for module in (task, client):
        monkeypatch.setattr(module, "load_data", load_data)
    monkeypatch.setattr(server, "load_centralized_dataset", lambda: load_data(9, 1, 128)[1])
    monkeypatch.setattr(torch.optim, "SGD", RecordingSGD)
    monkeypatch.setattr(RecordingSGD, "made", [])
    built = []
    real = server.with_availability
    monkeypatch.setattr(
        server, "with_availability", lambda *a, **k: built.append(real(*a, **k)) or built[-1]
    )
    config = tomli.loads((app / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    config = {**config, "num-server-rounds": ROUNDS, "batch-size": BATCH}
    monkeypatch.chdir(tmp_path)  # the app saves final_model.pt here
    with server_identity():
        grid = RecordingGrid(client.app, NODES, run_config=config)
        server.main(grid, Context(0, 0, {}, RecordDict(), config))
    return built[0], grid, torch.load(tmp_path / "final_model.pt")


def draws(oracle) -> dict[int, list[int]]:
    """Round -> partitions available, recomputed apart from the run's oracle."""
    law, rounds = oracle.hidden_law(), range(1, ROUNDS + 1)
    if isinstance(oracle, RandomAccessClientManager):
        return {r: ram_relay(law.pi, oracle.clients_per_round, oracle.seed, r) for r in rounds}
    fresh = (
        MarkovClientManager(pi=law.pi, lam=law.lam, seed=oracle.seed)
        if isinstance(oracle, MarkovClientManager)
        else BernoulliClientManager(law.pi, seed=oracle.seed)
    )
    return {r: fresh.draw(r) for r in rounds}


@pytest.mark.parametrize("diff", sorted(SWITCHES))
def test_switched_quickstart_trains_the_oracles_nodes_with_the_apps_momentum_sgd(
    diff: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = switched_app(tmp_path, diff)
    wrapper, grid, final = run_app(app, monkeypatch, tmp_path)
    assert type(wrapper.oracle) is SWITCHES[diff]
    expected = draws(wrapper.oracle)
    assert wrapper.relayed == expected
    assert grid.rounds(MessageType.TRAIN) == {r: p for r, p in expected.items() if p}
    trained = len(grid.train_replies)
    assert trained > 0
    # every train message stepped the app's momentum SGD, once per batch (16 / 8 = 2)
    optimizers = RecordingSGD.made
    assert len(optimizers) == trained
    for optimizer in optimizers:
        assert len(optimizer.steps) == TRAIN_SIZE // BATCH
        for groups in optimizer.steps:
            assert groups[0] == (0.1, 0.9)  # the round's lr (learning-rate), momentum 0.9
            if diff == "fed_cvar_avg.diff":  # t in its own group: lr-t, the same momentum
                assert groups[1:] == [(0.01, 0.9)]
            else:
                assert len(groups) == 1
    if diff == "fed_cvar_avg.diff":
        assert all(m[THRESHOLD_T] != 0.0 for _, _, m in grid.train_replies)
    torch.manual_seed(0)
    assert list(final) == list(sys.modules["pytorchexample.task"].Net().state_dict())


@pytest.mark.parametrize("diff", sorted(SWITCHES))
def test_each_quickstart_switch_is_at_most_20_changed_lines(diff: str) -> None:
    """The counts docs/quickstart-switch/README.md quotes, from ``git apply --numstat``."""
    count = changed_lines(DIFFS / diff)
    assert count <= 20
    table = (DIFFS / "README.md").read_text()
    assert f"[`{diff}`]({diff}) | {count} |" in table
    assert UPSTREAM_COMMIT in table
