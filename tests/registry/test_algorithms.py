"""The algorithm specs: every registered algorithm builds and runs one round with every
oracle it is compatible with (compatibility read from the specs), a round in which
nobody is available moves only FedAR's and MIFA's model, and params fail at load time
naming the field."""

from __future__ import annotations

import copy
import dataclasses
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.common import parameters_to_ndarrays
from flwr.common.logger import FLOWER_LOGGER

from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines import InProcessClientProxy, node_context
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.server import StrategyEveryRound
from fedram_flwr.registry import ALGORITHMS, ORACLES, algorithm_params, scenario_from_dict
from fedram_flwr.registry.specs import AlgorithmSpec, OracleSpec
from fedram_flwr.strategies.hyper import MODEL_BOUND
from tests.helpers import TINY_GAUSSIAN, scenario_error

# The few oracle params the tiny scenario (K = 3 clients) needs beyond each default.
TINY_ORACLE_PARAMS: dict[str, dict[str, Any]] = {
    "ram": {"rho": [0.5, 0.4, 0.1]},  # someone with pi >= 1/2 for more-available
    "clustered": {"num_clusters": 3},
    "trace": {"path": "trace.csv"},  # written by the test, relative to tmp_path
    "nonstationary": {"p": [1.0, 0.5, 0.2], "dynamics": "stationary"},  # client 0 always in
    "min-separation": {"separation": 0, "clients_per_round": 2},  # pi >= 1/2 for someone
}


def combinations() -> list[tuple[str, str, bool]]:
    """(algorithm, oracle, oracle_informed): every algorithm with every oracle in its
    estimated mode, and oracle-informed with every oracle defining what it reads."""
    out = []
    for algorithm in ALGORITHMS.values():
        for oracle in ORACLES.values():
            out.append((algorithm.name, oracle.name, False))
            if algorithm.reads_hidden and compatible(algorithm, oracle):
                out.append((algorithm.name, oracle.name, True))
    return out


def compatible(algorithm: AlgorithmSpec, oracle: OracleSpec) -> bool:
    return algorithm.reads_hidden <= oracle.hidden


def tiny(
    algorithm: str, oracle: str, informed: bool, tmp_path: Path, trace: str = "1,1,1\n"
) -> dict[str, Any]:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(rounds=trace.count("\n") if oracle == "trace" else 1, eval_every=1)
    raw["data"]["samples_per_class"] = 10
    params = dict(TINY_ORACLE_PARAMS.get(oracle, {}))
    if "path" in params:
        (tmp_path / params["path"]).write_text(trace)
        params["path"] = str(tmp_path / params["path"])
    raw["availability"] = {"oracle": oracle, "params": params}
    raw["algorithm"] = {
        "name": algorithm,
        "params": {"availability": "oracle"} if informed else {},
    }
    return raw


class CountingProxy(InProcessClientProxy):
    """Counts the fit instructions its client receives."""

    fits = 0

    def fit(self, ins, timeout, group_id):
        CountingProxy.fits += 1
        return super().fit(ins, timeout, group_id)


def run_rounds(exp: Experiment) -> tuple[list[np.ndarray], int]:
    """The scenario's rounds through the engines' server loop, clients in-process (as
    :func:`fedram_flwr.engines.run_in_process` runs them, without recording): the final
    arrays and how many clients trained."""
    manager, k = exp.client_manager(), exp.scenario.data.num_clients

    def client_fn(context):
        return exp.client(int(context.node_config["partition-id"]), context.state).to_client()

    CountingProxy.fits = 0
    for pid in range(k):
        manager.register(CountingProxy(str(pid), client_fn, node_context(pid, k, {})))
    server = StrategyEveryRound(client_manager=manager, strategy=exp.strategy())
    server.set_max_workers(1)
    level = FLOWER_LOGGER.level
    FLOWER_LOGGER.setLevel(logging.WARNING)
    try:
        server.fit(num_rounds=exp.scenario.rounds, timeout=None)
    finally:
        FLOWER_LOGGER.setLevel(level)
    return parameters_to_ndarrays(server.parameters), CountingProxy.fits


def test_every_algorithm_is_tried_with_every_oracle() -> None:
    pairs = {(a, o) for a, o, _ in combinations()}
    assert pairs == {(a, o) for a in ALGORITHMS for o in ORACLES}
    informed = {(a, o) for a, o, i in combinations() if i}
    assert ("ca-fed", "markov") in informed and ("ca-fed", "cyclic") not in informed
    assert ("fedavg-is", "cyclic") in informed


@pytest.mark.parametrize(
    ("algorithm", "oracle", "informed"),
    combinations(),
    ids=[f"{a}-{o}{'-informed' if i else ''}" for a, o, i in combinations()],
)
def test_algorithm_runs_one_round(algorithm, oracle, informed, tmp_path: Path) -> None:
    exp = Experiment(scenario_from_dict(tiny(algorithm, oracle, informed, tmp_path)), 0)
    initial = get_weights(exp.new_model())
    final, fits = run_rounds(exp)
    model = final[: len(initial)]  # packed extras ((theta, t), (x, c)) follow the model
    assert [a.shape for a in model] == [a.shape for a in initial]
    assert all(np.all(np.isfinite(a)) for a in final)
    moved = any(not np.array_equal(a, b) for a, b in zip(model, initial))
    # The model moves exactly when somebody trained (and was weighed: more-available
    # trains the relayed clients but weighs those with pi < min_pi by 0).
    assert moved == (fits > 0), (moved, fits)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_an_empty_round_moves_only_fedar_and_mifa(algorithm: str, tmp_path: Path) -> None:
    """Round 2 of the trace has nobody available: the server still aggregates (no
    replies); FedAR (eq. 7) and MIFA step along the updates stored in round 1, every
    other algorithm (FedVARP included, as its authors' code does) keeps the model."""
    finals = []
    for trace in ("1,1,1\n", "1,1,1\n0,0,0\n"):
        raw = tiny(algorithm, "trace", False, tmp_path, trace)
        final, fits = run_rounds(Experiment(scenario_from_dict(raw), 0))
        assert fits == 3  # round 1 only
        finals.append(final)
    moved = any(not np.array_equal(a, b) for a, b in zip(*finals, strict=True))
    assert moved == (algorithm in ("fedar", "mifa"))


# ------------------------------------------------------------ bad params
@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5])
def test_alpha_outside_unit_interval(scenario_dict, alpha: float) -> None:
    scenario_dict["algorithm"]["params"]["alpha"] = alpha
    msg = scenario_error(scenario_dict)
    assert "algorithm.params.alpha" in msg
    assert "(0, 1]" in msg


@pytest.mark.parametrize("alpha", [1.0, 1e-3])
def test_alpha_boundaries_allowed(scenario_dict, alpha: float) -> None:
    scenario_dict["algorithm"]["params"]["alpha"] = alpha
    assert algorithm_params(scenario_from_dict(scenario_dict)).alpha == alpha


def test_gamma_outside_unit_interval(scenario_dict) -> None:
    scenario_dict["algorithm"]["params"]["gamma"] = 1.01
    msg = scenario_error(scenario_dict)
    assert "algorithm.params.gamma" in msg and "[0, 1]" in msg


def test_unknown_algorithm_param_lists_allowed(scenario_dict) -> None:
    scenario_dict["algorithm"]["params"]["beta"] = 0.5
    msg = scenario_error(scenario_dict)
    assert msg.startswith("algorithm.params.beta: unknown key")
    assert "alpha, gamma, lr_t, t_init" in msg


def test_fedavg_takes_no_cvar_params(scenario_dict) -> None:
    scenario_dict["algorithm"] = {"name": "fedavg", "params": {"alpha": 0.1}}
    assert scenario_error(scenario_dict).startswith("algorithm.params.alpha: unknown key")


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_the_message_api_strategy_has_the_legacy_hyper_parameters(
    algorithm: str, tmp_path: Path
) -> None:
    """``Experiment.message_strategy`` builds the spec's Message-API class over a core
    equal to the legacy strategy's (same hyper-parameters, oracle-informed ones too);
    q-FFL, on Flower's QFedAvg, gets q and the clients' learning rate as QFedAvg names
    them."""
    informed = bool(ALGORITHMS[algorithm].reads_hidden)
    exp = Experiment(scenario_from_dict(tiny(algorithm, "markov", informed, tmp_path)), 0)
    legacy, message = exp.strategy(), exp.message_strategy()
    assert type(message) is ALGORITHMS[algorithm].message_strategy
    assert (message.fraction_train, message.fraction_evaluate) == (1.0, 0.0)
    if algorithm == "qffl":
        assert (message.q, message.client_learning_rate) == (legacy.q_param, 0.05)
        return
    for field in dataclasses.fields(legacy.core):
        if field.name in MODEL_BOUND:  # set from the model at start
            continue
        a, b = getattr(legacy.core, field.name), getattr(message.core, field.name)
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=field.name)
        elif callable(a):  # FedAR's g(t): a partial, rebuilt
            assert [a(t) for t in range(1, 30)] == [b(t) for t in range(1, 30)], field.name
        else:
            assert a == b, field.name


# ------------------------------------------- the server learning rate eta_g
SERVER_LR_ALGORITHMS = ("fedavg", "mifa", "fedvarp", "fedavg-is", "fedau")


@pytest.mark.parametrize("algorithm", SERVER_LR_ALGORITHMS)
def test_server_lr_one_is_the_default_bit_for_bit(algorithm: str, tmp_path: Path) -> None:
    """Three rounds of the tiny scenario without the key and with server_lr: 1.0 give the
    same final arrays bit for bit; server_lr: 0.5 reaches the strategy (another model)."""
    finals = []
    for extra in ({}, {"server_lr": 1.0}, {"server_lr": 0.5}):
        raw = tiny(algorithm, "markov", False, tmp_path)
        raw.update(rounds=3)
        raw["algorithm"]["params"].update(extra)
        finals.append(run_rounds(Experiment(scenario_from_dict(raw), 0))[0])
    default, one, half = finals
    assert all(a.tobytes() == b.tobytes() for a, b in zip(default, one, strict=True))
    assert any(not np.array_equal(a, b) for a, b in zip(default, half, strict=True))


@pytest.mark.parametrize("algorithm", SERVER_LR_ALGORITHMS)
@pytest.mark.parametrize("bad", [0.0, -0.5])
def test_a_bad_server_lr_names_the_field(algorithm: str, bad: float, tmp_path: Path) -> None:
    raw = tiny(algorithm, "markov", False, tmp_path)
    raw["algorithm"]["params"]["server_lr"] = bad
    msg = scenario_error(raw)
    assert "algorithm.params.server_lr" in msg and "(0, " in msg, msg
