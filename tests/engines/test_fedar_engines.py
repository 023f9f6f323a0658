"""FedAR and SCAFFOLD give the same run in-process and on Flower's Simulation Engine.

The tiny 3-client Gaussian scenario under Bernoulli availability p = (1, 0.6, 0.3),
8 rounds of 5 local steps: client 0 trains every round, so SCAFFOLD's client control
variate c_i, kept in ``Context.state``, is read back in rounds 2-8 (a lost state
restarts c_i at zero and changes the model); FedAR's cut-off g(t) = 1 + t / 4 drops
client 2's update when it is stale. A third FedAR run replays a trace with empty
rounds: the ServerApp's server hands them to the strategy as the in-process one does
(FedAR steps from memory in both). The two ``flwr run`` runs go in parallel, as in
``test_flwr.py``. The final models must agree exactly: every client's draws come from
(seed, round, id), both engines run the same NumPyClient on the same arrays, and the
server folds the updates in partition order with the same float32 numpy operations, so
no tolerance is needed (a float difference would be a real divergence).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.helpers import SEED, TINY_GAUSSIAN, final_arrays, relayed, run_both_engines

pytestmark = pytest.mark.flwr

ROUNDS = 8
FEDAR = {"name": "fedar", "params": {"t0": 1.0, "b": 4.0}}
CASES: dict[str, dict[str, Any]] = {
    "fedar": FEDAR,
    "scaffold": {"name": "scaffold", "params": {}},
}
EMPTY_TRACE = [[], [0, 1], [2], [], [], [1], [], []]  # active ids per round


def write_scenario(
    tmp_path: Path, name: str, algorithm: dict[str, Any], availability: dict[str, Any]
) -> Path:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(
        name=f"engines-{name}",
        rounds=ROUNDS,
        eval_every=4,
        seeds=[SEED],
        availability=availability,
        algorithm=algorithm,
        training={"lr": 0.05, "local_steps": 5, "batch_size": 16, "weight_decay": 1e-3},
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_fedar_and_scaffold_agree_across_engines(tmp_path: Path) -> None:
    bernoulli = {"oracle": "bernoulli", "params": {"p": [1.0, 0.6, 0.3]}}
    scenarios = {name: write_scenario(tmp_path, name, a, bernoulli) for name, a in CASES.items()}
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(EMPTY_TRACE))
    empty = {"oracle": "trace", "params": {"path": str(trace)}}
    scenarios["fedar-empty"] = write_scenario(tmp_path, "fedar-empty", FEDAR, empty)
    local, flwr = run_both_engines(scenarios, tmp_path)

    a, b = local["fedar-empty"], flwr["fedar-empty"]
    assert relayed(a) == relayed(b) == list(enumerate(EMPTY_TRACE, start=1))
    for x, y in zip(final_arrays(a), final_arrays(b), strict=True):
        np.testing.assert_array_equal(x, y, err_msg="fedar-empty: final models differ")
    empty_rows = [r for r in b.read_metrics() if r["round"] > 0 and not r.get("relayed")]
    assert len(empty_rows) == EMPTY_TRACE.count([])
    assert any(r.get("fit-contributing", 0) > 0 for r in empty_rows), "no step from memory"

    for name in CASES:
        a, b = local[name], flwr[name]
        assert a.status() == b.status() == "complete"
        seq_a = relayed(a)
        assert len(seq_a) == ROUNDS and all(0 in ids for _, ids in seq_a)
        assert any(2 not in ids for _, ids in seq_a), "client 2 is never unavailable"
        assert seq_a == relayed(b), f"{name}: selected clients differ"
        for x, y in zip(final_arrays(a), final_arrays(b), strict=True):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y, err_msg=f"{name}: final models differ")
    fedar_rows = [row for row in local["fedar"].read_metrics() if row["round"] > 0]
    assert any(row.get("fit-contributing", 3) < 3 for row in fedar_rows), "g(t) never cut"
