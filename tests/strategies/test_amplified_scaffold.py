"""Amplified SCAFFOLD's server (Crawshaw and Liu, NeurIPS 2024; the authors'
``synthetic/train.py``): its pieces and first rounds by hand, its reduction to SCAFFOLD
(P = 1, gamma = 1), and on heterogeneous quadratics under cyclic participation, where it
reaches the optimum that FedAvg misses. The client is in tests/clients/test_scaffold.py."""

from __future__ import annotations

import copy

import numpy as np

from fedram_flwr.objectives import pooled_control_delta
from fedram_flwr.protocol import PARTITION_ID, PERIOD, ClientReply
from fedram_flwr.strategies.amplified_scaffold import (
    AmplifiedScaffoldCore,
    amplify,
    period_control_update,
    period_of,
)
from fedram_flwr.strategies.scaffold import ScaffoldCore
from tests.helpers import QUAD_A, QUAD_B, TINY_GAUSSIAN, scaffold_local_steps, scenario_error

X0 = [np.zeros(1, np.float32)]


def reply(pid: int, y: float, d: float) -> ClientReply:
    arrays = [np.array([y], np.float32), np.array([d], np.float32)]
    return ClientReply(pid, 10, {PARTITION_ID: pid}, lambda: [a.copy() for a in arrays])


def test_pieces_by_hand() -> None:
    assert [period_of(r, 3) for r in (1, 3, 4, 6, 7)] == [0, 0, 1, 1, 2]
    assert amplify(np.array([1.0]), np.array([3.0]), 1.5).tolist() == [4.0]
    c = period_control_update(np.array([1.0]), [np.array([3.0]), np.array([6.0])], 3)
    assert c.tolist() == [4.0]
    d = pooled_control_delta(np.array([1.0]), 2, np.array([4.0]), 1)  # (2 x 1 + 1 x 4) / 3
    assert d.tolist() == [2.0]


def test_first_rounds_by_hand() -> None:
    """N = 3, P = 2, gamma = 2. Round 1: x = mean(1, 3) = 2, c stays 0. Round 2 closes
    period 0: x = mean(4) = 4, amplified from x_0 = 0 to 8; c = (D_0 + D_1) / 3 with
    client 0's last D_0 = 0.25. Round 3 (period 1): x = 9. Round 4, nobody: the period
    still closes, x = 8 + 2 (9 - 8) = 10, c += D_2 / 3."""
    core = AmplifiedScaffoldCore(num_clients=3, lr=0.1, period=2, amplification=2.0)
    core = core.for_model(X0)
    s = core.init(X0)
    assert [core.fit_config(s, r)[PERIOD] for r in (1, 2, 3)] == [0, 0, 1]
    out = core.aggregate(s, 1, [reply(0, 1.0, 0.5), reply(1, 3.0, 1.0)], 1)
    s = out.state
    assert (s.x.tolist(), s.c.tolist(), out.diagnostics["amplified"]) == ([2.0], [0.0], 0)
    out = core.aggregate(s, 2, [reply(0, 4.0, 0.25)], 1)
    s = out.state
    assert s.x.tolist() == [8.0] and s.anchor.tolist() == [8.0] and s.period == 1
    np.testing.assert_allclose(s.c, [1.25 / 3], rtol=1e-6)
    assert out.diagnostics["amplified"] == 1 and dict(s.pending) == {}
    x_c = core.arrays(s)
    assert [a.tolist() for a in x_c] == [[8.0], [s.c[0]]]
    s = core.aggregate(s, 3, [reply(2, 9.0, 0.75)], 1).state
    assert s.x.tolist() == [9.0]
    out = core.aggregate(s, 4, [], 1)
    assert out.aggregated and out.state.x.tolist() == [10.0]
    np.testing.assert_allclose(out.state.c, [(1.25 + 0.75) / 3], rtol=1e-6)


def test_a_period_end_the_server_skipped_closes_at_the_next_aggregation() -> None:
    core = AmplifiedScaffoldCore(num_clients=2, lr=0.1, period=2, amplification=2.0)
    core = core.for_model(X0)
    s = core.aggregate(core.init(X0), 1, [reply(0, 1.0, 1.0)], 1).state
    s = core.aggregate(s, 3, [reply(1, 5.0, 0.0)], 2).state  # round 2 never aggregated
    assert s.period == 1 and s.anchor.tolist() == [2.0]  # 0 + 2 (1 - 0)
    assert s.x.tolist() == [5.0] and s.c.tolist() == [0.5] and dict(s.pending).keys() == {1}


def test_period_one_and_no_amplification_is_scaffold() -> None:
    """P = 1, gamma = 1: every round closes its period with c + (1/N) sum D_i and x the
    mean model: SCAFFOLD (eta_g = 1) round for round on the same replies, bit for bit."""
    rng = np.random.default_rng(0)
    amplified = AmplifiedScaffoldCore(num_clients=4, lr=0.1, period=1, amplification=1.0)
    scaffold = ScaffoldCore(num_clients=4, lr=0.1)
    amplified, scaffold = amplified.for_model(X0), scaffold.for_model(X0)
    a, s = amplified.init(X0), scaffold.init(X0)
    for r in range(1, 7):
        ids = sorted(rng.choice(4, size=2, replace=False))
        replies = [reply(int(i), *rng.standard_normal(2)) for i in ids]
        a = amplified.aggregate(a, r, replies, 1).state
        s = scaffold.aggregate(s, r, replies, 1).state
        assert a.x.tolist() == s.x.tolist() and a.c.tolist() == s.c.tolist()


def run_quadratics(period: int, gamma: float, correct: bool, rounds: int) -> np.ndarray:
    """The authors' ``train`` on the quadratic clients of tests.helpers (N = 3), cyclic
    participation with one client per round (client r mod 3 in round r), K = 5 local
    steps; the clients' period logic is the authors' (c_i <- mean gradient of the
    period), the server the core's."""
    n, k, lr = 3, 5, 0.02
    core = AmplifiedScaffoldCore(num_clients=n, lr=lr, period=period, amplification=gamma)
    x0 = [np.zeros(2, np.float32)]
    core = core.for_model(x0)
    state = core.init(x0)
    c_i, sums, steps = np.zeros((n, 2)), np.zeros((n, 2)), np.zeros(n)
    for r in range(1, rounds + 1):
        i = r % n
        c = state.c if correct else np.zeros(2)
        y, grads = scaffold_local_steps(
            i, state.x.astype(float), c_i[i] if correct else 0, c, k, lr
        )
        sums[i] += np.sum(grads, axis=0)
        steps[i] += k
        d = sums[i] / steps[i] - c_i[i] if correct else np.zeros(2)
        arrays = [y.astype(np.float32), d.astype(np.float32)]
        state = core.aggregate(state, r, [ClientReply(i, 1, {}, lambda a=arrays: a)], 1).state
        if r % period == 0 and correct:
            done = steps > 0
            c_i[done] = sums[done] / steps[done][:, None]
            sums[:], steps[:] = 0.0, 0
    return state.x


def test_reaches_the_optimum_under_cyclic_participation_where_fedavg_does_not() -> None:
    """Period P = 3 = one cycle over the clients. Amplified SCAFFOLD (gamma = 1.5)
    converges to x* = argmin sum_i f_i; FedAvg (no correction, gamma 1) cycles around a
    biased point."""
    x_star = (QUAD_A[:, None] * QUAD_B).sum(0) / QUAD_A.sum()
    x = run_quadratics(3, 1.5, True, 1500)
    np.testing.assert_allclose(x, x_star, atol=1e-3)
    assert np.abs(run_quadratics(3, 1.0, False, 1500) - x_star).max() > 0.1


def test_bad_params_fail_at_load_naming_the_field() -> None:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw["algorithm"] = {"name": "amplified-scaffold", "params": {"period": 0}}
    assert "algorithm.params.period" in scenario_error(raw)
    raw["algorithm"] = {"name": "amplified-scaffold", "params": {"amplification": 0.0}}
    assert "algorithm.params.amplification" in scenario_error(raw)
