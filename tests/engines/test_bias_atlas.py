"""The bias atlas (scripts/bias_atlas.py): its optimum, a corner of it regenerated (FedAvg
biased under heterogeneous Bernoulli availability, FedAvg-IS with the known p and FOCUS
not), and its core-driven rounds equal to the legacy Flower Strategy's."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from fedram_flwr.engines.bias_atlas import (
    AtlasRun,
    M,
    local_reply,
    make_problem,
    objective_block,
    run_cell,
    scenario_dict,
)
from fedram_flwr.engines.bias_atlas_table import ALGORITHMS, LAWS, THEORY, build, markdown
from fedram_flwr.engines.experiment import build_oracle
from fedram_flwr.protocol import PARTITION_ID
from fedram_flwr.registry import algorithm_params, algorithm_spec, scenario_from_dict

PROBLEM = make_problem()
UNIFORM, HETEROGENEOUS = "Bernoulli, uniform", "Bernoulli, heterogeneous"


def test_the_optimum_zeroes_the_mean_gradient() -> None:
    g = np.mean([PROBLEM.grad(i, PROBLEM.optimum) for i in range(PROBLEM.b.shape[0])], 0)
    assert np.abs(g).max() < 1e-12
    own = [np.linalg.lstsq(PROBLEM.a[i], PROBLEM.b[i], rcond=None)[0] for i in (0, 11)]
    assert np.linalg.norm(own[0] - own[1]) > 1.0  # the clients disagree: bias is visible


def test_a_corner_of_the_atlas() -> None:
    """FedAvg reaches w* under uniform Bernoulli and stalls away from it under
    heterogeneous Bernoulli; FedAvg-IS with the known p and FOCUS reach it under both."""
    algorithms = {a: ALGORITHMS[a] for a in ("FedAvg", "FedAvg-IS (known p)", "FOCUS")}
    cells, _ = build(algorithms, [UNIFORM, HETEROGENEOUS], [0, 1], 300, PROBLEM)
    assert cells["FedAvg", UNIFORM].verdict == "reaches"
    assert cells["FedAvg", HETEROGENEOUS].verdict == "stalled"
    assert cells["FedAvg", HETEROGENEOUS].distance > 0.05
    for a in ("FedAvg-IS (known p)", "FOCUS"):
        assert cells[a, HETEROGENEOUS].verdict == "reaches", a
    assert cells["FOCUS", HETEROGENEOUS].distance < 1e-5  # exact, not within a drift floor
    page = markdown(cells, [UNIFORM, HETEROGENEOUS], "# atlas")
    assert "| FedAvg | reaches / unbiased / yes | stalled / biased / yes |" in page


def test_every_algorithm_and_law_has_a_prediction() -> None:
    assert set(THEORY) == set(ALGORITHMS)
    assert all(set(theory) == set(LAWS) for theory, _ in THEORY.values())


@pytest.mark.parametrize("label", ["FedAvg-IS (known p)", "FOCUS", "SCAFFOLD"])
def test_the_drive_equals_the_legacy_strategy(label: str) -> None:
    """30 rounds of the atlas's drive give the models Flower's legacy Strategy (the
    registry's class over the same core) aggregates from the same replies."""
    rounds, lr = 30, 0.05
    law = LAWS[HETEROGENEOUS](rounds)
    driven = run_cell(PROBLEM, ALGORITHMS[label], law, 0, rounds)
    scenario = scenario_from_dict(scenario_dict(ALGORITHMS[label], law, rounds, lr))
    w0 = np.zeros(driven.shape[1], np.float32)
    run = AtlasRun(scenario, 0)
    strategy = algorithm_spec(scenario).build_strategy(algorithm_params(scenario), run, [w0])
    oracle, block = build_oracle(scenario, 0), objective_block(algorithm_spec(scenario).name)
    params = strategy.initialize_parameters(None)
    states: list[dict] = [{} for _ in range(PROBLEM.b.shape[0])]
    for t in range(1, rounds + 1):
        sent = parameters_to_ndarrays(params)
        config = strategy.core.fit_config(strategy.state, t)
        results = []
        for i in sorted(oracle.draw(t)):
            out, metrics = local_reply(block, PROBLEM, i, sent, config, states[i], 2, lr)
            arrays = [np.asarray(o, dtype=a.dtype) for o, a in zip(out, sent)]
            fit = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), M, metrics)
            fit.metrics[PARTITION_ID] = i
            results.append((None, fit))
        if results:
            params = strategy.aggregate_fit(t, results, [])[0]
        model = strategy.core.evaluated(parameters_to_ndarrays(params))[0][0]
        np.testing.assert_array_equal(model, driven[t].astype(np.float32))
