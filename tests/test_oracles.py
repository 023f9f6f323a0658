"""Availability oracles beside the RAM (Bernoulli, Markov, clustered, cyclic, trace):
long-run frequencies and lag-1 autocorrelations match their laws, draws replay from
(seed, round) in any order, traces reproduce recorded runs exactly, bad parameters
fail at load with the field named."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from flwr.client import NumPyClient
from flwr.common import Context, FitIns, GetPropertiesIns, Parameters

from fedram_flwr.availability import (
    PARTITION_ID,
    AvailabilityError,
    ConnectedClientManager,
    CyclicClientManager,
    MarkovClientManager,
    TraceClientManager,
    ca_fed_cluster_law,
    ca_fed_markov_law,
    connected_sample,
    evenly_spread_phases,
    label_permutation,
    markov_lambda_min,
    read_trace,
    write_trace,
)
from fedram_flwr.config import Scenario, ScenarioError, scenario_from_dict
from fedram_flwr.engines import InProcessClientProxy, node_context, run_in_process
from fedram_flwr.registry import build_oracle, oracle_rare_clients


# ---------------------------------------------------------------------- helpers
def lag1_autocorrelation(x: np.ndarray) -> np.ndarray:
    """Sample lag-1 autocorrelation of every column (the usual ACF estimator)."""
    d = x.astype(float) - x.mean(axis=0)
    return (d[:-1] * d[1:]).sum(axis=0) / (d**2).sum(axis=0)


def chain_standard_errors(pi: np.ndarray, lam: np.ndarray, t: int) -> tuple[np.ndarray, ...]:
    """Asymptotic standard errors, over t rounds of a stationary two-state chain, of
    (a) the active frequency: var = pi (1 - pi) / t x (1 + lam) / (1 - lam);
    (b) the lag-1 autocorrelation, which equals P_hat(1->1) - P_hat(0->1) up to O(1/t)
    edge terms: two binomial proportions over t pi and t (1 - pi) transitions."""
    p11, p01 = lam + (1 - lam) * pi, (1 - lam) * pi
    se_freq = np.sqrt(pi * (1 - pi) / t * (1 + lam) / (1 - lam))
    se_r1 = np.sqrt(p11 * (1 - p11) / (t * pi) + p01 * (1 - p01) / (t * (1 - pi)))
    return se_freq, se_r1


def assert_matches_chain(x: np.ndarray, pi: np.ndarray, lam: np.ndarray) -> None:
    """Columns of x look like stationary chains (pi, lam): within 5 standard errors
    (a false alarm is below 1e-5 per client for a normal estimate)."""
    t = len(x)
    se_freq, se_r1 = chain_standard_errors(pi, lam, t)
    freq_err = np.abs(x.mean(axis=0) - pi)
    assert np.all(freq_err < 5 * se_freq), (x.mean(axis=0), pi, se_freq)
    r1_err = np.abs(lag1_autocorrelation(x) - lam)
    assert np.all(r1_err < 5 * se_r1 + 2 / t), (lag1_autocorrelation(x), lam, se_r1)


def scenario_with(scenario_dict: dict, oracle: str, params: dict, **data) -> Scenario:
    """The tiny scenario (K = 3, classes [0], [1], [2]) with this oracle; other data
    sizes use the rare-pattern split unless ``client_classes`` is given."""
    if "num_clients" in data:
        data.setdefault("client_classes", None)
    scenario_dict["availability"] = {"oracle": oracle, "params": params}
    scenario_dict["data"].update(data)
    return scenario_from_dict(scenario_dict)


class PropertiesClient(NumPyClient):
    def __init__(self, partition_id: int) -> None:
        self.partition_id = partition_id

    def get_properties(self, config):
        return {PARTITION_ID: self.partition_id}


def client_fn(context: Context):
    return PropertiesClient(int(context.node_config["partition-id"])).to_client()


def partition_of(proxy) -> int:
    res = proxy.get_properties(GetPropertiesIns(config={}), timeout=None, group_id=None)
    return int(res.properties[PARTITION_ID])


# ------------------------------------------------------------------- Bernoulli
def test_bernoulli_frequencies_match_p_and_rounds_are_independent(scenario_dict) -> None:
    s = scenario_with(scenario_dict, "bernoulli", {"p_min": 0.1}, num_clients=10)
    oracle = build_oracle(s, seed=3)
    p = oracle.pi
    assert np.allclose(p, np.linspace(1.0, 0.1, 10))  # FedAR's spread, client 0 first
    x = oracle.availability_matrix(10_000)
    assert np.all(x[:, 0])  # p = 1: always there
    assert_matches_chain(x[:, 1:], p[1:], np.zeros(9))
    assert oracle_rare_clients(s, seed=3) == (7, 8, 9)  # the least available: rare data


# ---------------------------------------------------------------------- Markov
PI = np.array([0.1, 0.1, 0.5, 0.5, 0.5, 0.9, 0.9, 0.3])
LAM = np.array([0.0, 0.9, -0.5, 0.0, 0.9, 0.0, 0.9, 0.5])


def test_markov_frequency_and_autocorrelation_match_pi_and_lambda() -> None:
    oracle = MarkovClientManager(PI, LAM, seed=7)
    assert_matches_chain(oracle.availability_matrix(10_000), PI, LAM)


def test_markov_first_round_is_stationary() -> None:
    # Round 1 is drawn from pi, not from a fixed state: over many seeds it averages pi.
    first = np.array([MarkovClientManager(PI, LAM, seed=s).chain_states(1) for s in range(2000)])
    se = np.sqrt(PI * (1 - PI) / 2000)
    assert np.all(np.abs(first.mean(axis=0) - PI) < 5 * se)


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


def test_markov_generator_clips_lambda_to_the_valid_range() -> None:
    # With eps large, N(0, eps^2) draws fall outside [lambda_min(pi), 1): clipped.
    pi, lam = ca_fed_markov_law(40, 0.45, 0.9, 5.0, np.random.default_rng(0))
    lo = markov_lambda_min(pi)
    assert np.all(lam >= lo) and np.all(lam < 1)
    assert np.any(lam == lo) and np.any(lam == np.nextafter(1.0, 0.0))


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
    oracle = MarkovClientManager(PI, LAM, seed=4, wait_timeout=5)
    k = len(PI)
    for pid in reversed(range(k)):
        oracle.register(
            InProcessClientProxy(f"n{7 * pid + 3}", client_fn, node_context(pid, k, {}))
        )
    for r in (1, 2, 3):
        proxies = oracle.sample(num_clients=1)  # the number asked for is ignored
        assert oracle.round == r
        assert sorted(partition_of(p) for p in proxies) == oracle.draw(r) == oracle.last_active


def test_empty_round_relays_nobody_and_says_why(tmp_path: Path, caplog) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([[0], [], [1, 2]]))
    oracle = TraceClientManager(read_trace(path, 3), seed=0, wait_timeout=5)
    for pid in range(3):
        oracle.register(InProcessClientProxy(str(pid), client_fn, node_context(pid, 3, {})))
    assert len(oracle.sample(1)) == 1
    with caplog.at_level(logging.WARNING, logger="flwr"):
        assert oracle.sample(1) == []
    assert "round 2: no client is available" in caplog.text
    assert len(oracle.sample(1)) == 2


# ------------------------------------------------------------- label correlation
def test_label_permutation_gives_low_classes_high_availability() -> None:
    classes = [[2], [0], [1, 2], [0, 1]]  # mean class ids 2, 0, 1.5, 0.5
    pi = np.array([0.2, 0.5, 0.9, 0.7])
    perm = label_permutation(pi, classes)
    assert pi[perm].tolist() == [0.2, 0.9, 0.5, 0.7]
    assert sorted(perm) == [0, 1, 2, 3]  # a permutation: the values are kept


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
    assert oracle_rare_clients(s, seed=0) == (0,)  # holds class 2, the highest


# ------------------------------------------------------------------------ traces
@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_trace_replays_a_recorded_matrix_exactly(tmp_path: Path, suffix: str) -> None:
    recorded = MarkovClientManager(PI, LAM, seed=9).availability_matrix(50)
    recorded[7] = False  # a round with nobody
    write_trace(tmp_path / f"trace{suffix}", recorded)
    replay = TraceClientManager(read_trace(tmp_path / f"trace{suffix}", len(PI)), seed=1)
    assert np.array_equal(replay.availability_matrix(50), recorded)
    assert np.allclose(replay.pi, recorded.mean(axis=0))
    with pytest.raises(AvailabilityError, match="round 51 is past the end.*past_end: wrap"):
        replay.draw(51)
    wrapped = TraceClientManager(recorded, seed=0, wrap=True)
    assert wrapped.draw(51) == wrapped.draw(1) and wrapped.draw(100) == wrapped.draw(50)


def test_run_records_availability_and_a_trace_replays_it(
    tmp_path: Path, scenario_dict, monkeypatch
) -> None:
    """A run writes availability.csv (and its heatmap); a run of the ``trace`` oracle on
    that file relays the same clients every round and ends with the same model."""
    params = {"pi": [0.6, 0.3, 0.8], "lam": [0.5, 0.0, 0.9]}
    s = scenario_with(scenario_dict, "markov", params)
    first = run_in_process(s, 0, tmp_path / "markov")
    assert (first.path / "availability.png").is_file()
    monkeypatch.setattr("fedram_flwr.engines.in_process.plot_run", lambda *args: None)  # saves ~2 s
    recorded = read_trace(first.path / "availability.csv", 3)
    assert np.array_equal(recorded, build_oracle(s, 0).availability_matrix(s.rounds))
    trace = scenario_with(scenario_dict, "trace", {"path": str(first.path / "availability.csv")})
    again = run_in_process(trace, 0, tmp_path / "trace")
    assert np.array_equal(read_trace(again.path / "availability.csv", 3), recorded)
    rows_a, rows_b = first.read_metrics(), again.read_metrics()
    assert [(r.get("active"), r.get("relayed")) for r in rows_a] == [
        (r.get("active"), r.get("relayed")) for r in rows_b
    ]
    with np.load(first.path / "final_model.npz") as a, np.load(again.path / "final_model.npz") as b:
        assert all(np.array_equal(a[k], b[k]) for k in a.files)


# --------------------------------------------------------------- bad parameters
def write(tmp_path: Path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


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


TRACE_ERRORS = [
    ("t.csv", "1,0,1\n0,1\n1,1,1\n", r"ragged rows: round 1 has 3 columns, round 2 has 2"),
    ("t.csv", "1,0\n0,1\n", r"has 2 columns \(clients\); data\.num_clients is 3"),
    ("t.csv", "1,0,1\n0,2,1\n", r"round 2, client 1: '2' is not 0 or 1"),
    ("t.json", "[[0], [3]]", r"round 2 lists client 3: unknown id; allowed values: 0\.\.2"),
    ("t.json", "[[0, 0]]", r"round 1 lists client 0 twice"),
    ("t.json", '{"0": [1]}', r"expected a list \(one per round\)"),
    ("t.json", "[]", r"the trace holds no rounds"),
    ("t.txt", "1,0,1\n", r"unknown trace format '\.txt'; allowed: \.csv"),
    ("t.csv", "1,0,1\n" * 5, r"the trace has 5 rounds but rounds is 6; .*past_end: wrap"),
]


@pytest.mark.parametrize(("name", "text", "message"), TRACE_ERRORS)
def test_bad_traces_fail_at_load(tmp_path, scenario_dict, name: str, text: str, message) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(ScenarioError, match=r"availability\.params\.path: .*" + message):
        scenario_with(scenario_dict, "trace", {"path": path})


def test_trace_errors_name_missing_file_and_bad_past_end(tmp_path, scenario_dict) -> None:
    with pytest.raises(ScenarioError, match=r"params\.path: .*nope\.csv: trace file not found"):
        scenario_with(scenario_dict, "trace", {"path": str(tmp_path / "nope.csv")})
    path = write(tmp_path, "t.csv", "1,0,1\n" * 5)
    with pytest.raises(ScenarioError, match=r"past_end: 'loop' is not allowed; .*error, wrap"):
        scenario_with(scenario_dict, "trace", {"path": path, "past_end": "loop"})
    s = scenario_with(scenario_dict, "trace", {"path": path, "past_end": "wrap"})
    assert build_oracle(s, 0).draw(6) == [0, 2]
    with pytest.raises(ScenarioError, match=r"availability\.params\.path: required key"):
        scenario_with(scenario_dict, "trace", {})


# -------------------------------------------------------- physical availability
class DeadProxy(InProcessClientProxy):
    """A client whose node is gone: every instruction times out."""

    def fit(self, ins, timeout, group_id):
        raise TimeoutError(f"no reply within {timeout} s")


def connected_oracle(**kwargs) -> ConnectedClientManager:
    oracle = ConnectedClientManager(3, seed=0, wait_timeout=5, **kwargs)
    for pid in range(3):
        cls = DeadProxy if pid == 2 else InProcessClientProxy
        oracle.register(cls(f"node{pid}", client_fn, node_context(pid, 3, {})))
    return oracle


def fit_all(proxies) -> list[int]:
    """Partition ids of the relayed proxies whose fit succeeded."""
    ok = []
    for proxy in proxies:
        try:
            proxy.fit(FitIns(parameters=Parameters([], ""), config={}), 1.0, None)
        except TimeoutError:
            continue
        ok.append(partition_of(proxy))
    return sorted(ok)


def test_connected_oracle_leaves_out_failed_clients_until_they_reconnect() -> None:
    oracle = connected_oracle(round_timeout=1.0)
    assert oracle.round_timeout == 1.0
    first = oracle.sample(num_clients=1)  # the number asked for is ignored
    assert oracle.last_active == [0, 1, 2]
    assert fit_all(first) == [0, 1]  # node 2 timed out: recorded by the oracle
    assert oracle.failed == {"node2": 1}
    for _ in range(3):
        assert sorted(partition_of(p) for p in oracle.sample(1)) == [0, 1]
        assert oracle.connected_partitions() == [0, 1]
    # Partition 2 reconnects (a restarted SuperNode: a new node id) and is relayed again.
    oracle.register(InProcessClientProxy("node2-restarted", client_fn, node_context(2, 3, {})))
    assert fit_all(oracle.sample(1)) == [0, 1, 2]
    # A node that leaves (Flower unregisters it) is not waited for.
    oracle.unregister(first[0])
    assert oracle.sample(1) and oracle.last_active == [1, 2]


def test_connected_oracle_asks_a_failed_client_again_after_retry_after_rounds() -> None:
    oracle = connected_oracle(retry_after=2)
    assert fit_all(oracle.sample(1)) == [0, 1]
    assert [oracle.sample(1) and oracle.last_active for _ in range(2)] == [[0, 1]] * 2
    assert fit_all(oracle.sample(1)) == [0, 1]  # round 4: asked again, fails again
    assert oracle.last_active == [0, 1, 2] and oracle.failed == {"node2": 4}


def test_connected_oracle_samples_uniformly_among_connected() -> None:
    draws = np.array([connected_sample([0, 2, 5, 7], 2, 3, r) for r in range(1, 2001)])
    assert all(len(set(d)) == 2 for d in draws)
    freq = np.array([(draws == k).any(axis=1).mean() for k in (0, 2, 5, 7)])
    np.testing.assert_allclose(freq, 0.5, atol=5 * np.sqrt(0.25 / 2000))
    assert connected_sample([4, 1], 2, 3, 1) == [1, 4]
    assert connected_sample([4, 1], None, 3, 1) == [1, 4]
    assert draws.tolist() == [connected_sample([0, 2, 5, 7], 2, 3, r) for r in range(1, 2001)]


def test_connected_in_process_run_trains_everybody(tiny_scenario: Scenario, tmp_path) -> None:
    s = tiny_scenario.with_overrides(
        {"availability.oracle": "connected", "availability.params": {}, "rounds": 2}
    )
    rows = run_in_process(s, 0, tmp_path).read_metrics()
    assert [r["relayed"] for r in rows if r["round"]] == [[0, 1, 2]] * 2
    assert [r["failed"] for r in rows if r["round"]] == [[]] * 2
