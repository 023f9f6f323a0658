"""rFedFair gives the same run in-process and on Flower's Simulation Engine (``flwr
run .``): K = 2 draws with replacement by p_i among three clients (the strategy's own
``get_properties`` queries, repeated draws, eta averaged with omega), 4 rounds on the
tiny 2-D Gaussian scenario, compared exactly (final arrays, who trained each round,
the fairness metrics). Started processes are checked as in ``test_engines.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import TINY_GAUSSIAN
from test_engines import final_arrays, relayed, started_by

from fedram_flwr.config import load_scenario
from fedram_flwr.engine import run_in_process
from fedram_flwr.flwr_engine import flower_processes, read_proc, run_with_flwr

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
    before = flower_processes()
    flwr = run_with_flwr(path, 0, tmp_path / "flwr", timeout=300)
    local = run_in_process(load_scenario(path), 0, tmp_path / "local")

    _, tracked = started_by([flwr])
    alive = {
        pid: info.cmd
        for pid, start in tracked.items()
        if (info := read_proc(pid)) is not None and info.start == start and info.state != "Z"
    }
    assert not alive, f"processes started by the flwr run still alive: {alive}"
    assert not set(tracked) & (set(flower_processes()) - set(before))

    assert local.status() == flwr.status() == "complete"
    assert relayed(local) == relayed(flwr) and len(relayed(local)) == 4
    for a, b in zip(final_arrays(local), final_arrays(flwr), strict=True):
        np.testing.assert_array_equal(a, b)
    fa, fb = local.read_summary()["final"], flwr.read_summary()["final"]
    assert fa["client-test-accuracy"] == fb["client-test-accuracy"]
    assert fa["client-test-hcvar"] == fb["client-test-hcvar"] and "avg-accuracy" in fa
