"""CA-Fed (Alg. 1, eq. 3 and 16-20) and its baselines (Sec. V-A c): the greedy `get` on
hand-worked examples and against the paper's naive re-evaluation, kappa_bar^2 -> infinity
gives Unbiased, and the Strategy in-process on a tiny LEAF Synthetic scenario, whose
step is eq. 3 (the client: tests/clients/test_ca_fed.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flwr.common import parameters_to_ndarrays

from fedram_flwr.engines import InProcessClientProxy, node_context, run_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.scenario.config import ScenarioError
from fedram_flwr.strategies import CAFed
from fedram_flwr.strategies.ca_fed_math import (
    ca_fed_weights,
    estimated_error,
    get,
    unbiased_weights,
)

# Three clients: alpha = (0.1, 0.1, 0.8), F_hat - F_hat* = (0.25, 2, 0.1), so Gamma' = 2.
ALPHA = np.array([0.1, 0.1, 0.8])
GAP = np.array([0.25, 2.0, 0.1])
PI = np.array([0.2, 0.5, 0.8])
LAM = np.array([0.9, 0.5, 0.0])


# ------------------------------------------------------------------ get by hand
def test_get_two_passes_by_hand() -> None:
    """kappa2 = 0.01: 4 kappa2 Gamma' = 0.08, eps(I) = A / S + 0.08 (1 - S)^2 with
    S = alpha(I), A = sum_I alpha gap; all in: A = 0.025 + 0.2 + 0.08 = 0.305, eps = 0.305.

    Pass 1, descending lambda (0, 1, 2):
      drop 0: 0.28 / 0.9 + 0.08 * 0.01 = 0.3119 > 0.305       keep
      drop 1: 0.105 / 0.9 + 0.0008     = 0.11747 < 0.305      exclude
      drop 2: 0.025 / 0.1 + 0.08 * 0.81 = 0.3148 > 0.11747    keep
    Pass 2, ascending pi (0, 1, 2):
      drop 0: 0.08 / 0.8 + 0.08 * 0.04 = 0.1032 < 0.11747     exclude (gain 0.0143)
      then only client 2 is left: never excluded.
    """
    kappa2 = 0.01
    first = get(np.ones(3, bool), np.array([0, 1, 2]), ALPHA, GAP, kappa2, 0.0)
    assert first.tolist() == [True, False, True]
    second = get(first, np.array([0, 1, 2]), ALPHA, GAP, kappa2, 0.0)
    assert second.tolist() == [False, False, True]
    # q = alpha / pi on the survivors (Alg. 1 lines 5-7): 0.8 / 0.8.
    assert ca_fed_weights(ALPHA, PI, LAM, GAP, kappa2, 0.0).tolist() == [0.0, 0.0, 1.0]
    # tau = 0.02 > 0.0143: pass 2 keeps client 0, q_0 = 0.1 / 0.2.
    assert ca_fed_weights(ALPHA, PI, LAM, GAP, kappa2, 0.02).tolist() == [0.5, 0.0, 1.0]
    # The running objective equals eq. 20 re-evaluated: eps(I = {2}) = 0.1 + 0.08 * 0.04.
    q = ca_fed_weights(ALPHA, PI, LAM, GAP, kappa2, 0.0)
    assert estimated_error(q, ALPHA, GAP, PI, kappa2) == pytest.approx(0.1 + 0.08 * 0.04)


def test_get_keeps_everyone_on_ties_and_never_empties() -> None:
    # Round 1: F_hat* = F_hat, every gap 0 and eps = 0 whatever q: nobody is excluded.
    assert ca_fed_weights(ALPHA, PI, LAM, np.zeros(3), 1.0, 0.0).tolist() == [0.5, 0.2, 1.0]
    # Without a bias term every drop of the largest gap pays, but one client stays.
    q = ca_fed_weights(ALPHA, PI, LAM, np.array([3.0, 2.0, 1.0]), 0.0, 0.0)
    assert np.count_nonzero(q) == 1


def test_ties_in_lambda_visit_the_less_available_first() -> None:
    """The paper's population: every correlated client has lambda = 0.9 exactly. Two such
    clients with equal alpha and gap; with kappa2 = 0.5 (4 kappa2 Gamma' = 2) dropping one
    pays (eps 0.5 -> 1/3 + 2/16), dropping both does not (-> 2/4). Pass 1 must exclude
    the less available one whatever the ids' order."""
    alpha = np.array([0.25, 0.25, 0.5])
    gap = np.array([1.0, 1.0, 0.0])
    lam = np.array([0.9, 0.9, 0.0])
    for pi in ([0.9, 0.1, 0.5], [0.1, 0.9, 0.5]):
        q = ca_fed_weights(alpha, np.array(pi), lam, gap, 0.5, 0.0)
        rare = int(np.argmin(pi[:2]))
        assert q[rare] == 0.0 and q[1 - rare] > 0 and q[2] > 0


def naive_get(
    q: np.ndarray, order: np.ndarray, alpha, gap, pi, kappa2: float, tau: float
) -> np.ndarray:
    """Alg. 1 lines 13-22 as printed: re-evaluate eq. 20 for every candidate (with the
    same two guards as :func:`get`)."""
    q = q.copy()
    eps = estimated_error(q, alpha, gap, pi, kappa2)
    for k in order:
        if q[k] == 0 or np.count_nonzero(q) == 1:
            continue
        q_plus = q.copy()
        q_plus[k] = 0.0
        eps_plus = estimated_error(q_plus, alpha, gap, pi, kappa2)
        if eps_plus < eps and eps - eps_plus >= tau:
            q, eps = q_plus, eps_plus
    return q


@pytest.mark.parametrize("seed", range(8))
def test_fast_get_equals_the_naive_pseudo_code(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    alpha = rng.dirichlet(np.ones(n))
    pi = rng.uniform(0.05, 0.95, n)
    lam = rng.uniform(-0.5, 0.95, n)
    gap = rng.exponential(size=n) * (rng.random(n) < 0.8)
    kappa2 = 10.0 ** rng.uniform(-3, 1)
    tau = [0.0, 1e-3][seed % 2]
    q = unbiased_weights(alpha, pi)
    q = naive_get(q, np.argsort(-np.abs(lam), kind="stable"), alpha, gap, pi, kappa2, tau)
    q = naive_get(q, np.argsort(pi, kind="stable"), alpha, gap, pi, kappa2, tau)
    fast = ca_fed_weights(alpha, pi, lam, gap, kappa2, tau)
    np.testing.assert_array_equal(fast, q)
    assert 0 < np.count_nonzero(fast) < n  # the example does exclude someone


@pytest.mark.parametrize("seed", range(4))
def test_large_kappa2_is_unbiased(seed: int) -> None:
    """kappa2 -> infinity: any exclusion raises the bias term by at least
    4 kappa2 Gamma' alpha_k^2, which no optimisation gain matches (Sec. IV-C)."""
    rng = np.random.default_rng(seed)
    alpha = rng.dirichlet(np.ones(30))
    pi, lam, gap = rng.uniform(0.05, 0.95, 30), rng.uniform(0, 0.95, 30), rng.exponential(size=30)
    assert np.count_nonzero(ca_fed_weights(alpha, pi, lam, gap, 1e-3, 0.0) == 0) > 0
    np.testing.assert_array_equal(
        ca_fed_weights(alpha, pi, lam, gap, 1e12, 0.0), unbiased_weights(alpha, pi)
    )


# ------------------------------------------------------------------ strategy


def drive_round(strategy: CAFed, manager, server_round: int, params):
    """One legacy Flower round by hand: configure_fit, the clients' fit, aggregate_fit."""
    pairs = strategy.configure_fit(server_round, params, manager)
    results = [(proxy, proxy.fit(ins, None, None)) for proxy, ins in pairs]
    return strategy.aggregate_fit(server_round, results, [])


def test_strategy_step_is_eq3_by_hand(tiny_ca_fed) -> None:
    exp = Experiment(tiny_ca_fed(), 0)
    strategy = exp.strategy()
    assert isinstance(strategy, CAFed)
    manager = exp.client_manager()

    def client_fn(context):
        return exp.client(int(context.node_config["partition-id"])).to_client()

    for pid in range(6):
        manager.register(InProcessClientProxy(str(pid), client_fn, node_context(pid, 6, {})))
    sizes = np.array([len(y) for y in exp.data.client_y], dtype=float)
    alpha = sizes / sizes.sum()
    params = strategy.initialize_parameters(manager)
    w0 = parameters_to_ndarrays(params)

    # Round 1: every gap is 0, nobody is excluded; pi_hat = (1 + 1) / (1 + 2) = 2/3 for the
    # active clients, so q_k = 1.5 alpha_k, and eq. 3 with eta_bar = 0.5.
    new, metrics = drive_round(strategy, manager, 1, params)
    active = manager.last_active
    assert active and metrics["participants"] == len(active)
    w1 = parameters_to_ndarrays(new)
    for i in range(len(w0)):
        step = sum(
            1.5 * alpha[k] * (exp.client(k).fit(w0, {"server-round": 1})[0][i] - w0[i])
            for k in active
        )
        np.testing.assert_allclose(w1[i], w0[i] + 0.5 * step, rtol=1e-5, atol=1e-6)

    # Round 2 excludes clients (kappa2 = 1e-3); its q is Alg. 1's from the estimators,
    # and the step uses only the active clients with q_k > 0.
    new, metrics = drive_round(strategy, manager, 2, new)
    active2 = manager.last_active
    pi_hat, lam_hat = strategy.state.tracker.estimates()
    expected_q = ca_fed_weights(alpha, pi_hat, lam_hat, strategy.state.losses.gap, 1e-3, 0.0)
    np.testing.assert_array_equal(strategy.state.q, expected_q)
    taking_part = [k for k in active2 if strategy.state.q[k] > 0]
    assert metrics["participants"] == len(taking_part) < len(active2)
    w2 = parameters_to_ndarrays(new)
    for i in range(len(w1)):
        step = sum(
            strategy.state.q[k] * (exp.client(k).fit(w1, {"server-round": 2})[0][i] - w1[i])
            for k in taking_part
        )
        np.testing.assert_allclose(w2[i], w1[i] + 0.5 * step, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "ca-fed", "params": {"kappa2": 1.0, "availability": "oracle"}},
        {"name": "unbiased", "params": {}},
        {"name": "more-available", "params": {"availability": "oracle"}},
        {"name": "adafed", "params": {}},
        {"name": "f3ast", "params": {"clients_per_round": 2}},
    ],
)
def test_family_runs_in_process(tmp_path, tiny_ca_fed, algorithm: dict[str, Any]) -> None:
    scenario = tiny_ca_fed(**algorithm)
    out = run_in_process(scenario, 0, tmp_path)
    assert out.status() == "complete"
    rows = [r for r in out.read_metrics() if r["round"] > 0]
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert all(0 < r["fit-participants"] <= len(r["relayed"]) for r in rows if r["relayed"])
    if algorithm["name"] == "f3ast":
        assert all(r["fit-participants"] <= 2 for r in rows)
    if algorithm["name"] == "more-available":  # pi = 0.9, 0.9, 0.5, 0.5 only
        assert all(r["fit-participants"] == sum(k < 4 for k in r["relayed"]) for r in rows)


def test_oracle_informed_ca_fed_needs_a_markov_oracle(ca_fed_dict) -> None:
    raw = ca_fed_dict()
    raw["availability"] = {"oracle": "cyclic", "params": {"period": 4, "window": 2}}
    raw["algorithm"]["params"]["availability"] = "oracle"
    with pytest.raises(ScenarioError, match="algorithm.params.availability"):
        scenario_from_dict(raw)
    raw["algorithm"]["params"]["availability"] = "estimated"
    scenario_from_dict(raw)  # the estimators work with any oracle
