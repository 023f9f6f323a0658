"""rFedFair gives the same run in-process and on Flower's Simulation Engine (``flwr
run .``): K = 2 draws with replacement by p_i among three clients (the strategy's own
``get_properties`` queries, repeated draws, eta averaged with omega), 4 rounds on the
tiny 2-D Gaussian scenario, compared exactly (final arrays, who trained each round,
the fairness metrics). Started processes are checked as in ``test_flwr.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.helpers import TINY_GAUSSIAN, final_arrays, relayed, run_both_engines

pytestmark = pytest.mark.flwr


def test_rfedfair_runs_the_same_in_both_engines(tmp_path: Path) -> None:
    raw = {
        **TINY_GAUSSIAN,
        "name": "tiny-rfedfair",
        "rounds": 4,
        "eval_every": 2,
        "client_metrics": True,
        "availability": {"oracle": "bernoulli", "params": {"p_min": 1.0}},
        "algorithm": {
            "name": "rfedfair",
            "params": {"alpha": [0.6, 0.5, 0.4], "mu": 0.05, "clients_per_round": 2},
        },
        "training": {"lr": 0.05, "local_steps": 2, "batch_size": 16},
    }
    path = tmp_path / "tiny-rfedfair.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    local_runs, flwr_runs = run_both_engines({"rfedfair": path}, tmp_path, 0)
    local, flwr = local_runs["rfedfair"], flwr_runs["rfedfair"]

    assert local.status() == flwr.status() == "complete"
    assert relayed(local) == relayed(flwr) and len(relayed(local)) == 4
    for a, b in zip(final_arrays(local), final_arrays(flwr), strict=True):
        np.testing.assert_array_equal(a, b)
    fa, fb = local.read_summary()["final"], flwr.read_summary()["final"]
    assert fa["client-test-accuracy"] == fb["client-test-accuracy"]
    assert fa["client-test-hcvar"] == fb["client-test-hcvar"] and "avg-accuracy" in fa
