"""The oracles over the laws (RAM, Bernoulli, Markov, clustered, cyclic): they relay
their law's draws whatever the strategy asks for, long-run frequencies and lag-1
autocorrelations match their laws, draws replay from (seed, round) in any order,
``availability_law()`` gives each oracle's parameters, bad parameters fail at load with the
field named."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.availability import (
    BernoulliClientManager,
    ConnectedClientManager,
    CyclicClientManager,
    MarkovClientManager,
    RandomAccessClientManager,
    TraceClientManager,
    ca_fed_cluster_law,
    evenly_spread_phases,
    markov_lambda_min,
    ram_relay,
)
from fedram_flwr.engines import InProcessClientProxy, node_context
from fedram_flwr.engines.experiment import availability_law, build_oracle, rare_clients
from fedram_flwr.registry import with_overrides
from fedram_flwr.scenario.config import ScenarioError
from tests.helpers import (
    MARKOV_LAM,
    MARKOV_PI,
    assert_matches_chain,
    client_fn,
    lag1_autocorrelation,
    partition_of,
    register_clients,
    scenario_with,
)

RARE_RHO = (0.0107, 0.0078, 0.0053)  # Table 1 of the paper


# ------------------------------------------------------------------------- RAM
@pytest.mark.parametrize("m", [1, 2])
def test_manager_relays_ram_draws(m: int) -> None:
    rho = [0.3, 0.25, 0.2, 0.15, 0.1]
    manager = RandomAccessClientManager(rho, seed=11, clients_per_round=m, wait_timeout=5)
    register_clients(manager, 5)
    assert manager.num_available() == 5
    for r, asked in zip((1, 2, 3), (5, 1, 100)):
        proxies = manager.sample(num_clients=asked, min_num_clients=asked)
        assert manager.round == r
        assert len(proxies) == m  # the number asked for is ignored
        assert [partition_of(p) for p in proxies] == ram_relay(np.array(rho), m, 11, r)
        assert manager.draw(r) == ram_relay(np.array(rho), m, 11, r)


def test_manager_rho_is_normalised_copy() -> None:
    manager = RandomAccessClientManager([0.5, 0.5], seed=0)
    rho = manager.rho
    rho[0] = 7.0
    assert manager.rho.tolist() == [0.5, 0.5]


@pytest.mark.parametrize("rho", [[0.5, 0.4, 0.2], [0.9, 0.2, -0.1], [0.3, 0.3]])
def test_manager_rejects_invalid_rho(rho) -> None:
    with pytest.raises(ValueError, match=r"availability\.params\.rho.*sum to 1"):
        RandomAccessClientManager(rho, seed=0)


def test_manager_rejects_too_many_clients_per_round() -> None:
    with pytest.raises(ValueError, match=r"availability\.params\.clients_per_round"):
        RandomAccessClientManager([0.5, 0.5, 0.0], seed=0, clients_per_round=3)


def test_registry_rare_clients_are_least_likely(tiny_scenario) -> None:
    s = with_overrides(
        tiny_scenario,
        {
            "data.num_clients": 30,
            "data.client_classes": None,
            "data.frequent_fraction": 0.9,
            "availability.params": {"rare_rho": list(RARE_RHO)},
        },
    )
    rho = availability_law(s, seed=0)
    assert rho[-3:].tolist() == list(RARE_RHO)
    assert rare_clients(s, seed=0) == (27, 28, 29)
    assert not np.array_equal(rho, availability_law(s, seed=1))  # frequent law depends on seed


# ------------------------------------------------------------------- Bernoulli
def test_bernoulli_frequencies_match_p_and_rounds_are_independent(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "bernoulli", {"p_min": 0.1}, num_clients=10)
    oracle = build_oracle(s, seed=3)
    p = oracle.pi
    assert np.allclose(p, np.linspace(1.0, 0.1, 10))  # FedAR's spread, client 0 first
    x = oracle.availability_matrix(10_000)
    assert np.all(x[:, 0])  # p = 1: always there
    assert_matches_chain(x[:, 1:], p[1:], np.zeros(9))
    assert rare_clients(s, seed=3) == (7, 8, 9)  # the least available: rare data


# ---------------------------------------------------------------------- Markov
def test_markov_frequency_and_autocorrelation_match_pi_and_lambda() -> None:
    oracle = MarkovClientManager(MARKOV_PI, MARKOV_LAM, seed=7)
    assert_matches_chain(oracle.availability_matrix(10_000), MARKOV_PI, MARKOV_LAM)


def test_markov_first_round_is_stationary() -> None:
    # Round 1 is drawn from pi, not from a fixed state: over many seeds it averages pi.
    first = np.array(
        [MarkovClientManager(MARKOV_PI, MARKOV_LAM, seed=s).chain_states(1) for s in range(2000)]
    )
    se = np.sqrt(MARKOV_PI * (1 - MARKOV_PI) / 2000)
    assert np.all(np.abs(first.mean(axis=0) - MARKOV_PI) < 5 * se)


def test_markov_paper_generator(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "markov", {}, num_clients=100)
    oracle = build_oracle(s, seed=0)
    pi, lam = oracle.pi, oracle.lam
    assert np.all(pi[:50] == 0.9) and np.all(pi[50:] == pytest.approx(0.1))
    for half in (slice(0, 50), slice(50, 100)):
        correlated, weak = lam[half][:25], lam[half][25:]
        assert np.all(correlated == 0.9)
        assert np.all(np.abs(weak) < 0.05) and weak.std() == pytest.approx(0.01, rel=0.4)
    assert not np.array_equal(lam, build_oracle(s, seed=1).lam)  # weak lambdas are drawn
    assert np.all(lam >= markov_lambda_min(pi)) and np.all(lam < 1)
    assert_matches_chain(oracle.availability_matrix(4000), pi, lam)


# ------------------------------------------------------------------- clustered
def test_clustered_clients_switch_together(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "clustered", {}, num_clients=20)
    oracle = build_oracle(s, seed=2)
    pi_c, lam_c = ca_fed_cluster_law(10, 0.4)
    assert np.allclose(pi_c, [0.9] * 5 + [0.1] * 5)  # CA-Fed Sec. V-B e
    assert np.allclose(lam_c, [0, 0, 0, 0, 0, 0.5, 0.6, 0.7, 0.8, 0.9])
    x = oracle.availability_matrix(10_000)
    assert np.array_equal(x[:, 0::2], x[:, 1::2])  # clients 2c and 2c + 1 share cluster c
    assert_matches_chain(x[:, 0::2], pi_c, lam_c)
    assert np.allclose(oracle.pi, np.repeat(pi_c, 2))


def test_clustered_explicit_assignment() -> None:
    oracle = MarkovClientManager([0.5, 0.5], [0.2, 0.2], seed=1, cluster_of=[1, 0, 1])
    x = oracle.availability_matrix(200)
    assert np.array_equal(x[:, 0], x[:, 2]) and not np.array_equal(x[:, 0], x[:, 1])


# ---------------------------------------------------------------------- cyclic
@pytest.mark.parametrize(("period", "window"), [(10, 5), (10, 3), (7, 1), (12, 11)])
def test_cyclic_frequency_and_autocorrelation(period: int, window: int) -> None:
    oracle = CyclicClientManager(evenly_spread_phases(6, period), period, window, seed=0)
    periods = 100
    x = oracle.availability_matrix(periods * period)
    assert np.all(x.mean(axis=0) == window / period)  # exact over whole periods
    # Lag-1 autocorrelation of a w-of-P window: 1 - P / (w (P - w)); the one pair the
    # finite series misses moves the estimate by O(1 / periods).
    expected = 1 - period / (window * (period - window))
    assert np.all(np.abs(lag1_autocorrelation(x) - expected) < 1 / periods)


def test_cyclic_windows_start_at_the_phase() -> None:
    # Phase 9: rounds 10, 11, 12 of each period, i.e. also rounds 1 and 2.
    oracle = CyclicClientManager([0, 2, 9], period=10, window=3, seed=0)
    draws = [oracle.draw(r) for r in (1, 2, 3, 4, 10, 11, 13)]
    assert draws == [[0, 2], [0, 2], [0, 1], [1], [2], [0, 2], [0, 1]]


# ----------------------------------------------------------------- replayability
REPLAY_PARAMS = [
    ("bernoulli", {"p_min": 0.2}),
    ("markov", {}),
    ("clustered", {"num_clusters": 4}),
    ("cyclic", {"period": 5, "window": 2}),
]


@pytest.mark.parametrize(("oracle", "params"), REPLAY_PARAMS)
def test_draws_replay_in_any_order(scenario_dict, oracle: str, params: dict) -> None:
    s = scenario_with(scenario_dict, oracle, params, num_clients=8)
    in_order = [build_oracle(s, 5).draw(r) for r in range(1, 61)]
    shuffled = build_oracle(s, 5)
    order = np.random.default_rng(0).permutation(60) + 1
    assert {int(r): shuffled.draw(int(r)) for r in order} == dict(zip(range(1, 61), in_order))
    backwards = build_oracle(s, 5)
    assert [backwards.draw(r) for r in range(60, 0, -1)] == in_order[::-1]
    assert backwards.availability_matrix(60).tolist() == [
        [k in d for k in range(8)] for d in in_order
    ]
    if oracle != "cyclic":  # the only deterministic law here
        assert [build_oracle(s, 6).draw(r) for r in range(1, 61)] != in_order


def test_manager_relays_every_active_client() -> None:
    oracle = MarkovClientManager(MARKOV_PI, MARKOV_LAM, seed=4, wait_timeout=5)
    k = len(MARKOV_PI)
    for pid in reversed(range(k)):
        oracle.register(
            InProcessClientProxy(f"n{7 * pid + 3}", client_fn, node_context(pid, k, {}))
        )
    for r in (1, 2, 3):
        proxies = oracle.sample(num_clients=1)  # the number asked for is ignored
        assert oracle.round == r
        assert sorted(partition_of(p) for p in proxies) == oracle.draw(r) == oracle.last_active


def test_label_correlated_markov_moves_pi_and_lambda_together(scenario_dict) -> None:
    params = {"pi": [0.2, 0.5, 0.9], "lam": [0.1, 0.2, 0.3], "label_correlated": True}
    classes = [[2], [0], [1]]
    s = scenario_with(scenario_dict, "markov", params, client_classes=classes)
    oracle = build_oracle(s, seed=0)
    assert oracle.pi.tolist() == [0.2, 0.9, 0.5]
    assert oracle.lam.tolist() == [0.1, 0.3, 0.2]
    params = {"p_min": 0.1, "label_correlated": True}
    s = scenario_with(scenario_dict, "bernoulli", params, client_classes=classes)
    assert build_oracle(s, seed=0).pi.tolist() == [0.1, 1.0, 0.55]
    assert rare_clients(s, seed=0) == (0,)  # holds class 2, the highest


# ------------------------------------------------------------------ hidden law
def test_hidden_law_of_every_oracle(tmp_path) -> None:
    """pi for every oracle, lambda only for the Markov-type ones (None elsewhere)."""
    ram = RandomAccessClientManager([0.5, 0.3, 0.2], seed=0).hidden_law()
    assert ram.pi.tolist() == [0.5, 0.3, 0.2] and ram.lam is None
    markov = MarkovClientManager([0.2, 0.7], [0.1, 0.5], seed=0, cluster_of=[1, 0, 1])
    law = markov.hidden_law()
    assert law.pi.tolist() == [0.7, 0.2, 0.7] and law.lam.tolist() == [0.5, 0.1, 0.5]
    assert np.array_equal(markov.pi, law.pi) and np.array_equal(markov.lam, law.lam)
    cyclic = CyclicClientManager([0, 1], period=4, window=1, seed=0).hidden_law()
    assert cyclic.pi.tolist() == [0.25, 0.25] and cyclic.lam is None
    trace = TraceClientManager(np.array([[1, 0], [1, 1], [0, 0], [1, 0]]), seed=0)
    assert trace.hidden_law().lam is None and trace.pi.tolist() == [0.75, 0.25]
    connected = ConnectedClientManager(2, seed=0).hidden_law()
    assert connected.pi.tolist() == [1.0, 1.0] and connected.lam is None


def test_bernoulli_hidden_law_is_a_chain_with_lambda_zero(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "bernoulli", {"p_min": 0.5}, num_clients=3)
    law = build_oracle(s, seed=0).hidden_law()
    assert law.pi.tolist() == [1.0, 0.75, 0.5] and law.lam.tolist() == [0.0, 0.0, 0.0]


# --------------------------------------------------------------- bad parameters
BAD_PARAMS = [
    ("bernoulli", {"p": [0.5, 0.5]}, r"availability\.params\.p: has 2 entries, data\.num"),
    ("bernoulli", {"p": [0.5, 1.5, 0.5]}, r"availability\.params\.p\[1\]: 1\.5 .*\[0, 1\]"),
    ("bernoulli", {"p_min": -0.1}, r"availability\.params\.p_min"),
    ("markov", {"pi": [0.5, 0.5, 0.5]}, r"availability\.params: give both pi and lam"),
    (
        "markov",
        {"pi": [0.1, 0.5, 0.5], "lam": [-0.5, 0.0, 0.0]},
        r"availability\.params\.lam\[0\]: -0\.5 is outside the allowed range \[-0\.1111, 1\)",
    ),
    ("markov", {"pi": [0.5] * 3, "lam": [0, 0, 1]}, r"availability\.params\.lam\[2\]"),
    ("markov", {"g": 0.6}, r"availability\.params\.g: 0\.6 is outside .*\[0, 0\.5\]"),
    ("markov", {"nu": 1.0}, r"availability\.params\.nu"),
    ("markov", {"eps": -1.0}, r"availability\.params\.eps"),
    ("markov", {"sigma": 1.0}, r"availability\.params\.sigma: unknown key; allowed keys"),
    ("clustered", {"num_clusters": 4}, r"availability\.params\.num_clusters: 4 is outside"),
    ("clustered", {"num_clusters": 2, "cluster_of": [0, 1, 2]}, r"cluster_of\[2\]: 2 is not"),
    ("clustered", {"num_clusters": 2, "pi": [0.5], "lam": [0.1]}, r"params\.pi: has 1 entries"),
    ("cyclic", {"period": 4, "window": 5}, r"availability\.params\.window: 5 is outside"),
    ("cyclic", {"window": 2, "phase": [0, 1]}, r"availability\.params\.phase: has 2 entries"),
    ("cyclic", {"period": 4, "window": 2, "phase": [0, 1, 4]}, r"params\.phase\[2\]: 4 is"),
    ("connected", {"clients_per_round": 4}, r"params\.clients_per_round: 4 is outside"),
    ("connected", {"round_timeout": 0}, r"availability\.params\.round_timeout: 0\.0 is outside"),
    ("connected", {"retry_after": 0}, r"availability\.params\.retry_after: 0 is outside"),
]


@pytest.mark.parametrize(("oracle", "params", "message"), BAD_PARAMS)
def test_bad_params_fail_at_load(scenario_dict, oracle: str, params: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        scenario_with(scenario_dict, oracle, params)


def test_label_correlated_needs_client_classes(scenario_dict) -> None:
    with pytest.raises(ScenarioError, match=r"label_correlated: needs data\.client_classes"):
        scenario_with(scenario_dict, "markov", {"label_correlated": True}, client_classes=None)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: RandomAccessClientManager([np.nan, 0.5, 0.5], seed=0), r"params\.rho"),
        (lambda: MarkovClientManager([0.5, np.nan], [0.1, 0.1], 0), r"params\.pi\[1\]: nan"),
        (lambda: MarkovClientManager([0.5, 0.5], [np.nan, 0.1], 0), r"params\.lam\[0\]: nan"),
        (lambda: BernoulliClientManager([np.nan, 0.5], 0), r"params\.p\[0\]: nan"),
    ],
    ids=["ram-rho", "markov-pi", "markov-lam", "bernoulli-p"],
)
def test_oracles_built_directly_reject_nan_naming_the_parameter(build, field: str) -> None:
    """NaN compared false with every bound, so it passed the range checks."""
    with pytest.raises(ValueError, match=field):
        build()
