"""The CA-Fed client (clients/ca_fed.py): it trains as the ERM client and reports the
received model's first-batch loss, and its local optimum once."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fedram_flwr.clients import CAFedClient, ERMClient
from fedram_flwr.clients.batches import client_rng
from fedram_flwr.clients.ca_fed import local_optimum_loss
from fedram_flwr.clients.models import build_model, get_weights, set_weights
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import LOCAL_OPTIMUM, RECEIVED_LOSS, REPORT_LOCAL_OPTIMUM


def test_ca_fed_client_reports_the_first_batch_loss_and_trains_like_erm(tiny_ca_fed) -> None:
    exp = Experiment(tiny_ca_fed(), 0)
    theta = get_weights(exp.new_model())
    config = {"server-round": 2}
    ca_arrays, n, metrics = exp.client(3).fit(theta, config)
    assert isinstance(exp.client(3), CAFedClient)
    erm = ERMClient(
        partition_id=3,
        model=exp.new_model(),
        x=exp.data.client_x[3],
        y=exp.data.client_y[3],
        lr=0.1,
        local_epochs=1,
        batch_size=16,
        seed=0,
        local_steps=2,
        weight_decay=0.01,
    )
    erm_arrays, _, _ = erm.fit(theta, config)
    assert all(np.array_equal(a, b) for a, b in zip(ca_arrays, erm_arrays))  # bitwise
    # F_k^(t): mean cross-entropy at the received model on the first batch B_{t,0}.
    first = client_rng(0, 2, 3).permutation(n)[:16]
    model = build_model("logreg", (5,), 3, seed=0)
    set_weights(model, theta)
    x, y = exp.data.client_x[3][first], exp.data.client_y[3][first]
    with torch.no_grad():
        expected = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).item()
    assert metrics[RECEIVED_LOSS] == pytest.approx(expected, rel=1e-6)


def test_received_loss_is_the_whole_training_loss_when_one_batch_holds_it(tiny_ca_fed) -> None:
    """q-FFL's F_k(w_t) as Li et al. define it (the loss on the client's whole training
    set) when ``training.batch_size`` >= n_k, as in the shipped RC-FL scenarios."""
    scenario = tiny_ca_fed()
    exp = Experiment(scenario, 0)
    theta = get_weights(exp.new_model())
    x, y = exp.data.client_x[3], exp.data.client_y[3]
    client = CAFedClient(
        partition_id=3, model=exp.new_model(), x=x, y=y, lr=0.1, local_epochs=1,
        batch_size=len(y), seed=0, local_steps=2,
    )  # fmt: skip
    _, _, metrics = client.fit(theta, {"server-round": 2})
    model = build_model("logreg", (5,), 3, seed=0)
    set_weights(model, theta)
    with torch.no_grad():
        whole = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).item()
    assert metrics[RECEIVED_LOSS] == pytest.approx(whole, rel=1e-6)


def test_ca_fed_client_reports_its_local_optimum_once(tiny_ca_fed) -> None:
    exp = Experiment(tiny_ca_fed(), 0)
    theta = get_weights(exp.new_model())
    x, y = exp.data.client_x[3], exp.data.client_y[3]
    client = exp.client(3)
    plain, _, metrics = client.fit(theta, {"server-round": 1})
    assert LOCAL_OPTIMUM not in metrics
    asked = {"server-round": 1, REPORT_LOCAL_OPTIMUM: True}
    arrays, _, metrics = client.fit(theta, asked)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, plain))  # training unchanged
    floor = metrics[LOCAL_OPTIMUM]

    def ridge_objective(weights) -> float:
        model = build_model("logreg", (5,), 3, seed=0)
        set_weights(model, weights)
        with torch.no_grad():
            ce = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).item()
        return ce + 0.005 * sum(float((w.astype(np.float64) ** 2).sum()) for w in weights)

    # The minimiser of CE + (0.01 / 2)||w||^2 beats the received and the trained models.
    model = exp.new_model()
    assert local_optimum_loss(model, x, y, 0.01) == pytest.approx(floor, abs=1e-6)
    optimum = ridge_objective(get_weights(model))
    assert optimum < ridge_objective(theta) and optimum < ridge_objective(arrays)
    # Computed once: later rounds read it from Context.state.
    client.state[LOCAL_OPTIMUM][LOCAL_OPTIMUM] = -1.0
    assert client.fit(theta, {**asked, "server-round": 2})[2][LOCAL_OPTIMUM] == -1.0
