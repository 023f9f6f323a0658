"""The Message API in-process gives the legacy API's in-process run, for every case of
:mod:`tests.engines.cases`: the same rows (the oracle's draw, who replied, the server's
evaluation, the algorithm's diagnostics; timings aside) and the same final model bit for
bit. Flower's Simulation and Deployment Engines are checked against the same
references in ``test_flower_engines.py``."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedram_flwr.engines import run_in_process, run_message_in_process
from fedram_flwr.registry import load_scenario
from tests.engines.cases import CASES, assert_same_run, write_scenario
from tests.helpers import SEED, TINY_GAUSSIAN, final_arrays, relayed, without_timings


@pytest.mark.parametrize("name", list(CASES))
def test_in_process_message_api_gives_the_legacy_run(name: str, references, tmp_path: Path) -> None:
    reference = references[name]
    run = run_message_in_process(
        load_scenario(write_scenario(name, tmp_path)), SEED, tmp_path / "message"
    )
    assert_same_run(reference, run, name)
    assert (reference.api(), run.api()) == ("legacy", "message")
    assert without_timings(run.read_metrics()) == without_timings(reference.read_metrics())


def test_the_cases_exercise_what_they_are_for(references) -> None:
    """rFedFair's draws leave available clients out (active but not relayed); CA-Fed
    excludes some who replied; FedAR's cut-off g(t) drops a stale update; FedAR steps
    from memory in an empty round; SCAFFOLD's client 0 trains every round."""
    rows = {name: [r for r in references[name].read_metrics() if r["round"] > 0] for name in CASES}
    assert any(set(r["active"]) - set(r["relayed"]) for r in rows["rfedfair"])
    weights = references["ca-fed"].read_weights()
    relayed_count = sum(len(ids) for _, ids in relayed(references["ca-fed"]))
    assert 0 < np.count_nonzero(weights) < relayed_count, "CA-Fed excluded nobody"
    assert any(r["fit-contributing"] < r["fit-seen"] for r in rows["fedar"]), "g(t) never cut"
    empty = [r for r in rows["fedar-empty"] if not r["relayed"]]
    assert len(empty) == 2 and any(r["fit-contributing"] > 0 for r in empty)
    assert all(0 in r["relayed"] for r in rows["scaffold"])
    assert all(len(r["relayed"]) == 2 for r in rows["fed-cvar-avg-m2"])
    timed = [(r["relayed"], r["late"], r["late-delivered"]) for r in rows["mifa-deadline"]]
    assert timed == [([0, 1], 1, 0), ([0, 1, 2], 0, 1), ([0, 1], 1, 0)]


def test_physical_availability_rows_match_too(tmp_path: Path) -> None:
    """Under the ``connected`` oracle (whoever is connected answers) both APIs record the
    same rows, ``connected`` included, and the same model."""
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(rounds=2, availability={"oracle": "connected", "params": {}})
    path = tmp_path / "connected.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    legacy = run_in_process(load_scenario(path), SEED, tmp_path / "legacy")
    message = run_message_in_process(load_scenario(path), SEED, tmp_path / "message")
    rows = [(a, b) for a, b in zip(legacy.read_metrics(), message.read_metrics(), strict=True)]
    assert all(b["connected"] == [0, 1, 2] for _, b in rows[1:])
    assert without_timings(legacy.read_metrics()) == without_timings(message.read_metrics())
    for x, y in zip(final_arrays(legacy), final_arrays(message), strict=True):
        np.testing.assert_array_equal(x, y)
