"""A scenario's federated data (fedram_flwr/data/federated.py): Fig. 2a's Gaussian
clients, explicit client classes, FedAR's two-class CIFAR-10 clients, RC-FL's per-client
80/10/10 split, CA-Fed's Synthetic and Dirichlet configs, and a missing image set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedram_flwr.data import DatasetNotFoundError, load_federated_data
from fedram_flwr.engines.experiment import Experiment, rare_clients
from fedram_flwr.registry import scenario_from_dict, with_overrides
from fedram_flwr.scenario.config import Scenario, ScenarioError
from tests.helpers import write_cifar10


def test_federated_gaussian_fig2a(tiny_scenario) -> None:
    # rho = (0.5, 0.4, 0.1): the least likely user 2 is rare and holds pattern 2 alone.
    rare = rare_clients(tiny_scenario, 0)
    assert rare == (2,)
    fd = load_federated_data(tiny_scenario.data, rare, 0)
    assert fd.rare_classes == (2,)
    assert fd.client_classes == ((0,), (1,), (2,))
    for k in range(3):
        assert fd.client_y[k].tolist() == [k] * 40
        assert fd.client_x[k].shape == (40, 2)
    assert fd.input_shape == (2,) and fd.num_classes == 3
    assert np.bincount(fd.test_y).tolist() == [40, 40, 40]


def test_federated_data_checks_client_classes(tiny_scenario) -> None:
    cfg = with_overrides(tiny_scenario, {"data.client_classes": [[0], [1], [1, 2]]}).data
    fd = load_federated_data(cfg, (2,), 0)
    assert fd.rare_classes == (2,)
    assert len(fd.client_y[1]) + len(fd.client_y[2]) == 80
    bad = with_overrides(tiny_scenario, {"data.client_classes": [[0], [1], [7]]}).data
    with pytest.raises(ScenarioError, match=r"data\.client_classes: \[7\].*0\.\.2"):
        load_federated_data(bad, (2,), 0)


def test_clients_without_samples_are_listed_briefly(tiny_scenario) -> None:
    """2000 clients share 120 samples: the error names a few, not all 1880."""
    cfg = with_overrides(
        tiny_scenario,
        {
            "data.num_clients": 2000,
            "data.client_classes": None,
            "availability.rho": [1 / 2000] * 2000,
        },
    ).data
    with pytest.raises(
        ScenarioError, match=r"^data: clients \[\d+(, \d+){4}, \.\.\.\] \(\d+ in all\)"
    ):
        load_federated_data(cfg, (), 0)


def test_federated_image_data_missing_raises(tmp_path: Path, offline, monkeypatch) -> None:
    from fedram_flwr.scenario.config import DataConfig

    monkeypatch.setenv("FEDRAM_DATA", str(tmp_path / "nothing-here"))
    cfg = DataConfig(dataset="fashion-mnist", root="ignored", num_clients=3)
    with pytest.raises(DatasetNotFoundError, match="nothing-here"):
        load_federated_data(cfg, (2,), 0)


def test_two_class_cifar10_clients_train_lenet5(
    tmp_path: Path, monkeypatch, tiny_gaussian: Scenario
) -> None:
    write_cifar10(tmp_path)
    monkeypatch.setenv("FEDRAM_DATA", str(tmp_path))
    scenario = with_overrides(
        tiny_gaussian,
        {
            "data": {
                "dataset": "cifar10",
                "num_clients": 10,
                "partition": "two-classes",
                "frequent_fraction": 1.0,
            },
            "availability": {"oracle": "bernoulli", "params": {"p_min": 0.5}},
            "algorithm": {"name": "fedar", "params": {}},
            "training": {"lr": 0.1, "local_steps": 2, "batch_size": 4, "weight_decay": 1e-3},
            "model": {"name": "lenet5"},
        },
    )
    exp = Experiment(scenario, 0)
    # Client k holds classes k and k + 1 (mod 10); each class (10 images) is halved.
    assert exp.data.client_classes == tuple(tuple(sorted((k, (k + 1) % 10))) for k in range(10))
    assert [np.unique(y).tolist() for y in exp.data.client_y][9] == [0, 9]
    assert {len(y) for y in exp.data.client_y} == {10}
    arrays, n, metrics = exp.client(3).fit(exp.client(3).get_parameters({}), {"lr": 0.1})
    assert n == 10 and metrics["partition-id"] == 3 and np.isfinite(metrics["train-loss"])


def test_client_split_gives_disjoint_80_10_10_sets(scenario_dict) -> None:
    scenario_dict["data"]["client_split"] = [0.8, 0.1, 0.1]
    cfg = scenario_from_dict(scenario_dict).data
    d = load_federated_data(cfg, (2,), 0)
    assert [len(y) for y in d.client_y] == [32, 32, 32]  # 40 samples per client
    assert [t.size for t in d.client_test] == [4, 4, 4] and len(d.test_y) == 12
    for k in range(3):  # each client's test block holds its class, none of its training rows
        assert set(d.test_y[d.client_test[k]]) == {k}
        train_rows = {r.tobytes() for r in d.client_x[k]}
        assert not train_rows & {r.tobytes() for r in d.test_x[d.client_test[k]]}
    bad = {**scenario_dict["data"], "client_split": [0.8, 0.3, 0.1]}
    with pytest.raises(ScenarioError, match="data.client_split"):
        scenario_from_dict({**scenario_dict, "data": bad})


def test_data_config_for_synthetic_and_dirichlet(
    scenario_dict: dict[str, Any], ca_fed_dict
) -> None:
    raw = ca_fed_dict()
    exp = Experiment(scenario_from_dict(raw), 0)
    assert len(exp.data.client_y) == 6 and exp.data.input_shape == (5,)
    assert exp.data.test_y.size > 0 and exp.data.rare_classes == ()
    raw["data"]["partition"] = "dirichlet"
    with pytest.raises(ScenarioError, match="synthetic generates"):
        scenario_from_dict(raw)
    gaussian = scenario_dict  # the tiny Gaussian scenario of conftest.py
    gaussian["data"].pop("client_classes")
    gaussian["data"].update(partition="dirichlet", dirichlet_concentration=0.3)
    data = Experiment(scenario_from_dict(gaussian), 0).data
    assert sum(len(y) for y in data.client_y) == 3 * 40  # every sample, once
    assert data.client_classes == tuple(tuple(np.unique(y).tolist()) for y in data.client_y)


def test_clients_rows_are_views_of_one_array_with_their_values() -> None:
    from fedram_flwr.data.federated import packed_rows, row_views

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, 3, 2)).astype(np.float32) for n in (4, 0, 7, 1)]
    packed = packed_rows(arrays)
    base, offsets = row_views(packed)
    assert [offsets[i] for i in (0, 2, 3)] == [0, 4, 11] and base.shape == (12, 3, 2)
    for a, p in zip(arrays, packed, strict=True):
        np.testing.assert_array_equal(p, a)
        assert p.base is base and p.dtype == a.dtype
    mixed = [arrays[0], arrays[2].astype(np.float64)]  # dtypes differ: left as they are
    assert all(p is a for p, a in zip(packed_rows(mixed), mixed))
    assert row_views(mixed) is None
    assert row_views([base[1:3], base[5:7].copy()]) is None  # not rows of one array


def test_a_loaded_data_set_keeps_its_clients_in_one_array(tmp_path) -> None:
    from fedram_flwr.clients.node import NodeExperiment
    from fedram_flwr.data.federated import row_views
    from fedram_flwr.registry import scenario_from_dict
    from tests.helpers import TINY_GAUSSIAN

    exp = NodeExperiment(scenario_from_dict(TINY_GAUSSIAN), 0)
    d = exp.data
    assert row_views(d.client_x) is not None and row_views(d.client_y) is not None
    x, y = exp.client_data(1)
    np.testing.assert_array_equal(x.numpy(), d.client_x[1])
    np.testing.assert_array_equal(y.numpy(), d.client_y[1])
    assert x.data_ptr() == d.client_x[1].ctypes.data  # the arrays' memory, not a copy
