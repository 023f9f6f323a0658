"""FedAR (eq. 4-7) and the stale-update and participation baselines: inactivity
counters, weights psi, the contributing count N_t, the in-place update memory, MIFA's
running aggregate, FedVARP's correction, FedAU's interval estimates, and the reduction
of all of them to FedAvg when every client is always available."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from fedram_flwr.engines import run_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import PARTITION_ID
from fedram_flwr.registry import with_overrides
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.strategies import MIFA, FedAR, FedAU, FedAvgIS, FedAvgSampled, FedVARP
from fedram_flwr.strategies.fedar import fedar_direction, fedar_weights, g_convex, g_nonconvex
from fedram_flwr.strategies.fedau import FedAUState, fedau_update, fedau_weights
from fedram_flwr.strategies.participation import subsample
from fedram_flwr.strategies.reweighted import reweighted_step
from fedram_flwr.strategies.update_memory import fedvarp_direction, inactivity
from fedram_flwr.strategies.vector import flatten_into, unflatten

SHAPES = [(2, 3), (3,)]
DIM = 9


def arrays(vector: np.ndarray) -> list[np.ndarray]:
    like = [np.zeros(s, np.float32) for s in SHAPES]
    return unflatten(np.asarray(vector, np.float32), like)


def fit_res(pid: int, model: np.ndarray) -> tuple[None, FitRes]:
    res = FitRes(
        Status(Code.OK, ""), ndarrays_to_parameters(arrays(model)), 10, {PARTITION_ID: pid}
    )
    return None, res


def vector_of(parameters) -> np.ndarray:
    return flatten_into(parameters_to_ndarrays(parameters), np.empty(DIM, np.float32))


def make(cls, num_clients: int = 4, lr: float = 0.5, w0: float = 1.0, **kwargs):
    return cls(initial_arrays=arrays(np.full(DIM, w0)), num_clients=num_clients, lr=lr, **kwargs)


def fedar(num_clients: int = 4, rho: float = 0.1, **kwargs) -> FedAR:
    """FedAR over ``num_clients``; without ``t0``, g(t) = 1e9 + t / 4: nothing is cut."""
    return make(FedAR, num_clients, rho=rho, **{"t0": 1e9, **kwargs})


# ----------------------------------------------------------------- eq. (5), (6)
def test_inactivity_follows_eq5_on_a_hand_worked_sequence() -> None:
    # Clients 0..2; A(1) = {0, 1}, A(2) = {0}, A(3) = {}, A(4) = {2}, then 2 rounds skipped
    # by Flower (nobody available) and A(7) = {1}.
    tau = np.zeros(3, dtype=np.int64)
    expected = [[0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 0]]
    for active, want in zip([[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 1]], expected):
        tau = inactivity(tau, np.array(active, bool))
        assert tau.tolist() == want
    assert inactivity(tau, np.array([0, 1, 0], bool), elapsed=3).tolist() == [5, 0, 3]


def test_psi_on_hand_worked_taus() -> None:
    tau = np.array([0, 1, 3, 9, 10, 25])
    # g(t) = 10: tau >= 10 drops the update; else (tau + 1)^0.1.
    psi = fedar_weights(tau, 10.0, 0.1)
    np.testing.assert_allclose(psi, [1.0, 2**0.1, 4**0.1, 10**0.1, 0.0, 0.0], rtol=1e-15)
    # rho = 1: (tau + 1) capped at psi_max = 2.
    np.testing.assert_array_equal(fedar_weights(np.array([0, 1, 2, 7]), 100, 1.0), [1, 2, 2, 2])
    # rho = 0: every fresh-enough update weighs 1.
    np.testing.assert_array_equal(fedar_weights(tau, 9.5, 0.0), [1, 1, 1, 1, 0, 0])


def test_g_of_section_5() -> None:
    assert g_convex(12, t0=2.0, b=4.0) == 5.0
    assert g_nonconvex(3, t0=16.0, scale=0.5) == 2.0  # max(sqrt 3, sqrt 16) = 4
    assert g_nonconvex(100, t0=16.0, scale=0.5) == 5.0


def test_direction_counts_only_seen_contributing_clients() -> None:
    updates = np.array([[1.0, 2.0], [3.0, 4.0], [0.0, 0.0], [5.0, 6.0]], np.float32)
    psi = np.array([1.0, 2.0, 1.0, 0.0])  # client 3 too stale
    seen = np.array([True, True, False, True])  # client 2 never answered
    v, n_t = fedar_direction(updates, psi, seen)
    assert n_t == 2
    np.testing.assert_allclose(v, [(1 + 6) / 2, (2 + 8) / 2])
    assert fedar_direction(updates, psi, np.zeros(4, bool)) == (None, 0)


# ---------------------------------------------------------------- the strategy
def test_fedar_rounds_by_hand() -> None:
    """Round 1: only client 0 answers, so N_1 = 1 and w_2 is its model. Round 2: client 1
    answers, client 0 is one round stale (psi = 2^rho). Round 4 (round 3 skipped):
    client 0 is 3 rounds old, at g(4) = 2 + 4 / 4 = 3 it drops out (g(2) = 2.5)."""
    eta, rho = 0.5, 0.1
    s = fedar(rho=rho, lr=eta, g="convex", t0=2.0, b=4.0)
    w1 = np.ones(DIM, np.float32)
    m0 = w1 - 0.2 * np.arange(DIM, dtype=np.float32)
    params, metrics = s.aggregate_fit(1, [fit_res(0, m0)], [])
    np.testing.assert_allclose(vector_of(params), m0, rtol=1e-6)
    assert metrics["contributing"] == 1 and metrics["seen"] == 1

    g0 = (w1 - m0) / eta
    w2 = vector_of(params)
    m1 = w2 + 0.1
    params, metrics = s.aggregate_fit(2, [fit_res(1, m1)], [])
    g1 = (w2 - m1) / eta
    expected = w2 - eta / 2 * (2**rho * g0 + g1)
    np.testing.assert_allclose(vector_of(params), expected, rtol=1e-6)
    assert metrics["contributing"] == 2
    assert s.state.memory.tau.tolist() == [1, 0, 2, 2]  # eq. (5) counts unseen clients too

    w3 = vector_of(params)
    m2 = w3 * 0.5
    params, metrics = s.aggregate_fit(4, [fit_res(2, m2)], [])
    assert s.state.memory.tau.tolist() == [3, 2, 0, 4]
    g2 = (w3 - m2) / eta
    expected = w3 - eta / 2 * (3**rho * g1 + g2)  # client 0 excluded: tau 3 >= g = 3
    np.testing.assert_allclose(vector_of(params), expected, rtol=1e-6)
    assert metrics["contributing"] == 2 and metrics["seen"] == 3


def test_update_memory_is_one_buffer_written_in_place() -> None:
    s = fedar(num_clients=5)
    buf = s.state.memory.updates
    assert buf.shape == (5, DIM) and buf.dtype == np.float32
    address = buf.__array_interface__["data"][0]
    rng = np.random.default_rng(0)
    for t in range(1, 8):
        active = sorted(rng.choice(5, size=2, replace=False).tolist())
        before = buf.copy()
        models = [fit_res(i, rng.standard_normal(DIM)) for i in active]
        s.aggregate_fit(t, models, [])
        assert s.state.memory.updates is buf
        assert buf.__array_interface__["data"][0] == address
        idle = [i for i in range(5) if i not in active]
        np.testing.assert_array_equal(buf[idle], before[idle])  # eq. (4): unchanged rows


@pytest.mark.parametrize("cls", [FedAR, MIFA, FedVARP])
def test_a_round_allocates_vectors_not_the_memory(cls) -> None:
    """N x d = 200 x 5000 float32 (4 MB): a round with two clients allocates a few
    d-vectors (20-40 kB each), never an N x d temporary."""
    n, d = 200, 5000
    kwargs = {"rho": 0.1, "t0": 1e9} if cls is FedAR else {}
    s = cls(initial_arrays=[np.zeros(d, np.float32)], num_clients=n, lr=0.1, **kwargs)
    results = [
        (
            None,
            FitRes(
                Status(Code.OK, ""),
                ndarrays_to_parameters([np.ones(d, np.float32)]),
                1,
                {PARTITION_ID: i},
            ),
        )
        for i in (3, 150)
    ]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    s.aggregate_fit(1, results, [])
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    assert peak < 0.1 * s.state.memory.updates.nbytes


def test_mifa_running_aggregate_equals_direct_mean_of_stored_updates() -> None:
    n, eta = 6, 0.3
    s = make(MIFA, n, lr=eta)
    rng = np.random.default_rng(1)
    for t in range(1, 40):
        w = s.state.w.copy()
        active = np.flatnonzero(rng.random(n) < 0.4).tolist()
        s.aggregate_fit(t, [fit_res(i, w + rng.standard_normal(DIM)) for i in active], [])
        direct = s.state.memory.updates.astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(s.state.memory.total / n, direct, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(s.state.w, w - eta * direct, rtol=1e-5, atol=1e-5)


def test_fedvarp_direction_by_hand() -> None:
    # N = 4; memory before [1, 3, 0, 0] (sum 4); client 1's new update is 7 (S = {1}).
    v = fedvarp_direction(np.array([4.0]), np.array([8.0]), num_clients=4, num_active=1)
    assert v.tolist() == [4.0 / 4 + (7 - 3) / 1]
    s = make(FedVARP, 2, lr=1.0, w0=0.0)
    s.aggregate_fit(1, [fit_res(0, np.full(DIM, -2.0)), fit_res(1, np.full(DIM, -4.0))], [])
    # y = 0 before; G = (2, 4): v = 0 + (2 + 4) / 2 = 3, w = -3.
    np.testing.assert_allclose(s.state.w, -3.0)
    s.aggregate_fit(2, [fit_res(1, np.full(DIM, -3.0 - 8.0))], [])
    # y = (2, 4) before, mean 3; client 1 now 8: v = 3 + (8 - 4) / 1 = 7, w = -10.
    np.testing.assert_allclose(s.state.w, -10.0)


# ------------------------------------------------------- participation weights
def test_fedau_estimates_on_a_hand_worked_sequence() -> None:
    # One client, cut-off K = 3, participation 1 0 1 0 0 0 0 1 over rounds 1..8.
    # Intervals close at rounds 1 (length 1), 3 (2), 6 (cut at 3) and 8 (2).
    state = FedAUState.zeros(1)
    used = []
    for bit in [1, 0, 1, 0, 0, 0, 0, 1]:
        used.append(float(fedau_weights(state)[0]))
        state = fedau_update(state, np.array([bool(bit)]), cutoff=3)
    # The weight of round t is the mean of the intervals closed before t (1 before any).
    assert used == [1.0, 1.0, 1.0, 1.5, 1.5, 1.5, 2.0, 2.0]
    assert state.omega[0] == 2.0 and state.count[0] == 4 and state.run[0] == 0


def test_fedau_weights_approach_inverse_probability() -> None:
    p = np.array([1.0, 0.5, 0.2])
    rng = np.random.default_rng(3)
    state = FedAUState.zeros(3)
    for _ in range(4000):
        state = fedau_update(state, rng.random(3) < p, cutoff=1000)
    np.testing.assert_allclose(fedau_weights(state), 1 / p, rtol=0.1)


def test_reweighted_step_and_fedavg_is() -> None:
    w = np.zeros(DIM, np.float32)
    got = reweighted_step(w, [np.full(DIM, 2.0), np.full(DIM, 4.0)], [1.0, 5.0], num_clients=4)
    np.testing.assert_allclose(got, (1 * 2 + 5 * 4) / 4)
    s = make(FedAvgIS, 4, w0=0.0, known_p=[1.0, 0.5, 0.25, 0.2])
    s.aggregate_fit(1, [fit_res(1, np.full(DIM, 1.0)), fit_res(3, np.full(DIM, 2.0))], [])
    np.testing.assert_allclose(s.state.w, (2 * 1 + 5 * 2) / 4)
    with pytest.raises(ValueError, match="probabilities"):
        make(FedAvgIS, 2, known_p=[0.5, 0.0])


def test_fedavg_is_estimates_p_from_the_rounds_it_has_seen() -> None:
    # Beta(1, 1) prior: p_hat = (rounds available up to t + 1) / (t + 2), round t included.
    s = make(FedAvgIS, 2, w0=0.0)
    s.aggregate_fit(1, [fit_res(0, np.ones(DIM)), fit_res(1, np.ones(DIM))], [])
    # Round 1: p_hat = 2/3 for both, w = -(1/2) (3/2 + 3/2) (0 - 1) = 1.5.
    np.testing.assert_allclose(s.state.w, 1.5)
    s.aggregate_fit(4, [fit_res(1, np.full(DIM, 2.5))], [])  # rounds 2, 3: nobody
    # Round 4: client 1 seen twice in 4 rounds, p_hat = 3/6, omega = 2: w = 1.5 + 1.
    np.testing.assert_allclose(s.state.w, 2.5)
    assert s.state.estimator.tolist() == [1, 2]


def test_fedavg_is_reads_the_hidden_law_only_when_told(tiny_gaussian: Scenario) -> None:
    scenario = with_overrides(
        tiny_gaussian,
        {
            "availability": {"oracle": "bernoulli", "params": {"p": [1.0, 0.5, 0.25]}},
            "algorithm": {"name": "fedavg-is", "params": {}},
        },
    )
    assert Experiment(scenario, 0).strategy().core.known_p is None
    oracle = with_overrides(scenario, {"algorithm.params.availability": "oracle"})
    np.testing.assert_array_equal(Experiment(oracle, 0).strategy().core.known_p, [1.0, 0.5, 0.25])
    with pytest.raises(ScenarioError, match="algorithm.params.availability.*estimated"):
        with_overrides(scenario, {"algorithm.params.availability": "true"})


def test_subsample_is_seeded_and_bounded() -> None:
    assert subsample(3, 5, seed=0, server_round=1).tolist() == [0, 1, 2]
    a = subsample(80, 50, seed=7, server_round=4)
    assert a.size == 50 and np.all(np.diff(a) > 0)
    assert np.array_equal(a, subsample(80, 50, seed=7, server_round=4))
    assert not np.array_equal(a, subsample(80, 50, seed=7, server_round=5))


def test_fedavg_s_steps_to_the_mean_of_its_clients_models() -> None:
    s = make(FedAvgSampled, 5, w0=0.0, max_clients=2, seed=0)
    s.aggregate_fit(1, [fit_res(1, np.full(DIM, 1.0)), fit_res(4, np.full(DIM, 4.0))], [])
    np.testing.assert_allclose(s.state.w, 2.5)


def test_fedau_strategy_counts_skipped_rounds() -> None:
    s = make(FedAU, 2, cutoff=50, w0=0.0)
    s.aggregate_fit(1, [fit_res(0, np.ones(DIM))], [])
    s.aggregate_fit(4, [fit_res(0, np.ones(DIM))], [])  # rounds 2, 3: nobody
    assert s.state.estimator.count.tolist() == [2, 0]
    assert s.state.estimator.omega[0] == (1 + 3) / 2 and s.state.estimator.run.tolist() == [0, 4]


# ------------------------------------------- full availability: FedAvg exactly
def final_arrays(run_dir) -> list[np.ndarray]:
    with np.load(Path(run_dir.path) / "final_model.npz") as z:
        return [z[k] for k in sorted(z.files, key=lambda s: int(s.split("_")[1]))]


@pytest.fixture(scope="module")
def always_available(tmp_path_factory, tiny_gaussian: Scenario):
    """The tiny 3-client scenario (equal data sizes) with every client always available."""
    base = with_overrides(
        tiny_gaussian, {"availability": {"oracle": "bernoulli", "params": {"p": [1.0, 1.0, 1.0]}}}
    )
    cache: dict[str, list[np.ndarray]] = {}

    def run(name: str, params: dict | None = None) -> list[np.ndarray]:
        key = f"{name}{sorted((params or {}).items())}"
        if key not in cache:
            scenario = with_overrides(base, {"algorithm": {"name": name, "params": params or {}}})
            out = run_in_process(scenario, 0, tmp_path_factory.mktemp(name), label=name)
            cache[key] = final_arrays(out)
        return cache[key]

    return run


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("fedar", {}),
        ("mifa", {}),
        ("fedvarp", {}),
        ("fedstale", {"beta": 0.5}),
        ("fedavg-all", {}),
        ("fedawe", {}),
        ("fedavg-is", {"availability": "oracle"}),
        ("fedau", {}),
        ("fedavg-s", {"max_clients": 3}),
    ],
)
def test_every_client_available_gives_fedavg(always_available, name: str, params: dict) -> None:
    """tau = 0, psi = 1, N_t = N: eq. (7) is the mean of the local models. FedAR stores
    G = (w - w_i) / eta and steps by eta G, so it agrees to float32 rounding (the
    comparison allows 1e-6 relative plus 1e-6 absolute)."""
    fedavg = always_available("fedavg")
    got = always_available(name, params)
    assert [a.shape for a in got] == [a.shape for a in fedavg]
    for a, b in zip(got, fedavg):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_fewer_clients_a_round_is_not_fedavg(always_available) -> None:
    # The comparison above has teeth: training one client a round changes the model.
    fedavg = always_available("fedavg")
    one = always_available("fedavg-s", {"max_clients": 1})
    assert not np.allclose(one[0], fedavg[0], rtol=1e-3, atol=1e-3)
