"""A private Ray head node (``local_cluster``) and Flower's Simulation Engine attached to
it (``run_with_flwr(..., ray_address=...)``, ``fedram run --engine flwr --ray-address``).

The run on the cluster must give the in-process run's final model bit for bit and its
metrics rows (timings aside), and must really have run there: Flower's client actors
(``ClientAppActor``) leave their worker logs in the cluster's own session folder. When
the cluster is left, none of its processes (all carry its token) survives and its address
stops answering.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedram_flwr.config import ScenarioError
from fedram_flwr.engines import run_message_in_process, run_with_flwr
from fedram_flwr.engines.flwr.errors import FlwrRunError
from fedram_flwr.engines.flwr.processes import ProcessTracker, ProcInfo, free_port
from fedram_flwr.engines.flwr.ray_cluster import (
    STOP_GRACE_S,
    STOP_WAIT_S,
    check_reachable,
    local_cluster,
    split_address,
    stop_all,
)
from fedram_flwr.registry import scenario_from_dict
from tests.helpers import (
    RUN_LIMIT_S,
    SEED,
    TINY_GAUSSIAN,
    final_arrays,
    token_processes,
    without_timings,
)


def test_split_address_names_the_flag() -> None:
    assert split_address("10.0.0.5:6379", "--ray") == ("10.0.0.5", 6379)
    with pytest.raises(ScenarioError, match="--ray 'nowhere': expected .*HOST:PORT"):
        split_address("nowhere", "--ray")


def test_unreachable_address_names_it_and_the_flag() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ScenarioError, match=f"--ray-address {address}: no Ray cluster answers"):
        check_reachable(address, "--ray-address", timeout=5)


def test_a_cluster_that_does_not_stop_is_an_error_naming_its_processes() -> None:
    """``stop_all`` raises, naming every survivor, when processes of the cluster are
    still alive after the tracker's SIGKILL and wait (a tracker that reports one)."""
    tracker = ProcessTracker("t0ken")
    survivor = ProcInfo(4242, 1, 4242, 7, "D", "/usr/bin/raylet --node-ip-address=127.0.0.1")
    asked: list[tuple[float, float]] = []

    def stop(grace: float, kill_wait: float) -> list[ProcInfo]:
        asked.append((grace, kill_wait))
        return [survivor]

    tracker.stop = stop  # type: ignore[method-assign]
    with pytest.raises(
        FlwrRunError, match=r"token t0ken\) survived SIGKILL .*4242 \(/usr/bin/raylet"
    ):
        stop_all(tracker)
    assert asked == [(STOP_GRACE_S, STOP_WAIT_S)]
    assert STOP_WAIT_S >= 60, "SIGKILLed processes get minutes to exit on a loaded machine"


def test_ray_address_is_for_the_simulation_engine_only(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY_GAUSSIAN))
    with pytest.raises(ScenarioError, match="only the simulation engine"):
        run_with_flwr(path, SEED, tmp_path / "run", engine="deployment", ray_address="h:1")


@pytest.mark.flwr
def test_simulation_on_a_running_cluster_matches_in_process(tmp_path: Path) -> None:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    reference = run_message_in_process(scenario_from_dict(raw), SEED, tmp_path / "local")
    with local_cluster(num_cpus=2) as cluster:
        run = run_with_flwr(
            path, SEED, tmp_path / "cluster", timeout=RUN_LIMIT_S, ray_address=cluster.address
        )
        actors = [
            log.name
            for log in cluster.logs.glob("worker-*")
            if ":actor_name:ClientAppActor" in log.read_text(errors="replace")
        ]
        assert actors, f"no ClientAppActor ran on the cluster ({cluster.logs})"
    timing = json.loads((run.path / "flwr-logs" / "timing.json").read_text())
    assert timing["ray-address"] == cluster.address
    assert run.status() == reference.status() == "complete"
    for x, y in zip(final_arrays(reference), final_arrays(run), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)
    assert without_timings(run.read_metrics()) == without_timings(reference.read_metrics())
    # the cluster is gone: nothing of it runs, its address no longer answers
    left = token_processes(cluster.token)
    assert not left, f"processes of the cluster survived it: {left}"
    with pytest.raises(ScenarioError):
        check_reachable(cluster.address, "--ray-address", timeout=5)
