"""The oracle specs (fedram_flwr/availability/specs/oracles.py): params checked at load time with
the field named, without building a ClientManager; hidden laws and rare clients."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fedram_flwr.availability import OracleClientManager
from fedram_flwr.engines.experiment import availability_law, build_oracle, rare_clients
from fedram_flwr.registry import ORACLES, least_available, scenario_from_dict
from tests.helpers import scenario_error


def test_rho_must_sum_to_one(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["rho"] = [0.5, 0.4, 0.2]
    msg = scenario_error(scenario_dict)
    assert "availability.params.rho" in msg
    assert "sum to 1" in msg and "1.1" in msg


def test_rho_must_be_non_negative(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["rho"] = [0.7, 0.4, -0.1]
    assert "availability.params.rho" in scenario_error(scenario_dict)


def test_rho_length_must_match_num_clients(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["rho"] = [0.5, 0.5]
    msg = scenario_error(scenario_dict)
    assert "availability.params.rho" in msg
    assert "2 entries" in msg and "data.num_clients is 3" in msg


def test_unknown_oracle_param(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["m"] = 2
    msg = scenario_error(scenario_dict)
    assert msg.startswith("availability.params.m: unknown key")
    assert "clients_per_round" in msg and "rare_rho" in msg and "rho" in msg


def test_clients_per_round_above_num_clients(scenario_dict) -> None:
    scenario_dict["availability"]["params"]["clients_per_round"] = 4
    msg = scenario_error(scenario_dict)
    assert "availability.params.clients_per_round" in msg and "[1, 3]" in msg


def test_rare_rho_count_must_match_rare_clients(scenario_dict) -> None:
    del scenario_dict["availability"]["params"]["rho"]
    scenario_dict["availability"]["params"]["rare_rho"] = [0.01, 0.02]
    msg = scenario_error(scenario_dict)
    # 3 clients, frequent_fraction 0.6667 -> one rare client.
    assert "availability.params.rare_rho" in msg and "1 rare clients" in msg


# ------------------------------------------------ checks build no ClientManager
def oracle_scenario(scenario_dict: dict, oracle: str, params: dict) -> dict:
    scenario_dict["availability"] = {"oracle": oracle, "params": params}
    return scenario_dict


def test_validation_builds_no_client_manager(tmp_path, scenario_dict, monkeypatch) -> None:
    (tmp_path / "t.csv").write_text("1,0,1\n" * 6)
    params = {"clustered": {"num_clusters": 3}, "trace": {"path": str(tmp_path / "t.csv")}}

    def refuse(self, *args, **kwargs):
        raise AssertionError("validation built a ClientManager")

    monkeypatch.setattr(OracleClientManager, "__init__", refuse)
    for name in ORACLES:
        s = scenario_from_dict(
            oracle_scenario(copy.deepcopy(scenario_dict), name, params.get(name, {}))
        )
        with pytest.raises(AssertionError, match="built a ClientManager"):
            build_oracle(s, 0)  # building is the experiment's


def test_a_bad_trace_fails_at_load(tmp_path, scenario_dict) -> None:
    (tmp_path / "t.csv").write_text("1,0\n")
    raw = oracle_scenario(scenario_dict, "trace", {"path": str(tmp_path / "t.csv")})
    assert "has 2 columns (clients); data.num_clients is 3" in scenario_error(raw)


# -------------------------------------------------- hidden laws, rare clients
def test_hidden_laws_in_closed_form(scenario_dict) -> None:
    cyclic = scenario_from_dict(
        oracle_scenario(scenario_dict, "cyclic", {"period": 4, "window": 1})
    )
    assert availability_law(cyclic, 0).tolist() == [0.25, 0.25, 0.25]
    bern = scenario_from_dict(oracle_scenario(scenario_dict, "bernoulli", {"p_min": 0.2}))
    assert availability_law(bern, 0).tolist() == [1.0, 0.6, 0.2]  # linspace(1, p_min, 3)
    assert rare_clients(bern, 0) == (2,)  # one rare client: the least available
    ram = scenario_from_dict(oracle_scenario(scenario_dict, "ram", {"rho": [0.2, 0.7, 0.1]}))
    assert availability_law(ram, 0).tolist() == [0.2, 0.7, 0.1]
    assert rare_clients(ram, 0) == (2,)


def test_least_available_breaks_ties_by_id() -> None:
    assert least_available(np.array([0.5, 0.1, 0.1, 0.9]), 2) == (1, 2)
    assert least_available(np.array([0.3, 0.3, 0.3]), 1) == (0,)


def test_markov_oracles_declare_lambda() -> None:
    assert {n for n, o in ORACLES.items() if "lam" in o.hidden} == {
        "bernoulli",
        "markov",
        "clustered",
    }
    assert all("pi" in o.hidden for o in ORACLES.values())


def test_oracle_informed_needs_what_the_algorithm_reads(ca_fed_dict) -> None:
    raw = ca_fed_dict()
    raw["availability"] = {"oracle": "cyclic", "params": {"period": 4, "window": 2}}
    raw["algorithm"]["params"]["availability"] = "oracle"
    assert scenario_error(raw) == (
        "algorithm.params.availability: oracle-informed ca-fed reads each client's lam, pi, "
        "which only the bernoulli, markov, clustered oracles define; availability.oracle is "
        "'cyclic' (use estimated)"
    )
    raw["algorithm"] = {"name": "unbiased", "params": {"availability": "oracle"}}
    assert scenario_from_dict(raw).availability.oracle == "cyclic"  # pi: every oracle's
