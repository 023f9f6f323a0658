"""CA-Fed and a baseline give the same run in the in-process engine and in Flower's
Simulation Engine (real ``flwr run .``), on the tiny Markov-availability scenario of
conftest.py: the same relayed (active) clients per round, the same aggregation weights
per round (so the same selected clients), and bit-identical final models. The CA-Fed
case estimates pi, lambda and takes each client's F_k* from its ``Context.state``
(``loss_floor: local-optimum``), which must survive Flower re-creating client objects;
the Unbiased case is oracle-informed. Both ``flwr run`` runs go in parallel; afterwards
no process they started may be alive (as in test_flwr.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.helpers import final_arrays, relayed, run_both_engines

pytestmark = pytest.mark.flwr

SEED = 0
ROUNDS = 4
CASES: dict[str, dict[str, Any]] = {
    "ca-fed": {
        "name": "ca-fed",
        "params": {"kappa2": 1e-3, "server_lr": 0.5, "loss_floor": "local-optimum"},
    },
    "unbiased": {"name": "unbiased", "params": {"availability": "oracle", "server_lr": 0.5}},
}


def test_ca_fed_runs_the_same_in_both_engines(tmp_path: Path, ca_fed_dict) -> None:
    paths = {}
    for name, algorithm in CASES.items():
        raw = ca_fed_dict(rounds=ROUNDS, eval_every=2)
        raw.update(name=name, algorithm=algorithm)
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(raw, sort_keys=False))
    local, flwr = run_both_engines(paths, tmp_path, SEED)

    for name in CASES:
        a, b = local[name], flwr[name]
        assert a.status() == b.status() == "complete"
        seq = relayed(a)
        assert len(seq) == ROUNDS and seq == relayed(b), f"{name}: relayed clients differ"
        weights_a, weights_b = a.read_weights(), b.read_weights()
        assert weights_a.shape == (ROUNDS, 6)
        np.testing.assert_array_equal(weights_a, weights_b, err_msg=f"{name}: weights differ")
        if name == "ca-fed":  # it excludes some active clients, so selection is tested
            active = sum(len(ids) for _, ids in seq)
            assert 0 < np.count_nonzero(weights_a) < active
        for x, y in zip(final_arrays(a), final_arrays(b), strict=True):
            np.testing.assert_array_equal(x, y, err_msg=f"{name}: final models differ")
