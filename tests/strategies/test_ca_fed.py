"""CA-Fed (Alg. 1, eq. 3 and 16-20) and its baselines (Sec. V-A c): the greedy `get` on
hand-worked examples and against the paper's naive re-evaluation, kappa_bar^2 -> infinity
gives Unbiased, the baselines' weights by hand, the CA-Fed client's loss report, and
the Strategy in-process on a tiny LEAF Synthetic scenario, whose step is eq. 3."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from flwr.common import parameters_to_ndarrays
from torch.nn import functional as F

from fedram_flwr.clients import CAFedClient, ERMClient
from fedram_flwr.clients.ca_fed import local_optimum_loss
from fedram_flwr.config import ScenarioError
from fedram_flwr.data import dirichlet_partition, leaf_synthetic
from fedram_flwr.engines import InProcessClientProxy, node_context, run_in_process
from fedram_flwr.experiment import Experiment
from fedram_flwr.models import build_model, get_weights, set_weights
from fedram_flwr.protocol import LOCAL_OPTIMUM, RECEIVED_LOSS, REPORT_LOCAL_OPTIMUM
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.strategies import CAFed
from fedram_flwr.strategies.availability_baselines import (
    adafed_weights,
    f3ast_weights,
    more_available_weights,
)
from fedram_flwr.strategies.availability_estimates import LossEstimates, filter_losses
from fedram_flwr.strategies.ca_fed import (
    biased_importance,
    ca_fed_weights,
    estimated_error,
    get,
    unbiased_weights,
)
from fedram_flwr.training import client_rng

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


# ---------------------------------------------------------- baselines by hand
def test_baseline_weights_by_hand() -> None:
    alpha, pi = np.array([0.5, 0.3, 0.2]), np.array([0.5, 0.6, 0.25])
    active = np.array([True, False, True])
    unbiased = unbiased_weights(alpha, pi)
    np.testing.assert_allclose(unbiased, [1.0, 0.5, 0.8])
    # Unbiased: the biased importance pi (~*) q of eq. 4 is alpha itself.
    np.testing.assert_allclose(biased_importance(pi, unbiased), alpha)
    # AdaFed: the active clients' 1.0 and 0.8, normalised by their sum 1.8.
    np.testing.assert_allclose(adafed_weights(alpha, pi, active), [1 / 1.8, 0.0, 0.8 / 1.8])
    np.testing.assert_allclose(more_available_weights(alpha, pi, 0.5), [1.0, 0.5, 0.0])
    # F3AST with one slot: the active client with the largest alpha / pi (1.0 > 0.8).
    np.testing.assert_allclose(f3ast_weights(alpha, pi, active, 1), [1.0, 0.0, 0.0])
    np.testing.assert_allclose(f3ast_weights(alpha, pi, active, 5), [1.0, 0.0, 0.8])


def test_loss_estimates_eq17_and_running_minimum() -> None:
    active = np.array([True, True, False])
    est = LossEstimates.start(active, np.array([2.0, 1.0, np.nan]))
    assert est.f_hat.tolist() == [2.0, 1.0, 1.5]  # the unseen client: the active mean
    assert est.gap.tolist() == [0.0, 0.0, 0.0]
    est = est.observe(np.array([True, False, True]), np.array([1.0, np.nan, 3.0]), beta=0.5)
    # eq. 17: active entries move half-way to the report, the others stay.
    assert est.f_hat.tolist() == [1.5, 1.0, 2.25]
    assert est.f_star.tolist() == [1.5, 1.0, 1.5]
    assert est.gap.tolist() == [0.0, 0.0, 0.75]
    updated = filter_losses(np.ones(2), np.array([True, False]), np.array([3.0, 9.0]), 1.0)
    assert updated.tolist() == [3.0, 1.0]  # beta = 1 keeps the last report


def test_local_optimum_floors_replace_the_running_minimum() -> None:
    active = np.array([True, False, True])
    est = LossEstimates.start(active, np.array([2.0, np.nan, 1.0]), np.array([0.5, 9.0, 0.2]))
    # Reporters take their own F_k*; the unseen client the means of the reports (as F_hat).
    assert est.f_star.tolist() == pytest.approx([0.5, 0.35, 0.2])
    assert est.gap.tolist() == pytest.approx([1.5, 1.15, 0.8])
    est = est.observe(np.array([False, True, True]), np.array([0, 3.0, 0.7]), 1.0, [0, 1.0, 0.2])
    assert est.f_hat.tolist() == [2.0, 3.0, 0.7]
    assert est.gap.tolist() == pytest.approx([1.5, 2.0, 0.5])


def test_running_minimum_gap_favours_the_rare_reporter() -> None:
    """The mechanism behind our Synthetic runs' exclusions (see LossEstimates): at a fixed
    model both clients' one-batch losses are 1 + noise, so their true gaps are equal. The
    client that reports every round ends with F_hat* near the noise's minimum and a gap
    > 0; the one that reports in 3 rounds of decreasing loss keeps a gap of 0. CA-Fed with
    the running minimum then excludes the frequent reporter; with local-optimum floors
    (equal F_k*) it excludes neither."""
    rng = np.random.default_rng(0)
    t = 200
    noise = 1.0 + 0.2 * rng.standard_normal(t)
    rare_rounds = {50: 1.6, 120: 1.3, 199: 1.0}  # the model improves between its reports
    est = LossEstimates.start(np.array([True, False]), np.array([noise[0], np.nan]))
    for s in range(1, t):
        active = np.array([True, s in rare_rounds])
        est = est.observe(active, np.array([noise[s], rare_rounds.get(s, np.nan)]), 1.0)
    assert est.gap[0] > 0.3 and est.gap[1] == 0.0
    alpha, pi, lam = np.array([0.5, 0.5]), np.array([0.9, 0.1]), np.array([0.0, 0.9])
    assert ca_fed_weights(alpha, pi, lam, est.gap, 0.1, 0.0).tolist() == [0.0, 5.0]
    equal = np.full(2, 0.4)  # local-optimum floors: F_hat - F_k* equal for both
    assert ca_fed_weights(alpha, pi, lam, equal, 0.1, 0.0).tolist() == pytest.approx([5 / 9, 5])


# ------------------------------------------------------------------------ data
def test_leaf_synthetic_and_dirichlet_partition() -> None:
    xs, ys = leaf_synthetic(5, 0.5, 0.5, 7, 4, np.random.default_rng(0))
    again = leaf_synthetic(5, 0.5, 0.5, 7, 4, np.random.default_rng(0))
    assert [x.shape[1] for x in xs] == [7] * 5 and all(len(x) >= 50 for x in xs)
    assert all(np.array_equal(a, b) for a, b in zip(ys, again[1]))
    assert all(y.min() >= 0 and y.max() < 4 for y in ys)
    labels = np.repeat(np.arange(4), 50)
    parts = dirichlet_partition(labels, 6, 0.5, np.random.default_rng(1))
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(labels.size))
    assert min(p.size for p in parts) > 0


def test_data_config_for_synthetic_and_dirichlet(
    scenario_dict: dict[str, Any], ca_fed_dict
) -> None:
    raw = ca_fed_dict()
    exp = Experiment(scenario_from_dict(raw), 0)
    assert len(exp.data.client_y) == 6 and exp.data.input_shape == (5,)
    assert exp.data.test_y.size > 0 and exp.data.rare_classes == ()
    raw["data"]["partition"] = "dirichlet"
    with pytest.raises(ScenarioError, match="synthetic generates"):
        scenario_from_dict(raw)
    gaussian = scenario_dict  # the tiny Gaussian scenario of conftest.py
    gaussian["data"].pop("client_classes")
    gaussian["data"].update(partition="dirichlet", dirichlet_concentration=0.3)
    data = Experiment(scenario_from_dict(gaussian), 0).data
    assert sum(len(y) for y in data.client_y) == 3 * 40  # every sample, once
    assert data.client_classes == tuple(tuple(np.unique(y).tolist()) for y in data.client_y)


# ----------------------------------------------------- client and strategy
@pytest.fixture
def tiny(ca_fed_dict):
    """The tiny CA-Fed scenario of conftest.py, ``algorithm`` replacing its algorithm."""

    def build(**algorithm: Any):
        raw = ca_fed_dict()
        raw["algorithm"].update(algorithm)
        return scenario_from_dict(raw)

    return build


def test_ca_fed_client_reports_the_first_batch_loss_and_trains_like_erm(tiny) -> None:
    exp = Experiment(tiny(), 0)
    theta = get_weights(exp.new_model())
    config = {"server-round": 2}
    ca_arrays, n, metrics = exp.client(3).fit(theta, config)
    assert isinstance(exp.client(3), CAFedClient)
    erm = ERMClient(
        partition_id=3,
        model=exp.new_model(),
        x=exp.data.client_x[3],
        y=exp.data.client_y[3],
        lr=0.1,
        local_epochs=1,
        batch_size=16,
        seed=0,
        local_steps=2,
        weight_decay=0.01,
    )
    erm_arrays, _, _ = erm.fit(theta, config)
    assert all(np.array_equal(a, b) for a, b in zip(ca_arrays, erm_arrays))  # bitwise
    # F_k^(t): mean cross-entropy at the received model on the first batch B_{t,0}.
    first = client_rng(0, 2, 3).permutation(n)[:16]
    model = build_model("logreg", (5,), 3, seed=0)
    set_weights(model, theta)
    x, y = exp.data.client_x[3][first], exp.data.client_y[3][first]
    with torch.no_grad():
        expected = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).item()
    assert metrics[RECEIVED_LOSS] == pytest.approx(expected, rel=1e-6)


def test_ca_fed_client_reports_its_local_optimum_once(tiny) -> None:
    exp = Experiment(tiny(), 0)
    theta = get_weights(exp.new_model())
    x, y = exp.data.client_x[3], exp.data.client_y[3]
    client = exp.client(3)
    plain, _, metrics = client.fit(theta, {"server-round": 1})
    assert LOCAL_OPTIMUM not in metrics
    asked = {"server-round": 1, REPORT_LOCAL_OPTIMUM: True}
    arrays, _, metrics = client.fit(theta, asked)
    assert all(np.array_equal(a, b) for a, b in zip(arrays, plain))  # training unchanged
    floor = metrics[LOCAL_OPTIMUM]

    def ridge_objective(weights) -> float:
        model = build_model("logreg", (5,), 3, seed=0)
        set_weights(model, weights)
        with torch.no_grad():
            ce = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).item()
        return ce + 0.005 * sum(float((w.astype(np.float64) ** 2).sum()) for w in weights)

    # The minimiser of CE + (0.01 / 2)||w||^2 beats the received and the trained models.
    model = exp.new_model()
    assert local_optimum_loss(model, x, y, 0.01) == pytest.approx(floor, abs=1e-6)
    optimum = ridge_objective(get_weights(model))
    assert optimum < ridge_objective(theta) and optimum < ridge_objective(arrays)
    # Computed once: later rounds read it from Context.state.
    client.state[LOCAL_OPTIMUM][LOCAL_OPTIMUM] = -1.0
    assert client.fit(theta, {**asked, "server-round": 2})[2][LOCAL_OPTIMUM] == -1.0


def drive_round(strategy: CAFed, manager, server_round: int, params):
    """One legacy Flower round by hand: configure_fit, the clients' fit, aggregate_fit."""
    pairs = strategy.configure_fit(server_round, params, manager)
    results = [(proxy, proxy.fit(ins, None, None)) for proxy, ins in pairs]
    return strategy.aggregate_fit(server_round, results, [])


def test_strategy_step_is_eq3_by_hand(tiny) -> None:
    exp = Experiment(tiny(), 0)
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
def test_family_runs_in_process(tmp_path, tiny, algorithm: dict[str, Any]) -> None:
    scenario = tiny(**algorithm)
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
