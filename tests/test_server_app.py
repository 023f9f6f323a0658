"""The ServerApp of ``flwr run .`` (fedram_flwr/server_app.py): its ``@app.main()`` runs
the run config's ``api`` (the Message API by default, or the legacy components through
Flower's ``start_grid``) on the grid it is given. Here the grid is the in-process one
over the project's ClientApp (``message_app``, which answers both APIs), so both paths
run as under Flower's engines, in this process: same model, same clients, the API in
the run folder's fingerprint."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml
from flwr.app import Context, RecordDict

from fedram_flwr.availability.manager import AvailabilityError
from fedram_flwr.clients.app import message_app
from fedram_flwr.engines.grid import InProcessGrid
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.config import ScenarioError
from fedram_flwr.server_app import app
from tests.helpers import TINY_GAUSSIAN, final_arrays, relayed


def serve(tmp_path: Path, api: str | None, nodes: int = 3, **settings: float) -> RunDirectory:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(rounds=3, algorithm={"name": "rfedfair", "params": {"clients_per_round": 2}})
    raw["availability"] = {"oracle": "bernoulli", "params": {"p": [1.0, 0.6, 0.3]}}
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / str(api)
    config = {"scenario": str(scenario), "seed": 0, "run-dir": str(run_dir)}
    if api is not None:
        config["api"] = api
    config.update(settings)
    grid = InProcessGrid(message_app, nodes, run_config=config)
    app(grid, Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config=config))
    return RunDirectory(run_dir)


def test_both_apis_run_the_scenario_to_the_same_model(tmp_path: Path) -> None:
    default, legacy = serve(tmp_path, None), serve(tmp_path, "legacy")
    assert (default.status(), legacy.status()) == ("complete", "complete")
    assert (default.api(), legacy.api()) == ("message", "legacy")
    assert relayed(default) == relayed(legacy) and len(relayed(default)) == 3
    for a, b in zip(final_arrays(default), final_arrays(legacy), strict=True):
        np.testing.assert_array_equal(a, b)


def test_an_unknown_api_is_refused_naming_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(
        ScenarioError, match=r"api: unknown 'grpc'; allowed values: message, legacy"
    ):
        serve(tmp_path, "grpc")


@pytest.mark.parametrize(
    ("api", "said"),
    [
        ("message", r"now 0\.25 s"),
        ("legacy", r"only 2 of data\.num_clients=3 clients connected within [0-9] s"),
    ],
)
def test_the_run_configs_wait_timeout_bounds_the_wait_for_the_nodes(
    tmp_path: Path, api: str, said: str
) -> None:
    # 2 nodes for 3 clients: the oracle gives up after the run config's wait, not 120 s
    with pytest.raises(AvailabilityError, match=said):
        serve(tmp_path, api, nodes=2, **{"wait-timeout": 0.25})
