"""Server-side metrics (clients/evaluation.py): FedAR Sec. 6's global training loss
and per-client accuracy distribution (Table 3), and the per-client test metrics with
HCVaR that every strategy reports (RC-FL Sec. 6); the report's tables are in
tests/report/."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fedram_flwr.clients.evaluation import (
    client_distribution_metrics,
    client_test_metrics,
    make_evaluate_fn,
    tail_mean,
)
from fedram_flwr.clients.models import get_weights
from fedram_flwr.strategies.rc_fl import hcvar


def test_tail_mean_takes_the_worst_and_best_tenth() -> None:
    v = np.arange(20, dtype=float)  # 10% of 20 clients = 2
    assert tail_mean(v, 0.1, worst=True) == 0.5
    assert tail_mean(v, 0.1, worst=False) == 18.5
    assert tail_mean(np.array([3.0, 1.0]), 0.1, worst=True) == 1.0  # at least one client


def test_client_distribution_metrics_by_hand() -> None:
    # Client 0: 2 examples, both right; client 1: 2 examples, one right; client 2: 1, wrong.
    client_y = [np.array([0, 1]), np.array([0, 0]), np.array([1])]
    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    m = client_distribution_metrics(logits, client_y)
    y = torch.tensor([0, 1, 0, 0, 1])
    assert m["train-loss"] == pytest.approx(float(F.cross_entropy(logits, y)))
    assert m["train-accuracy"] == pytest.approx(3 / 5)
    assert m["client-accuracy"] == [1.0, 0.5, 0.0]
    assert m["client-acc-mean"] == pytest.approx(0.5)
    assert m["client-acc-var"] == pytest.approx(np.var([100.0, 50.0, 0.0]))
    assert m["client-acc-worst10"] == 0.0
    assert m["client-acc-best10"] == 1.0


def test_evaluate_fn_adds_client_metrics_and_the_list_only_at_the_last_round() -> None:
    rng = np.random.default_rng(0)
    model = torch.nn.Linear(3, 2)
    cx = [rng.normal(size=(4, 3)).astype(np.float32) for _ in range(3)]
    cy = [rng.integers(0, 2, 4) for _ in range(3)]
    kwargs = dict(num_classes=2, rare_classes=(), every=2, num_rounds=3)
    fn = make_evaluate_fn(model, cx[0], cy[0], client_x=cx, client_y=cy, **kwargs)
    w = get_weights(model)
    assert fn(1, w, {}) is None
    _, mid = fn(2, w, {})
    _, last = fn(3, w, {})
    assert "train-loss" in mid and "client-accuracy" not in mid
    assert len(last["client-accuracy"]) == 3
    plain = make_evaluate_fn(model, cx[0], cy[0], **kwargs)
    assert "train-loss" not in plain(3, w, {})[1]


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
