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

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from fedram_flwr.app_config import APP_ROOT
from fedram_flwr.config import load_scenario
from fedram_flwr.engine import run_in_process
from fedram_flwr.flwr_engine import (
    TOKEN_ENV,
    flower_processes,
    has_env,
    read_proc,
    run_with_flwr,
)
from fedram_flwr.outputs import RunDirectory

pytestmark = pytest.mark.flwr

SEED = 0
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


def final_arrays(run: RunDirectory) -> list[np.ndarray]:
    with np.load(run.path / "final_model.npz") as npz:
        return [npz[f"arr_{i}"] for i in range(len(npz.files))]


def relayed(run: RunDirectory) -> list[tuple[int, list[int]]]:
    return [(row["round"], row["relayed"]) for row in run.read_metrics() if row["round"] > 0]


def started_by(runs: list[RunDirectory]) -> tuple[set[str], dict[int, int]]:
    """Tokens and tracked (pid -> start time) the flwr runs recorded."""
    tokens, tracked = set(), {}
    for run in runs:
        record = json.loads((run.path / "flwr-logs" / "processes.json").read_text())
        tokens.add(record["token"])
        tracked.update({p["pid"]: p["start"] for p in record["processes"]})
    return tokens, tracked


def assert_nothing_left(before: dict[int, str], runs: list[RunDirectory]) -> None:
    """No process the flwr ``runs`` started survives them (by token, tracked pid and a
    diff of the Flower/Ray processes against ``before``)."""
    tokens, tracked = started_by(runs)
    new = {pid: cmd for pid, cmd in flower_processes().items() if pid not in before}
    ours = {
        pid: cmd
        for pid, cmd in new.items()
        if any(has_env(pid, TOKEN_ENV, t) for t in tokens)
        or ((info := read_proc(pid)) is not None and tracked.get(pid) == info.start)
    }
    assert not ours, f"Flower/Ray processes left by the test: {ours}"
    assert tracked, "the flwr runs recorded no processes"
    alive = {
        pid: info.cmd
        for pid, start in tracked.items()
        if (info := read_proc(pid)) is not None and info.start == start and info.state != "Z"
    }
    assert not alive, f"processes started by the flwr runs still alive: {alive}"


def run_both_engines(
    scenarios: dict[str, Path], out: Path, seed: int = SEED
) -> tuple[dict[str, RunDirectory], dict[str, RunDirectory]]:
    """Run each scenario in-process and under ``flwr run`` (those in parallel, each with
    its own SuperLink); check that no process the flwr runs started survives them."""
    before = flower_processes()
    with ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
        futures = {
            name: pool.submit(run_with_flwr, path, seed, out / f"flwr-{name}", timeout=300)
            for name, path in scenarios.items()
        }
        local = {
            name: run_in_process(load_scenario(path), seed, out / f"local-{name}")
            for name, path in scenarios.items()
        }
        flwr = {name: future.result() for name, future in futures.items()}
    assert_nothing_left(before, list(flwr.values()))
    return local, flwr


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
