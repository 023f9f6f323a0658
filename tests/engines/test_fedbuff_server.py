"""FedBuff's legacy-API face (fedram_flwr/engines/fedbuff_server.py): ``FedBuffServer.fit``
over in-process ClientProxies gives the event loop's run bit for bit (``run_fedbuff``
calling the NumPyClients directly), on ticks and on the time model; failed updates; what
it refuses; and ``--api legacy`` on Flower's Simulation Engine (markers ``flwr`` and
``breadth``: the shared Ray cluster) gives the in-process run bit for bit."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from flwr.common import (
    Code,
    FitIns,
    FitRes,
    Parameters,
    RecordDict,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)

from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines import run_fedbuff_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.fedbuff_in_process import (
    available_at,
    durations,
    fedbuff_core,
    fedbuff_server,
)
from fedram_flwr.engines.fedbuff_server import FedBuffServer, FedBuffStrategy
from fedram_flwr.engines.in_process import InProcessClientProxy, node_context
from fedram_flwr.protocol import SERVER_ROUND
from fedram_flwr.registry import load_scenario, scenario_from_dict
from fedram_flwr.rundir import code_version
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.config import ScenarioError
from fedram_flwr.strategies.fedbuff_loop import FedBuffFailures, run_fedbuff
from tests.engines.background import BackgroundRuns, RunSpec
from tests.engines.test_fedbuff_in_process import TIMED, fedbuff_dict
from tests.engines.test_fedbuff_message import assert_same_run, write_timed
from tests.helpers import SEED


def timed_dict() -> dict:
    raw = fedbuff_dict(buffer_size=2, concurrency=3)
    raw["time"] = copy.deepcopy(TIMED)
    return raw


def event_loop(exp: Experiment):
    """The event loop as it was before the legacy face: each client's ``fit`` called
    directly on the model it downloaded (``server-round`` = version + 1)."""
    initial = get_weights(exp.new_model())
    states = {pid: RecordDict() for pid in range(exp.scenario.data.num_clients)}

    def train(pid, arrays, version):
        returned, _, _ = exp.client(pid, states[pid]).fit(list(arrays), {SERVER_ROUND: version + 1})
        return returned

    return run_fedbuff(
        fedbuff_core(exp),
        initial,
        steps=exp.scenario.rounds,
        available_at=available_at(exp),
        durations=durations(exp, initial),
        train=train,
        seed=exp.seed,
    )


def proxied_server(exp: Experiment, proxy: type = InProcessClientProxy, **kwargs) -> FedBuffServer:
    """A FedBuffServer over the scenario's oracle and in-process proxies (each its own
    decoder), from the scenario's initial model."""
    manager = exp.client_manager()
    k = exp.scenario.data.num_clients

    def client_fn(context):
        return exp.client(int(context.node_config["partition-id"]), context.state)

    for pid in range(k):
        manager.register(proxy(str(pid), client_fn, node_context(pid, k, {})))
    initial = get_weights(exp.new_model())
    return FedBuffServer(
        client_manager=manager,
        strategy=FedBuffStrategy(fedbuff_core(exp), ndarrays_to_parameters(initial)),
        available_at=available_at(exp, manager),
        durations=durations(exp, initial),
        seed=exp.seed,
        **kwargs,
    )


@pytest.mark.parametrize(
    "raw", [fedbuff_dict(staleness="constant"), timed_dict()], ids=["ticks", "time-model"]
)
def test_the_server_over_client_proxies_is_the_event_loop_bit_for_bit(raw: dict) -> None:
    exp = Experiment(scenario_from_dict(raw), SEED)
    loop, records = event_loop(exp)
    models: list[list[np.ndarray]] = []
    server = proxied_server(
        Experiment(scenario_from_dict(raw), SEED),
        on_step=lambda record, model: models.append([a.copy() for a in model]),
    )
    server.fit(exp.scenario.rounds, timeout=None)
    assert server.records == records and len(records) == exp.scenario.rounds == len(models)
    final = parameters_to_ndarrays(server.parameters)
    for x, y, z in zip(loop.server.arrays, final, models[-1], strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    if "time" in raw:  # C > K on the time model: some arrive stale
        assert any(s > 0 for r in records for s in r.staleness)


class Failing(InProcessClientProxy):
    """A proxy whose ``fit`` replies with a failed status."""

    def fit(self, ins: FitIns, timeout: float | None, group_id: int | None) -> FitRes:
        return FitRes(Status(Code.FIT_NOT_IMPLEMENTED, "no"), Parameters([], ""), 0, {})


def test_failed_updates_free_their_slot_and_stop_the_run_after_too_many() -> None:
    exp = Experiment(scenario_from_dict(fedbuff_dict(staleness="constant")), SEED)
    server = proxied_server(exp, Failing, max_failed_rounds=2)
    with pytest.raises(FedBuffFailures, match="6 updates in a row failed"):
        server.fit(3, timeout=None)


def test_the_strategy_has_no_rounds_and_the_face_refuses_the_wall_clock(tmp_path) -> None:
    exp = Experiment(scenario_from_dict(fedbuff_dict()), SEED)
    strategy = FedBuffStrategy(fedbuff_core(exp), Parameters([], ""))
    with pytest.raises(RuntimeError, match="FedBuff has no rounds"):
        strategy.configure_fit(1, Parameters([], ""), exp.client_manager())
    with pytest.raises(RuntimeError, match="FedBuff has no rounds"):
        strategy.aggregate_fit(1, [], [])
    wall = Experiment(scenario_from_dict(fedbuff_dict(clock="wall")), SEED)
    with pytest.raises(ScenarioError, match="clock: wall .* legacy face"):
        fedbuff_server(wall, wall.client_manager(), RunDirectory(tmp_path / "r"), "")


SIMULATION_LEGACY = RunSpec(
    "simulation-legacy-fedbuff", write_timed, engine="simulation", api="legacy"
)


@pytest.mark.flwr
@pytest.mark.breadth
@pytest.mark.flower_runs(SIMULATION_LEGACY)
def test_the_simulation_engines_legacy_api_gives_the_in_process_run(
    flower_runs: BackgroundRuns, tmp_path
) -> None:
    """``flwr run .`` with ``api = legacy``: the ServerApp's FedBuffServer over Flower's
    ClientProxies (the legacy messages to the ClientApps on Ray)."""
    run = flower_runs.result(SIMULATION_LEGACY)
    assert run.api() == "legacy"
    assert run.fingerprint()["code"]["source"] == code_version()["source"]
    reference = run_fedbuff_in_process(load_scenario(write_timed(tmp_path)), SEED, tmp_path / "r")
    assert_same_run(reference, run)
    assert any(s > 0 for r in run.read_metrics()[1:] for s in r["staleness"])
