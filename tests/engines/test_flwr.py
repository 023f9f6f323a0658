"""The in-process engine and Flower's Simulation Engine (real ``flwr run .``) agree.

Each case runs a 6-round Fig. 2a scenario (K=3, RAM, Fed-CVaR-Avg, logistic regression)
with both engines and compares the final global arrays and the relayed clients per
round. Relaying one client per round makes the two runs the same computation, and the
strategy aggregates m > 1 clients in partition order, so the models agree exactly (no
tolerance). The two ``flwr run`` runs go in parallel (own SuperLinks, ports and
FLWR_HOMEs), which also checks that they do not collide; afterwards no Flower or Ray
process they started may be left.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.app_config import APP_ROOT
from tests.helpers import SEED, final_arrays, relayed, run_both_engines

pytestmark = pytest.mark.flwr

CASES: dict[str, dict[str, Any]] = {
    "one-relayed": {},
    "two-relayed": {"clients_per_round": 2},
}


def write_scenario(tmp_path: Path, name: str, availability_params: dict[str, Any]) -> Path:
    """Fig. 2a's scenario shrunk to 6 rounds (evaluated every 3), one seed, no sweep."""
    raw = yaml.safe_load((APP_ROOT / "scenarios" / "fig2a_gaussian_3users.yaml").read_text())
    raw.pop("sweep", None)
    raw.update(name=name, rounds=6, eval_every=3, seeds=[SEED])
    raw["availability"]["params"].update(availability_params)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_in_process_and_flwr_engines_agree(tmp_path: Path) -> None:
    scenarios = {name: write_scenario(tmp_path, name, p) for name, p in CASES.items()}
    local, flwr = run_both_engines(scenarios, tmp_path)

    for name in CASES:
        a, b = local[name], flwr[name]
        assert a.status() == b.status() == "complete"
        assert b.scenario()["name"] == name
        seq_a, seq_b = relayed(a), relayed(b)
        assert len(seq_a) == 6
        assert seq_a == seq_b, f"{name}: relayed clients differ"
        m = CASES[name].get("clients_per_round", 1)
        assert all(len(ids) == m for _, ids in seq_a)
        arrays_a, arrays_b = final_arrays(a), final_arrays(b)
        assert len(arrays_a) == len(arrays_b)
        for x, y in zip(arrays_a, arrays_b):
            assert x.dtype == y.dtype and x.shape == y.shape
            # Exact: same client computation, same aggregation order.
            np.testing.assert_array_equal(x, y, err_msg=f"{name}: final models differ")
