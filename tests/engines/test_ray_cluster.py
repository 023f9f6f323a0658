"""A private Ray head node (``local_cluster``) and Flower's Simulation Engine attached to
it (``run_with_flwr(..., ray_address=...)``, ``fedram run --engine flwr --ray-address``):
addresses, errors and stopping, without Ray. Runs on a cluster are checked in
``test_flower_engines.py`` (every Simulation run there joins the test session's cluster), and
that a cluster leaves nothing behind by ``tests/engines/background.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedram_flwr.engines import run_with_flwr
from fedram_flwr.engines.flwr.errors import FlwrRunError
from fedram_flwr.engines.flwr.processes import ProcessTracker, ProcInfo, free_port
from fedram_flwr.engines.flwr.ray_cluster import (
    STOP_GRACE_S,
    STOP_WAIT_S,
    check_reachable,
    split_address,
    stop_all,
)
from fedram_flwr.scenario.config import ScenarioError
from tests.helpers import (
    SEED,
    TINY_GAUSSIAN,
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
