"""Shared fixtures: small scenarios that build and run in well under a second."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fedram_flwr.config import Scenario, scenario_from_dict

# Fig. 2a shrunk: K=3 users holding one 2-D Gaussian pattern each, RAM rho=(0.5, 0.4, 0.1).
TINY_GAUSSIAN: dict[str, Any] = {
    "name": "tiny-gaussian",
    "rounds": 6,
    "eval_every": 3,
    "seeds": [0],
    "data": {
        "dataset": "gaussian2d",
        "num_clients": 3,
        "num_classes": 3,
        "client_classes": [[0], [1], [2]],
        "frequent_fraction": 0.6667,
        "samples_per_class": 40,
        "cluster_std": 0.6,
    },
    "availability": {"oracle": "ram", "params": {"rho": [0.5, 0.4, 0.1]}},
    "algorithm": {
        "name": "fed-cvar-avg",
        "params": {"alpha": 0.1, "gamma": 0.1, "lr_t": 0.01},
    },
    "training": {"lr": 0.05, "local_epochs": 2, "batch_size": 16},
    "model": {"name": "logreg"},
}


@pytest.fixture
def scenario_dict() -> dict[str, Any]:
    """A fresh, valid scenario mapping (mutate it freely)."""
    return copy.deepcopy(TINY_GAUSSIAN)


@pytest.fixture(scope="session")
def tiny_gaussian() -> Scenario:
    """The tiny scenario, for module- and session-scoped fixtures."""
    return scenario_from_dict(copy.deepcopy(TINY_GAUSSIAN))


@pytest.fixture
def tiny_scenario(scenario_dict: dict[str, Any]) -> Scenario:
    return scenario_from_dict(scenario_dict)


@pytest.fixture
def no_data_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make sure a developer's $FEDRAM_DATA does not leak into data-root tests."""
    monkeypatch.delenv("FEDRAM_DATA", raising=False)


def tiny_ca_fed_dict(
    *,
    pi: tuple[float, ...] = (0.9, 0.9, 0.5, 0.5, 0.2, 0.2),
    rounds: int = 3,
    eval_every: int = 3,
    local_steps: int = 2,
) -> dict[str, Any]:
    """CA-Fed's setup shrunk: 6 LEAF Synthetic clients (3 classes, 5 features), two-state
    Markov availability with stationary ``pi`` and lambda alternating 0 / 0.8, CA-Fed with
    kappa_bar^2 = 1e-3 (it excludes clients) and eta_bar = 0.5, a ridge logistic model."""
    return {
        "name": "tiny-ca-fed",
        "rounds": rounds,
        "eval_every": eval_every,
        "seeds": [0],
        "data": {
            "dataset": "synthetic",
            "num_clients": 6,
            "num_classes": 3,
            "synthetic_dim": 5,
            "frequent_fraction": 1.0,
        },
        "availability": {
            "oracle": "markov",
            "params": {"pi": list(pi), "lam": [0.0, 0.8, 0.0, 0.8, 0.0, 0.8]},
        },
        "algorithm": {"name": "ca-fed", "params": {"kappa2": 1e-3, "server_lr": 0.5}},
        "training": {
            "lr": 0.1,
            "local_steps": local_steps,
            "batch_size": 16,
            "weight_decay": 0.01,
        },
        "model": {"name": "logreg"},
    }


@pytest.fixture(scope="session")
def ca_fed_dict():
    """:func:`tiny_ca_fed_dict`, a fresh mapping per call (mutate it freely)."""
    return tiny_ca_fed_dict
