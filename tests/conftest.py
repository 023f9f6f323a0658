"""Shared fixtures: small scenarios that build and run in well under a second."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from fedram_flwr.data import sources
from fedram_flwr.engines import run_in_process
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.scenario.config import Scenario
from tests.helpers import CA_FED_PI, TINY_GAUSSIAN, tiny_ca_fed_dict

# Property tests (hypothesis): the same examples every run (derandomized, no example
# database), no wall-clock deadline (a loaded machine is slow, never wrong), and few
# enough examples for the unit tier; HYPOTHESIS_PROFILE=thorough searches 40 times more.
settings.register_profile(
    "default",
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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


@pytest.fixture(scope="session")
def ca_fed_dict():
    """:func:`tiny_ca_fed_dict`, a fresh mapping per call (mutate it freely)."""
    return tiny_ca_fed_dict


@pytest.fixture(scope="session")
def ca_fed_run(tmp_path_factory):
    """A finished 4-round CA-Fed run of 6 clients (Markov oracle, weights recorded) in
    ``<root>/ca-fed/seed0``: (root, its RunDirectory)."""
    root = tmp_path_factory.mktemp("runs")
    raw = tiny_ca_fed_dict(pi=CA_FED_PI, rounds=4, eval_every=2, local_steps=1)
    return root, run_in_process(scenario_from_dict(raw), 0, root / "ca-fed" / "seed0")


@pytest.fixture(scope="session")
def gaussian_run(tmp_path_factory, tiny_gaussian):
    """A finished run of the tiny 2-D scenario in ``<root>/default/seed0``."""
    root = tmp_path_factory.mktemp("runs")
    return root, run_in_process(tiny_gaussian, 0, root / "default" / "seed0")


@pytest.fixture
def offline(monkeypatch, tmp_path: Path) -> list[str]:
    """No Debian package and no network: torchvision's download fails at once."""
    import torchvision

    calls: list[str] = []

    def failing_download(self):
        calls.append(type(self).__name__)
        raise RuntimeError("Error downloading: no network in tests")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", failing_download)
    monkeypatch.setattr(torchvision.datasets.FashionMNIST, "download", failing_download)
    monkeypatch.setattr(sources, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian-package")
    return calls


@pytest.fixture
def tiny_ca_fed(ca_fed_dict):
    """The tiny CA-Fed scenario of conftest.py, ``algorithm`` replacing its algorithm."""

    def build(**algorithm: Any):
        raw = ca_fed_dict()
        raw["algorithm"].update(algorithm)
        return scenario_from_dict(raw)

    return build
