"""Fed-CVaR-Avg's strategy (Alg. 1): its config and t_init, and the reduction to FedAvg
on the engine. The gradient of G_i (eq. 6) and its t-minimiser are in
tests/test_objectives.py, the client's joint (theta, t) step in tests/clients/test_cvar.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.availability import ram_relay
from fedram_flwr.engines import run_in_process
from fedram_flwr.protocol import split_theta_t
from fedram_flwr.registry import with_overrides
from fedram_flwr.scenario.config import Scenario
from fedram_flwr.strategies import FedCVaRAvg

# --------------------------------------------------------------- the strategy


def test_strategy_sends_cvar_config_and_starts_from_t_init() -> None:
    from flwr.common import parameters_to_ndarrays

    theta = [np.ones((3, 2), np.float32), np.zeros(3, np.float32)]
    strategy = FedCVaRAvg(initial_arrays=theta, alpha=0.3, gamma=0.4, lr_t=1e-3, t_init=0.25)
    init = parameters_to_ndarrays(strategy.initialize_parameters(None))
    assert len(init) == 3 and split_theta_t(init)[1] == 0.25
    config = strategy.core.fit_config(strategy.state, 1)
    assert config == {"cvar-alpha": 0.3, "cvar-gamma": 0.4, "lr-t": 1e-3}
    assert strategy.diagnostics() == {"t": 0.25}
    for bad in ({"alpha": 0.0}, {"alpha": 1.2}, {"gamma": -0.1}, {"lr_t": -1.0}):
        kwargs = {"alpha": 0.3, "gamma": 0.4, "lr_t": 1e-3, **bad}
        with pytest.raises(ValueError, match=f"^{next(iter(bad))}: "):
            FedCVaRAvg(initial_arrays=theta, **kwargs)


# --------------------------------------------------- reduction to FedAvg (engine)
def final_arrays(run_dir) -> list[np.ndarray]:
    with np.load(Path(run_dir.path) / "final_model.npz") as z:
        return [z[k] for k in sorted(z.files, key=lambda s: int(s.split("_")[1]))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_gaussian: Scenario):
    """Run the tiny Fig. 2a scenario once per variant, cached for the module."""
    base = tiny_gaussian
    cache: dict[str, tuple[Scenario, object]] = {}

    def run(label: str, overrides: dict) -> tuple[Scenario, list[np.ndarray], list[dict]]:
        if label not in cache:
            scenario = with_overrides(base, overrides)
            out = run_in_process(scenario, 0, tmp_path_factory.mktemp(label), label=label)
            assert out.status() == "complete"
            cache[label] = (scenario, out)
        scenario, out = cache[label]
        return scenario, final_arrays(out), out.read_metrics()

    return run


FEDAVG = {"algorithm.name": "fedavg", "algorithm.params": {}}


@pytest.mark.parametrize(
    ("label", "overrides"),
    [
        ("alpha1", {"algorithm.alpha": 1.0, "algorithm.gamma": 0.1}),
        ("gamma1", {"algorithm.alpha": 0.1, "algorithm.gamma": 1.0}),
    ],
)
def test_risk_neutral_cvar_is_bitwise_fedavg(runs, label: str, overrides: dict) -> None:
    _, fedavg_theta, fedavg_rows = runs("fedavg", FEDAVG)
    _, cvar_arrays, cvar_rows = runs(label, overrides)
    theta, t = split_theta_t(cvar_arrays)
    assert len(theta) == len(fedavg_theta) == 2
    for a, b in zip(theta, fedavg_theta):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert t == 0.0
    assert [r.get("fit-t", 0.0) for r in cvar_rows] == [0.0] * len(cvar_rows)
    assert [r.get("relayed") for r in cvar_rows] == [r.get("relayed") for r in fedavg_rows]
    # The global model did move away from its initialisation.
    assert fedavg_rows[-1]["loss"] != fedavg_rows[0]["loss"]


def test_risk_averse_cvar_differs_from_fedavg(runs) -> None:
    _, fedavg_theta, _ = runs("fedavg", FEDAVG)
    _, cvar_arrays, rows = runs("alpha01", {"algorithm.alpha": 0.1, "algorithm.gamma": 0.1})
    theta, t = split_theta_t(cvar_arrays)
    assert not all(np.array_equal(a, b) for a, b in zip(theta, fedavg_theta))
    # Losses start above t = 0, so t rises: by lr_t (1-gamma)(1/alpha - 1) = 0.081 a step.
    assert t > 0.0
    assert rows[-1]["t"] == t


def test_engine_relays_follow_the_ram(runs) -> None:
    scenario, _, rows = runs("fedavg", FEDAVG)
    rho = np.array([0.5, 0.4, 0.1])
    fit_rows = [r for r in rows if r["round"] > 0]
    assert [r["round"] for r in fit_rows] == list(range(1, scenario.rounds + 1))
    for r in fit_rows:
        assert r["relayed"] == ram_relay(rho, 1, 0, r["round"])
