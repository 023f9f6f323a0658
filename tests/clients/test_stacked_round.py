"""Stacked rounds (clients/stacked_round.py): an experiment's ERM and CA-Fed clients trained
as one stacked job give what each client's own ``fit`` gives, to float32 rounding (the
stacked kernels sum in another order), and exactly what the relay of client calls gives
(the same stacked jobs); objectives without a stacked form are named."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flwr.common import RecordDict

from fedram_flwr.clients.batched_round import BatchedRound
from fedram_flwr.clients.models import get_weights
from fedram_flwr.clients.node import NodeExperiment
from fedram_flwr.clients.stacked_round import RoundClient, experiment_form, stacked_fits
from fedram_flwr.protocol import (
    LOCAL_EPOCHS,
    LOCAL_OPTIMUM,
    LR,
    RECEIVED_LOSS,
    REPORT_LOCAL_OPTIMUM,
    SERVER_ROUND,
    TRAIN_LOSS,
    TRAIN_SECONDS,
)
from fedram_flwr.registry import scenario_from_dict

TOL = dict(rtol=1e-5, atol=1e-6)
BATCH = 80


def experiment(algorithm: str, **training: Any) -> NodeExperiment:
    """LEAF Synthetic, 8 clients of unequal sizes (ragged last batches, clients smaller
    than a batch), logistic regression."""
    raw = {
        "name": "stacked",
        "rounds": 2,
        "seeds": [0],
        "data": {
            "dataset": "synthetic",
            "num_clients": 8,
            "num_classes": 4,
            "synthetic_dim": 10,
            "frequent_fraction": 1.0,
        },
        "availability": {"oracle": "bernoulli", "params": {"p": [0.5] * 8}},
        "algorithm": {"name": algorithm},
        "training": {"lr": 0.1, "local_epochs": 1, "batch_size": BATCH, **training},
        "model": {"name": "logreg"},
    }
    return NodeExperiment(scenario_from_dict(raw), 3)


def round_clients(exp: NodeExperiment, configs: list[dict]) -> list[RoundClient]:
    theta = get_weights(exp.new_model())
    return [RoundClient(k, RecordDict(), theta, c) for k, c in enumerate(configs)]


def own_fits(exp: NodeExperiment, clients: list[RoundClient]) -> list[tuple]:
    """Each client's own ``fit``, one after another (the per-client loop)."""
    out = []
    for c in clients:
        arrays, n, metrics = exp.client(c.partition_id, RecordDict()).fit(
            c.parameters, dict(c.config)
        )
        out.append(([a.copy() for a in arrays], n, metrics))
    return out


def assert_fits_close(stacked: list[tuple], alone: list[tuple]) -> None:
    for (arrays_s, n_s, m_s), (arrays_a, n_a, m_a) in zip(stacked, alone, strict=True):
        assert n_s == n_a
        assert m_s.keys() == m_a.keys()
        for key in m_a:
            if key == TRAIN_SECONDS:
                continue
            assert m_s[key] == pytest.approx(m_a[key], rel=1e-5), key
        for a, b in zip(arrays_a, arrays_s, strict=True):
            np.testing.assert_allclose(b, a, **TOL)


@pytest.mark.parametrize(
    "training", [{"local_steps": 3}, {"local_epochs": 2}, {"weight_decay": 0.01}]
)
def test_erm_clients_stacked_equal_their_own_fits(training: dict) -> None:
    exp = experiment("fedavg", **training)
    sizes = [len(y) for y in exp.data.client_y]
    assert (
        min(sizes) < BATCH < max(sizes)
    )  # ragged: a client smaller than a batch, smaller last batches
    configs = [{SERVER_ROUND: 2} for _ in sizes]
    configs[1] = {SERVER_ROUND: 2, LR: 0.02}  # a client's own step size
    if "local_steps" not in training:
        configs[2] = {SERVER_ROUND: 2, LOCAL_EPOCHS: 3}  # and its own number of epochs
    clients = round_clients(exp, configs)
    assert_fits_close(stacked_fits(exp, clients), own_fits(exp, clients))


def test_ca_fed_clients_stacked_report_the_received_loss_and_their_floor() -> None:
    exp = experiment("ca-fed", local_steps=2)
    config = {SERVER_ROUND: 1, REPORT_LOCAL_OPTIMUM: True}
    clients = round_clients(exp, [config] * 8)
    stacked = stacked_fits(exp, clients)
    assert_fits_close(stacked, own_fits(exp, clients))
    for (_, _, metrics), c in zip(stacked, clients):
        assert {RECEIVED_LOSS, LOCAL_OPTIMUM} <= metrics.keys()
        assert LOCAL_OPTIMUM in c.state  # kept in the client's state, as its fit keeps it


def test_stacked_fits_equal_the_relay_of_client_calls_exactly() -> None:
    """The same stacked jobs in the same order: the one-call gather of a node's data and
    the relay's per-client gathers give the same numbers."""
    exp = experiment("fedavg", local_steps=3)
    clients = round_clients(exp, [{SERVER_ROUND: 4}] * 8)
    stacked = stacked_fits(exp, clients)
    with BatchedRound("on") as batch:
        calls = [
            lambda c=c: exp.client(c.partition_id, RecordDict()).fit(c.parameters, dict(c.config))
            for c in clients
        ]
        relayed = [o.get() for o in batch.run(calls)]
    for (a_s, n_s, m_s), (a_r, n_r, m_r) in zip(stacked, relayed, strict=True):
        assert n_s == n_r and m_s[TRAIN_LOSS] == m_r[TRAIN_LOSS]
        for a, b in zip(a_r, a_s, strict=True):
            np.testing.assert_array_equal(b, a)


def test_a_node_trainer_is_its_clients_trainer() -> None:
    exp = experiment("mifa", local_steps=3, weight_decay=0.01)
    config = {SERVER_ROUND: 5}
    for k in (0, 5):
        ours, theirs = exp.trainer(k), exp.client(k).trainer
        assert (ours.lr, ours.local_epochs, ours.local_steps, ours.weight_decay) == (
            theirs.lr,
            theirs.local_epochs,
            theirs.local_steps,
            theirs.weight_decay,
        )
        plan = ours.data.plan(config, 1, 3)
        again = theirs.data.plan(config, 1, 3)
        np.testing.assert_array_equal(plan.rows, again.rows)
        assert plan.rows_of is not None and again.rows_of is None  # the node's own rows


@pytest.mark.parametrize(
    ("algorithm", "stacked"),
    [("fedavg", True), ("mifa", True), ("fedar", True), ("ca-fed", True), ("scaffold", False)],
)
def test_which_objectives_have_a_stacked_form(algorithm: str, stacked: bool) -> None:
    exp = experiment(algorithm)
    assert (experiment_form(exp) is not None) is stacked
    if not stacked:
        with pytest.raises(ValueError, match="algorithm.name scaffold.*no stacked form"):
            stacked_fits(exp, round_clients(exp, [{SERVER_ROUND: 1}] * 2))
