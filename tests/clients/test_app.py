"""The project's ClientApps (clients/app.py): the Message-API ``message_app``
trains every objective exactly as the legacy ``app`` does (same arrays, same metrics) on
the same node, and answers the legacy API's messages as ``app`` does; why there are two
apps (Flower 1.39 takes one kind per app)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from flwr.app import ArrayRecord, ConfigRecord, Context, RecordDict
from flwr.client import ClientApp
from flwr.common import FitIns, GetPropertiesIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.compat.common.recorddict_compat import (
    fitins_to_recorddict,
    getpropertiesins_to_recorddict,
    recorddict_to_fitres,
    recorddict_to_getpropertiesres,
)

from fedram_flwr.clients.app import app, client_fn, message_app
from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import (
    NUM_EXAMPLES,
    SCAFFOLD_CONTROL,
    SERVER_ROUND,
    TRAIN_SECONDS,
    join_model_control,
    join_theta_t,
)
from fedram_flwr.registry import load_scenario
from tests.helpers import SEED, TINY_GAUSSIAN, instruction_message, tiny_ca_fed_dict

PID = 1
ALGORITHMS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # scenario changes, the train config its strategy sends (beside server-round)
    "fed-cvar-avg": ({}, {"cvar-alpha": 0.1, "cvar-gamma": 0.1, "lr-t": 0.01}),
    "fedavg": ({"algorithm": {"name": "fedavg", "params": {}}}, {}),
    "scaffold": (
        {
            "algorithm": {"name": "scaffold", "params": {}},
            "training": {"lr": 0.05, "local_steps": 5, "batch_size": 16, "weight_decay": 1e-3},
        },
        {},
    ),
    "rfedfair": (
        {
            "availability": {"oracle": "bernoulli", "params": {"p_min": 1.0}},
            "algorithm": {"name": "rfedfair", "params": {"alpha": [0.6, 0.5, 0.4], "mu": 0.05}},
        },
        {"rcfl-alpha": 0.5, "rcfl-p": 0.3, "rcfl-mu": 0.05, "lr-eta": 0.05},
    ),
    "ca-fed": (tiny_ca_fed_dict(), {"report-local-optimum": True}),
}


def write_scenario(tmp_path: Path, name: str) -> Path:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(copy.deepcopy(ALGORITHMS[name][0]), name=f"app-{name}")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def node(path: Path, state: RecordDict | None = None) -> Context:
    return Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": PID},
        state=RecordDict() if state is None else state,
        run_config={"scenario": str(path), "overrides": "", "seed": SEED},
    )


def wire_arrays(name: str, theta: list[np.ndarray]) -> list[np.ndarray]:
    if name in ("fed-cvar-avg", "rfedfair"):
        return join_theta_t(theta, 0.2)
    if name == "scaffold":
        return join_model_control(theta, [np.full_like(a, 0.01) for a in theta])
    return theta


@pytest.mark.parametrize("name", ALGORITHMS)
def test_message_app_trains_as_the_legacy_app(tmp_path: Path, name: str) -> None:
    path = write_scenario(tmp_path, name)
    exp = Experiment(load_scenario(path), SEED)
    arrays = wire_arrays(name, get_weights(exp.new_model()))
    legacy_state, message_state, both_state = RecordDict(), RecordDict(), RecordDict()
    for server_round in (1, 2):  # twice: what Context.state keeps counts too
        config = {SERVER_ROUND: server_round, **ALGORITHMS[name][1]}
        fit_ins = FitIns(ndarrays_to_parameters(arrays), config)
        legacy_msg = instruction_message(fitins_to_recorddict(fit_ins, keep_input=True))
        legacy = recorddict_to_fitres(app(legacy_msg, node(path, legacy_state)).content, False)
        routed = message_app(legacy_msg, node(path, both_state)).content
        assert sorted(routed) == sorted(app(legacy_msg, node(path, RecordDict())).content)
        routed_arrays = parameters_to_ndarrays(recorddict_to_fitres(routed, False).parameters)
        msg = instruction_message(
            RecordDict({"arrays": ArrayRecord(arrays), "config": ConfigRecord(config)})
        )
        reply = message_app(msg, node(path, message_state))

        got = reply.content["arrays"].to_numpy_ndarrays()
        want = parameters_to_ndarrays(legacy.parameters)
        assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
        assert [a.tobytes() for a in routed_arrays] == [a.tobytes() for a in want]
        metrics = dict(reply.content["metrics"])
        assert metrics.pop(NUM_EXAMPLES) == legacy.num_examples
        assert metrics.pop(TRAIN_SECONDS) > 0
        assert metrics == {k: v for k, v in legacy.metrics.items() if k != TRAIN_SECONDS}
    if name == "scaffold":
        kept = message_state[SCAFFOLD_CONTROL].to_numpy_ndarrays()
        assert [a.tobytes() for a in kept] == [
            a.tobytes() for a in legacy_state[SCAFFOLD_CONTROL].to_numpy_ndarrays()
        ]


def test_message_app_evaluates_on_the_nodes_own_test_set(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "fed-cvar-avg")
    exp = Experiment(load_scenario(path), SEED)
    theta = get_weights(exp.new_model())
    msg = instruction_message(
        RecordDict({"arrays": ArrayRecord(join_theta_t(theta, 0.0)), "config": ConfigRecord()}),
        message_type="evaluate",
    )
    metrics = message_app(msg, node(path)).content["metrics"]
    assert metrics[NUM_EXAMPLES] == len(exp.data.client_test[PID]) > 0
    assert 0.0 <= metrics["eval-accuracy"] <= 1.0 and metrics["eval-loss"] > 0


def test_flower_takes_either_a_client_fn_or_handlers_not_both() -> None:
    """Why the project has two ClientApps (Flower 1.39's rule)."""
    with pytest.raises(ValueError, match="Use either `@app.train\\(\\)` or `client_fn`"):
        ClientApp(client_fn=client_fn).train()


def test_message_app_answers_the_legacy_oracles_get_properties(tmp_path: Path) -> None:
    path = write_scenario(tmp_path, "fedavg")
    msg = instruction_message(
        getpropertiesins_to_recorddict(GetPropertiesIns({})), message_type="get_properties"
    )
    with pytest.raises(ValueError, match="Invalid message type: get_properties"):
        ClientApp()(msg, node(path))  # a plain handler app cannot
    props = recorddict_to_getpropertiesres(message_app(msg, node(path)).content).properties
    assert props == recorddict_to_getpropertiesres(app(msg, node(path)).content).properties
    assert props["partition-id"] == PID
