"""RC-FL (Lemmas 1-2), rFedFair's strategy, AFL and q-FFL: closed forms and small
hand-checked rounds (HCVaR and the local objective: tests/test_objectives.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from flwr.common import (
    Code,
    FitRes,
    GetPropertiesRes,
    Status,
    ndarrays_to_parameters,
    parameters_to_ndarrays,
)
from flwr.server.client_manager import SimpleClientManager
from flwr.server.client_proxy import ClientProxy
from scipy.optimize import linprog, minimize_scalar

from fedram_flwr.strategies.afl import AFL, afl_lambda_step, project_simplex
from fedram_flwr.strategies.qffl import QFFL, qffl_terms
from fedram_flwr.strategies.rc_fl import (
    RFedFair,
    hcvar,
    rcfl_gradient_weights,
    softplus_mu,
)
from fedram_flwr.strategies.rc_fl_math import draw_with_replacement, rcfl_dual, rcfl_smoothed
from tests.helpers import random_rcfl_instance


def primal_lp(losses, p, alpha) -> float:
    """sup over Q_alpha of sum q_i p_i f_i (eq. 1) by linear programming."""
    res = linprog(
        -(p * losses), A_eq=[p], b_eq=[1.0], bounds=list(zip(np.zeros_like(p), 1 / alpha))
    )
    return -res.fun


@pytest.mark.parametrize("n", [1, 2, 5, 30])
def test_lemma1_dual_infimum_equals_the_sorted_primal(n: int) -> None:
    rng = np.random.default_rng(n)
    for _ in range(20):
        losses, p, alpha = random_rcfl_instance(rng, n)
        primal = hcvar(losses, p, alpha)
        assert primal == pytest.approx(primal_lp(losses, p, alpha), rel=1e-7, abs=1e-9)
        # The dual is convex piecewise linear in eta: its infimum is at a breakpoint, and
        # a numerical minimiser over an interval holding them finds the same value.
        assert rcfl_dual(losses, losses, p, alpha).min() == pytest.approx(primal, rel=1e-12)
        res = minimize_scalar(
            lambda e: float(rcfl_dual(e, losses, p, alpha)),
            bounds=(-1.0, losses.max() + 1),
            method="bounded",
            options={"xatol": 1e-10},
        )
        assert res.fun == pytest.approx(primal, rel=1e-6)
        assert res.fun >= primal - 1e-12  # weak duality: never below the primal


def test_lemma2_smoothing_bounds_and_stability() -> None:
    rng = np.random.default_rng(7)
    for mu in (1e-4, 0.01, 1.0):
        losses, p, alpha = random_rcfl_instance(rng, 6)
        tau = float(np.sum(p / alpha))
        eta = np.linspace(-2.0, losses.max() + 2.0, 401)
        smooth, exact = rcfl_smoothed(eta, losses, p, alpha, mu), rcfl_dual(eta, losses, p, alpha)
        assert np.all(exact <= smooth + 1e-12)
        assert np.all(smooth <= exact + mu * tau + 1e-12)
    # phi_mu at |x / mu| far beyond exp's range: finite, and equal to max(x, 0) there.
    x = np.array([-1e6, -50.0, 0.0, 50.0, 1e6])
    assert np.all(np.isfinite(softplus_mu(x, 1e-4)))
    np.testing.assert_allclose(softplus_mu(x, 1e-4), np.maximum(x, 0.0), atol=1e-4 * np.log(2))
    assert softplus_mu(0.0, 0.3) == pytest.approx(0.3 * np.log(2))
    assert rcfl_gradient_weights(1e6, 0.0, 0.5, 1e-4) == (2.0, -1.0)
    assert rcfl_gradient_weights(-1e6, 0.0, 0.5, 1e-4) == (0.0, 1.0)


def test_draws_with_replacement_follow_p() -> None:
    p = np.array([0.6, 0.3, 0.1])
    counts = np.zeros(3)
    for r in range(4000):
        for k, c in draw_with_replacement(p, 5, seed=1, server_round=r).items():
            counts[k] += c
    np.testing.assert_allclose(counts / counts.sum(), p, atol=0.01)
    assert draw_with_replacement(p, 5, 1, 9) == draw_with_replacement(p, 5, 1, 9)


def test_simplex_projection_and_lambda_step() -> None:
    v = np.array([0.5, 0.9, -0.2])
    x = project_simplex(v)
    assert x.sum() == pytest.approx(1.0) and np.all(x >= 0)
    np.testing.assert_allclose(x, [0.3, 0.7, 0.0])  # theta = 0.2
    # (1/3, 1/3, 1/3) + 0.3 (1, 0, 0) sums to 1.3: every entry drops by theta = 0.1.
    lam = afl_lambda_step(np.full(3, 1 / 3), {0: 1.0, 2: 0.0}, lr=0.3)
    np.testing.assert_allclose(lam, [1 / 3 + 0.2, 1 / 3 - 0.1, 1 / 3 - 0.1])


# --------------------------------------------------------------- strategies, by hand
class FakeProxy(ClientProxy):
    def __init__(self, pid: int, m: int) -> None:
        super().__init__(f"node-{pid}")
        self.pid, self.m = pid, m

    def get_properties(self, ins, timeout, group_id):
        return GetPropertiesRes(
            Status(Code.OK, ""), {"partition-id": self.pid, "num-examples": self.m}
        )

    get_parameters = fit = evaluate = reconnect = None  # type: ignore[assignment]


def fit_res(pid: int, arrays, m: int, **metrics) -> tuple[ClientProxy, FitRes]:
    res = FitRes(
        Status(Code.OK, ""), ndarrays_to_parameters(arrays), m, {"partition-id": pid, **metrics}
    )
    return FakeProxy(pid, m), res


def manager_with(sizes: list[int]) -> SimpleClientManager:
    cm = SimpleClientManager()
    for pid, m in enumerate(sizes):
        cm.register(FakeProxy(pid, m))
    return cm


def test_rfedfair_full_participation_is_the_p_weighted_average() -> None:
    sizes = [10, 30, 60]
    s = RFedFair(
        initial_arrays=[np.zeros(2, np.float32)], alpha=[0.5, 0.5, 0.6], mu=0.1, lr_eta=0.01
    )
    params = s.initialize_parameters(manager_with(sizes))
    ins = s.configure_fit(1, params, manager_with(sizes))
    configs = sorted((i.config["rcfl-alpha"], i.config["rcfl-p"]) for _, i in ins)
    assert configs == [(0.5, 0.1), (0.5, 0.3), (0.6, 0.6)]
    results = [
        fit_res(k, [np.full(2, float(k), np.float32), np.array([k + 1.0])], m)
        for k, m in enumerate(sizes)
    ]
    new, metrics = s.aggregate_fit(1, results[::-1], [])
    omega, eta = parameters_to_ndarrays(new)
    np.testing.assert_allclose(omega, 0.3 + 2 * 0.6)
    assert metrics["eta"] == pytest.approx(0.1 + 0.6 + 1.8)
    assert s.core.averaged_omega(s.state)[0].tolist() == [0.0, 0.0]  # omega_0 only so far


def test_rfedfair_partial_participation_counts_repeated_draws() -> None:
    sizes = [10, 30, 60]
    s = RFedFair(
        initial_arrays=[np.zeros(1, np.float32)],
        alpha=0.6,
        clients_per_round=4,
        seed=5,
        lr_eta=0.01,
    )
    params = s.initialize_parameters(None)
    ins = s.configure_fit(3, params, manager_with(sizes))
    drawn = draw_with_replacement(np.array(sizes, float), 4, 5, 3)
    assert s.state.multiplicity == drawn and len(ins) == len(drawn)
    results = [fit_res(k, [np.array([float(k)], np.float32), np.zeros(1)], sizes[k]) for k in drawn]
    omega, _ = parameters_to_ndarrays(s.aggregate_fit(3, results, [])[0])
    assert omega[0] == pytest.approx(sum(k * c for k, c in drawn.items()) / 4)


def test_rfedfair_refuses_alpha_below_p() -> None:
    s = RFedFair(initial_arrays=[np.zeros(1, np.float32)], alpha=[0.5, 0.5, 0.5], lr_eta=0.01)
    with pytest.raises(ValueError, match="client 2: 0.5 not in"):
        s.configure_fit(1, s.initialize_parameters(None), manager_with([10, 30, 60]))


def test_afl_weights_models_by_lambda_then_ascends_on_losses() -> None:
    s = AFL(num_clients=2, lr_lambda=0.5, initial_arrays=[np.zeros(1)])
    s.state = replace(s.state, lam=np.array([0.25, 0.75]))
    results = [
        fit_res(0, [np.array([4.0], np.float32)], 10, **{"received-loss": 1.0}),
        fit_res(1, [np.array([0.0], np.float32)], 90, **{"received-loss": 0.2}),
    ]
    new, _ = s.aggregate_fit(1, results, [])
    assert parameters_to_ndarrays(new)[0][0] == pytest.approx(1.0)
    # lambda + 0.5 (1.0, 0.2) = (0.75, 0.85), projected: theta = 0.3 -> (0.45, 0.55).
    np.testing.assert_allclose(s.state.lam, [0.45, 0.55])


def test_qffl_reweights_towards_the_worse_client_and_q0_is_an_average() -> None:
    w = [np.zeros(2, np.float32)]
    models = {0: [np.array([1.0, 0.0], np.float32)], 1: [np.array([0.0, 1.0], np.float32)]}
    losses = {0: 2.0, 1: 0.5}
    for q in (0.0, 2.0):
        s = QFFL(q_param=q, qffl_learning_rate=0.1, initial_arrays=w)
        s.pre_weights = w
        results = [fit_res(k, models[k], 10, **{"received-loss": losses[k]}) for k in (0, 1)]
        new = parameters_to_ndarrays(s.aggregate_fit(1, results, [])[0])[0]
        terms = [qffl_terms(w, models[k], losses[k], q, 0.1) for k in (0, 1)]
        expected = -sum(d[0] for d, _ in terms) / sum(h for _, h in terms)
        np.testing.assert_allclose(new, expected, rtol=1e-6)
        if q == 0.0:
            assert new[0] == pytest.approx(new[1])  # equal weights: no re-weighting
        else:
            assert new[0] > 10 * new[1]  # the client with the larger loss dominates
