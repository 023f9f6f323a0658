"""The RC-FL Fashion-MNIST setup's data (kept classes, per-client 80/10/10 split), each
client's share of a pooled test set, the per-client test metrics with HCVaR that every
strategy reports, the fairness tables, mapping-valued sweeps and the RC-FL client."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fedram_flwr.config import ScenarioError
from fedram_flwr.data import (
    keep_and_relabel,
    load_federated_data,
    split_fractions,
    split_test_like,
)
from fedram_flwr.evaluation import client_test_metrics
from fedram_flwr.experiment import Experiment
from fedram_flwr.models import get_weights
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.strategies.rc_fl import hcvar


def test_keep_and_relabel_and_split_fractions() -> None:
    x = np.arange(8.0)
    y = np.array([0, 2, 6, 6, 1, 2, 0, 9])
    kx, ky = keep_and_relabel(x, y, [0, 2, 6])
    assert kx.tolist() == [0, 1, 2, 3, 5, 6] and ky.tolist() == [0, 1, 2, 2, 1, 0]
    parts = split_fractions(7000, [0.8, 0.1, 0.1], np.random.default_rng(0))
    assert [p.size for p in parts] == [5600, 700, 700]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(7000))


def test_split_test_like_follows_each_clients_label_mix() -> None:
    train = [np.array([0] * 30 + [1] * 10), np.array([1] * 30), np.array([0] * 10)]
    test_y = np.array([0] * 40 + [1] * 40 + [2] * 5)
    parts = split_test_like(train, test_y, np.random.default_rng(1))
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(80))  # class 2: nobody
    counts = [np.bincount(test_y[p], minlength=3).tolist() for p in parts]
    assert counts == [[30, 10, 0], [0, 30, 0], [10, 0, 0]]


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


def test_client_test_metrics_by_hand() -> None:
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
    y = np.array([0, 1, 1, 1, 0])
    client_test = [np.array([0, 1]), np.array([2, 3]), np.array([4]), np.array([], int)]
    p = np.array([0.5, 0.3, 0.1, 0.1])
    m = client_test_metrics(logits, y, client_test, p, [0.5])
    losses = F.cross_entropy(logits, torch.from_numpy(y), reduction="none").numpy()
    per_client = [losses[[0, 1]].mean(), losses[[2, 3]].mean(), losses[4]]
    assert m["client-test-accuracy"] == [1.0, 0.5, 1.0]  # the empty client is left out
    assert m["client-test-loss"] == pytest.approx(per_client)
    assert m["client-test-acc-worst10"] == 0.5 and m["client-test-acc-best10"] == 1.0
    assert m["client-test-acc-var"] == pytest.approx(np.var([100.0, 50.0, 100.0]))
    assert m["client-test-hcvar"] == pytest.approx(hcvar(per_client, p[:3], 0.5))


def test_sweep_over_whole_algorithm_sections(scenario_dict) -> None:
    scenario_dict["sweep"] = {
        "algorithm": [{"name": "fedavg"}, {"name": "rfedfair", "params": {"alpha": [0.6]}}]
    }
    variants = dict(scenario_from_dict(scenario_dict).variants())
    assert list(variants) == ["name=fedavg", "name=rfedfair"]
    assert variants["name=rfedfair"].algorithm.params == {"alpha": [0.6]}
    scenario_dict["sweep"]["algorithm"].append({"name": "fedavg"})
    with pytest.raises(ScenarioError, match="two variants are labelled 'name=fedavg'"):
        scenario_from_dict(scenario_dict)


def test_rcfl_client_with_alpha_one_and_eta_far_below_is_the_erm_client(scenario_dict) -> None:
    """alpha_i = 1 and f_i - eta >> mu: d f^{mu,i} / d f_i is exactly 1 and eta's
    gradient 0, so the local steps are FedAvg's, bit for bit."""
    scenario_dict.update(availability={"oracle": "bernoulli", "params": {"p_min": 1.0}})
    scenario_dict["algorithm"] = {"name": "rfedfair", "params": {"alpha": [1.0]}}
    exp = Experiment(scenario_from_dict(scenario_dict), 0)
    theta = get_weights(exp.new_model())
    config = {"server-round": 1, "rcfl-alpha": 1.0, "rcfl-p": 1 / 3, "rcfl-mu": 1e-3, "lr-eta": 0.1}
    rcfl, n, metrics = exp.client(1).fit([*theta, np.array([-1e3])], config)
    scenario_dict["algorithm"] = {"name": "fedavg"}
    erm, _, _ = Experiment(scenario_from_dict(scenario_dict), 0).client(1).fit(theta, config)
    for a, b in zip(rcfl[:-1], erm, strict=True):
        np.testing.assert_array_equal(a, b)
    assert rcfl[-1][0] == -1e3 and metrics["eta"] == -1e3
    with pytest.raises(ValueError, match=r"alpha of client 1.*not in \[0.4, 1\]"):
        exp.client(1).fit([*theta, np.zeros(1)], {**config, "rcfl-alpha": 0.3, "rcfl-p": 0.4})
