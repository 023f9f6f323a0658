"""FedStale (strategies/fedstale.py) as its authors implement it: the
smallest case and two more rounds by hand, beta = 0 against FedAvg-IS (known
p) and FedAU without cut-off (estimated p, the authors' estimator) on random rounds;
FedStale over the active set (the rule before 2026-11-26, ``fedstale-active``) by hand
and at its two ends; MIFA and FedVARP with a server learning rate by hand (their other
tests: test_fedar.py)."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.registry import with_overrides
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.strategies.fedau import FedAUCore
from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.fedstale import (
    FedStaleActiveCore,
    FedStaleCore,
    fedstale_active_direction,
    fedstale_direction,
)
from fedram_flwr.strategies.participation import FedAvgISCore
from fedram_flwr.strategies.reweighted import ReweightedState
from fedram_flwr.strategies.stale_updates import FedVARPCore, MIFACore
from tests.helpers import TINY_GAUSSIAN, scenario_error, vector_reply

DIM = 3


def core(cls, num_clients: int = 3, lr: float = 0.5, **kwargs):
    return cls(num_clients=num_clients, lr=lr, **kwargs).for_model([np.zeros(DIM, np.float32)])


def random_rounds(seed: int, num_clients: int, rounds: int):
    """(round, active clients) with some empty rounds, and a draw per client model."""
    rng = np.random.default_rng(seed)
    for t in range(1, rounds + 1):
        yield t, np.flatnonzero(rng.random(num_clients) < 0.5).tolist(), rng


# ------------------------------------------------ FedStale, the authors' rule
def test_fedstale_direction_by_hand() -> None:
    """(beta sum_i y_i + sum_S G_i / p_i - beta sum_S y_i / p_i) / N, N = 4, beta = 0.25:
    (0.25 * 8 + 12 - 0.25 * 4) / 4 = 3.25."""
    got = fedstale_direction(np.array([8.0]), np.array([12.0]), np.array([4.0]), 4, 0.25)
    assert got.tolist() == [3.25]


def test_the_smallest_case_by_hand() -> None:
    """N = 2, p = (0.9, 0.1), only client 1 active with update 1, empty memory,
    lr 1, beta = 0.5. The authors' code (arodio/FedStale): UnbiasedClientsSampler gives
    client 1 the weight a_1 / p_1 = 0.5 / 0.1 = 5; HistoryTracker.average weighs the
    inactive client 0's h_0 = 0 by a_0 = 0.5 and client 1's h_1 = 0 by a_1 - 5, so the
    history term is 0; average_learners sets the gradient 5 * Delta_1 = 5; HistorySGD
    adds 0.5 * 0 and steps p -= lr * 5: w = -5. Over the active set: 1 / |S| = 1, w = -1."""
    ours = core(FedStaleCore, 2, lr=1.0, beta=0.5, known_p=(0.9, 0.1))
    active_mean = core(FedStaleActiveCore, 2, lr=1.0, beta=0.5)
    reply = [vector_reply(1, -np.ones(DIM))]  # w = 0, G_1 = (0 - (-1)) / 1 = 1
    out = ours.aggregate(ours.init([np.zeros(DIM, np.float32)]), 1, reply, 1)
    assert out.state.w.tolist() == [-5.0] * DIM
    old = active_mean.aggregate(active_mean.init([np.zeros(DIM, np.float32)]), 1, reply, 1)
    assert old.state.w.tolist() == [-1.0] * DIM


def test_fedstale_with_stale_memory_by_hand() -> None:
    """The smallest case continued (N = 2, p = (0.9, 0.1), beta = 0.5, lr 1), w_2 = -5,
    memory y = (0, 1). In the authors' form d = beta sum_k a_k h_k + sum_S (a_k / p_k)
    (Delta_k - beta h_k), a = (1/2, 1/2).
    Round 2: client 0 returns -6.8, G_0 = 1.8: d = 0.5 (0 + 0.5) + (0.5 / 0.9) (1.8 - 0)
    = 0.25 + 1 = 1.25, w_3 = -6.25; memory (1.8, 1).
    Round 3: client 1 returns -8.25, G_1 = 2: d = 0.5 (0.9 + 0.5) + 5 (2 - 0.5 * 1)
    = 0.7 + 7.5 = 8.2, w_4 = -14.45."""
    c = core(FedStaleCore, 2, lr=1.0, beta=0.5, known_p=(0.9, 0.1))
    s = c.aggregate(c.init([np.zeros(DIM, np.float32)]), 1, [vector_reply(1, -np.ones(DIM))], 1)
    s = c.aggregate(s.state, 2, [vector_reply(0, np.full(DIM, -6.8))], 1)
    np.testing.assert_allclose(s.state.w, -6.25, rtol=1e-6)
    np.testing.assert_allclose(s.state.memory.updates[:, 0], [1.8, 1.0], rtol=1e-6)
    s = c.aggregate(s.state, 3, [vector_reply(1, np.full(DIM, -8.25))], 1)
    np.testing.assert_allclose(s.state.w, -14.45, rtol=1e-6)
    assert s.diagnostics["mean-weight"] == pytest.approx(10.0)
    empty = c.aggregate(s.state, 4, [], 1)  # no participants: no step (the authors' mix)
    assert not empty.aggregated and empty.state.w.tolist() == s.state.w.tolist()


def in_lockstep(stale: FedStaleCore, other, seed: int, rounds: int = 14) -> int:
    """Runs ``stale`` and the reweighted core ``other`` on the same random rounds (empty
    ones included, sometimes skipped: elapsed 2), ``other`` restarted each round from
    FedStale's model with its own estimator; asserts the models agree to float32
    rounding and returns the number of steps."""
    a = stale.init([np.zeros(DIM, np.float32)])
    b = other.init([np.zeros(DIM, np.float32)])
    steps, elapsed = 0, 1
    for t, active, rng in random_rounds(seed, stale.num_clients, rounds):
        if not active and t % 3 == 0:  # the server skipped it: the next one counts it
            elapsed += 1
            continue
        replies = [vector_reply(i, a.w + rng.standard_normal(DIM)) for i in active]
        out_a = stale.aggregate(a, t, replies, elapsed)
        out_b = other.aggregate(ReweightedState(a.w.copy(), b.estimator), t, replies, elapsed)
        assert out_a.aggregated == out_b.aggregated == bool(active)
        np.testing.assert_allclose(out_a.state.w, out_b.state.w, rtol=1e-6, atol=1e-6)
        a, b, elapsed, steps = out_a.state, out_b.state, 1, steps + bool(active)
    return steps


def test_beta_zero_is_fedavg_is_with_known_p() -> None:
    """beta = 0: sum_S (1/N)(1/p_i) G_i, FedAvg-IS's step; constant p and p_i^t."""
    p = np.array([0.9, 0.2, 0.5, 0.35, 0.7])
    for known_p in (p, lambda t: np.clip(p * (1 + 0.1 * np.sin(t)), 0.05, 1.0)):
        stale = core(FedStaleCore, 5, lr=0.3, beta=0.0, known_p=known_p)
        assert in_lockstep(stale, core(FedAvgISCore, 5, lr=0.3, known_p=known_p), 2) >= 5


def test_beta_zero_with_estimated_p_is_fedau_without_cutoff() -> None:
    """The authors' unknown-p runs estimate 1/p_i with FedAU's intervals, cut-off 1e8."""
    stale = core(FedStaleCore, 4, lr=0.3, beta=0.0)
    assert in_lockstep(stale, core(FedAUCore, 4, lr=0.3, cutoff=10**8), 3) >= 5


def test_the_estimated_inverse_p_by_hand() -> None:
    """N = 2; rounds {0, 1}, {0}, {1}, {1}: 1 until an interval is seen; client 1's
    intervals before round 4 are 1 and 2, so 1/p_hat_1 = 1.5 there."""
    c = core(FedStaleCore, 2, lr=1.0, beta=0.5)
    state = c.init([np.zeros(DIM, np.float32)])
    seen = []
    for t, active in enumerate(([0, 1], [0], [1], [1]), start=1):
        out = c.aggregate(state, t, [vector_reply(i, state.w) for i in active], 1)
        seen.append(out.diagnostics["mean-weight"])
        state = out.state
    assert seen == [1.0, 1.0, 1.0, 1.5]


def test_fedstale_reads_the_hidden_law_only_when_told(tiny_gaussian: Scenario) -> None:
    scenario = with_overrides(
        tiny_gaussian,
        {
            "availability": {"oracle": "bernoulli", "params": {"p": [1.0, 0.5, 0.25]}},
            "algorithm": {"name": "fedstale", "params": {"beta": 0.5}},
        },
    )
    assert Experiment(scenario, 0).strategy().core.known_p is None
    oracle = with_overrides(scenario, {"algorithm.params.availability": "oracle"})
    np.testing.assert_array_equal(Experiment(oracle, 0).strategy().core.known_p, [1.0, 0.5, 0.25])
    active = with_overrides(scenario, {"algorithm.name": "fedstale-active"})
    assert type(Experiment(active, 0).strategy().core) is FedStaleActiveCore
    with pytest.raises(ScenarioError, match="algorithm.params.availability"):
        with_overrides(scenario, {"algorithm.params.availability": "true"})


@pytest.mark.parametrize("name", ["fedstale", "fedstale-active"])
def test_a_bad_beta_is_named(name: str) -> None:
    raw = {**TINY_GAUSSIAN, "algorithm": {"name": name, "params": {"beta": 1.5}}}
    assert "algorithm.params.beta" in scenario_error(raw)
    for cls in (FedStaleCore, FedStaleActiveCore):
        with pytest.raises(ValueError, match="beta"):
            core(cls, beta=-0.1)


# ------------------------------------- FedStale over the active set (fedstale-active)
def test_fedstale_active_direction_by_hand() -> None:
    varp, fresh = np.array([4.0, -2.0]), np.array([6.0, 2.0])  # two participants
    # beta = 0.25: 0.25 * varp + 0.75 * fresh / 2 = (1 + 2.25, -0.5 + 0.75)
    np.testing.assert_allclose(fedstale_active_direction(varp, fresh, 2, 0.25), [3.25, 0.25])
    assert fedstale_active_direction(varp, fresh, 2, 1.0) is varp
    assert fedstale_active_direction(varp, fresh, 2, 0.0).tolist() == [3.0, 1.0]


def test_fedstale_active_core_two_rounds_by_hand() -> None:
    """N = 3, eta = 0.5, beta = 0.25, w_1 = 0; G_i = (w - w_i) / eta."""
    c = core(FedStaleActiveCore, beta=0.25)
    state = c.init([np.zeros(DIM, np.float32)])
    # Round 1: clients 0 and 1 return -1 and -2: G = (2, 4), memory before = 0.
    # varp = 0 + (2 + 4) / 2 = 3; fresh mean 3; v = 3; w_2 = 0 - 0.5 * 3 = -1.5.
    out = c.aggregate(
        state, 1, [vector_reply(0, -np.ones(DIM)), vector_reply(1, -2 * np.ones(DIM))], 1
    )
    np.testing.assert_allclose(out.state.w, -1.5)
    # Round 2: client 1 returns -1.5 - 4 = -5.5: G_1 = 8; memory before (2, 4, 0), mean 2.
    # varp = 2 + (8 - 4) / 1 = 6; fresh mean 8; v = 0.25 * 6 + 0.75 * 8 = 7.5;
    # equivalently beta mean + (G_1 - beta y_1) = 0.5 + (8 - 1) = 7.5. w_3 = -1.5 - 3.75.
    out = c.aggregate(out.state, 2, [vector_reply(1, np.full(DIM, -5.5))], 1)
    np.testing.assert_allclose(out.state.w, -5.25)
    assert out.state.memory.updates[:, 0].tolist() == [2.0, 8.0, 0.0]
    # A round without participants: no step (as FedVARP), the counters still advance.
    empty = c.aggregate(out.state, 3, [], 1)
    assert not empty.aggregated and empty.state.memory.tau.tolist() == [2, 1, 3]


def test_fedstale_active_beta_one_is_fedvarp_bit_for_bit() -> None:
    stale, varp = core(FedStaleActiveCore, 5, beta=1.0), core(FedVARPCore, 5)
    a, b = stale.init([np.zeros(DIM, np.float32)]), varp.init([np.zeros(DIM, np.float32)])
    for t, active, rng in random_rounds(0, 5, 12):
        replies = [vector_reply(i, a.w + rng.standard_normal(DIM)) for i in active]
        out_a, out_b = stale.aggregate(a, t, replies, 1), varp.aggregate(b, t, replies, 1)
        a, b = out_a.state, out_b.state
        assert out_a.aggregated == out_b.aggregated
        assert a.w.tobytes() == b.w.tobytes()
        assert a.memory.updates.tobytes() == b.memory.updates.tobytes()


def test_fedstale_active_beta_zero_is_fedavg_over_the_participating_clients() -> None:
    """Each round, from the same broadcast, FedAvg's example-weighted mean of the
    returned models (equal sizes) and FedStale-active(0)'s step agree to float32."""
    stale, fedavg = core(FedStaleActiveCore, 4, lr=0.3, beta=0.0), FedAvgCore()
    state = stale.init([np.zeros(DIM, np.float32)])
    steps = 0
    for t, active, rng in random_rounds(1, 4, 12):
        replies = [vector_reply(i, state.w + rng.standard_normal(DIM)) for i in active]
        expected = fedavg.aggregate(fedavg.init([state.w.copy()]), t, replies, 1)
        out = stale.aggregate(state, t, replies, 1)
        assert out.aggregated == expected.aggregated == bool(active)
        if active:
            np.testing.assert_allclose(out.state.w, expected.state.arrays[0], rtol=1e-6, atol=1e-6)
            steps += 1
        state = out.state
    assert steps >= 4


def test_an_intermediate_beta_is_neither_end() -> None:
    ends = {}
    for beta in (0.0, 0.5, 1.0):
        c = core(FedStaleActiveCore, 2, lr=1.0, beta=beta)
        s = c.init([np.zeros(DIM, np.float32)])
        s = c.aggregate(
            s, 1, [vector_reply(0, -np.ones(DIM)), vector_reply(1, np.ones(DIM))], 1
        ).state
        ends[beta] = c.aggregate(s, 2, [vector_reply(0, s.w - 3.0)], 1).state.w[0]
    # Round 1: G = (1, -1), w_2 = 0. Round 2: G_0 = 3; varp = 0 + (3 - 1) = 2, fresh 3.
    assert (ends[0.0], ends[1.0], ends[0.5]) == (-3.0, -2.0, -2.5)


# ------------------------------------------- the server learning rate eta_g
def test_mifa_with_a_server_learning_rate_by_hand() -> None:
    """N = 3, eta = 0.5, w_1 = 0: w <- w - (eta_g eta) v, v = (1/N) sum_i G_i."""
    c = core(MIFACore, server_lr=0.5)
    state = c.init([np.zeros(DIM, np.float32)])
    # Round 1: clients 0 and 1 return -1 and -2: G = (2, 4, 0), v = 2; w = -0.25 * 2.
    replies = [vector_reply(0, -np.ones(DIM)), vector_reply(1, -2 * np.ones(DIM))]
    out = c.aggregate(state, 1, replies, 1)
    assert out.state.w.tolist() == [-0.5] * DIM
    # Round 2, nobody: MIFA steps along the memory, w = -0.5 - 0.25 * 2.
    out = c.aggregate(out.state, 2, [], 1)
    assert out.aggregated and out.state.w.tolist() == [-1.0] * DIM
    # Round 3: client 2 returns -2.5: G_2 = (-1 + 2.5) / 0.5 = 3, v = 3, w = -1 - 0.75.
    out = c.aggregate(out.state, 3, [vector_reply(2, np.full(DIM, -2.5))], 1)
    assert out.state.w.tolist() == [-1.75] * DIM and out.diagnostics["lr"] == 0.5
    # eta_g = 2: round 1 steps w = 0 - (2 * 0.5) * 2.
    c2 = core(MIFACore, server_lr=2.0)
    assert c2.aggregate(c2.init([np.zeros(DIM, np.float32)]), 1, replies, 1).state.w[0] == -2.0


def test_fedvarp_with_a_server_learning_rate_by_hand() -> None:
    """N = 3, eta = 0.5, eta_g = 2, w_1 = 0; v = mean(y) + mean over S of (G_i - y_i)."""
    c = core(FedVARPCore, server_lr=2.0)
    state = c.init([np.zeros(DIM, np.float32)])
    # Round 1: G = (2, 4), y = 0: v = 3, w = 0 - (2 * 0.5) * 3.
    replies = [vector_reply(0, -np.ones(DIM)), vector_reply(1, -2 * np.ones(DIM))]
    out = c.aggregate(state, 1, replies, 1)
    assert out.state.w.tolist() == [-3.0] * DIM
    # Round 2: client 1 returns -7: G_1 = 8; mean(y) = 2, v = 2 + (8 - 4) = 6, w = -3 - 6.
    out = c.aggregate(out.state, 2, [vector_reply(1, np.full(DIM, -7.0))], 1)
    assert out.state.w.tolist() == [-9.0] * DIM
    assert not c.aggregate(out.state, 3, [], 1).aggregated  # no step without participants
    c_half = core(FedVARPCore, server_lr=0.5)
    w = c_half.aggregate(c_half.init([np.zeros(DIM, np.float32)]), 1, replies, 1).state.w
    assert w.tolist() == [-0.75] * DIM  # 0 - (0.5 * 0.5) * 3


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_bad_server_learning_rate_is_refused(bad: float) -> None:
    for cls in (MIFACore, FedVARPCore):
        with pytest.raises(ValueError, match="^server_lr: "):
            core(cls, server_lr=bad)
