"""Debiasing FedAvg (Sun et al., ICLR 2025): its estimate and first rounds by hand, its
reduction to FedAvg where pi_R is uniform, and its unbiasedness under the
minimum-separation law where FedAvg's weights are biased."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.availability import SeparationChain, stationary_participation
from fedram_flwr.strategies.debiasing_fedavg import (
    DebiasingFedAvgCore,
    participation_frequency,
)
from fedram_flwr.strategies.fedavg import FedAvgCore
from tests.helpers import vector_reply

W0 = [np.zeros(1, np.float32)]


def core(num_clients: int = 3, **kwargs) -> DebiasingFedAvgCore:
    return DebiasingFedAvgCore(num_clients=num_clients, lr=0.1, **kwargs).for_model(W0)


def test_participation_frequency_is_the_count_over_t() -> None:
    assert participation_frequency(np.array([2, 1, 0]), 4).tolist() == [0.5, 0.25, 0.0]


def test_first_rounds_by_hand() -> None:
    """N = 3. w_{t+1} = w_t - (1/3) sum_i (w_t - y_i) / pi_hat_i(t), pi_hat counting
    round t: round 1 {0, 1} (pi_hat 1, 1), round 2 {0} (pi_hat_0 = 2/2), round 3 {1}
    (pi_hat_1 = 2/3: weight 3/2), round 4 {2} (pi_hat_2 = 1/4: weight 4). FedAvg-IS's
    Beta(1, 1) prior would give round 3 the weight 5/3 and round 4 the weight 3."""
    c = core()
    s = c.init(W0)
    s = c.aggregate(s, 1, [vector_reply(0, [3.0]), vector_reply(1, [6.0])], 1).state
    assert s.w.tolist() == [3.0]  # 0 - (1/3)(-3 - 6)
    s = c.aggregate(s, 2, [vector_reply(0, [6.0])], 1).state
    assert s.w.tolist() == [4.0]  # 3 - (1/3)(3 - 6)
    s = c.aggregate(s, 3, [vector_reply(1, [8.0])], 1).state
    assert s.w.tolist() == [6.0]  # 4 - (1/3)(3/2)(4 - 8)
    s = c.aggregate(s, 4, [vector_reply(2, [6.75])], 1).state
    assert s.w.tolist() == [7.0]  # 6 - (1/3)(4)(6 - 6.75)
    assert s.estimator.tolist() == [2, 2, 1]


def test_a_round_with_nobody_counts_in_t() -> None:
    c = core()
    s = c.init(W0)
    out = c.aggregate(s, 1, [], 1)
    assert not out.aggregated and out.state.estimator.tolist() == [0, 0, 0]
    s = c.aggregate(out.state, 2, [vector_reply(0, [3.0])], 1).state
    assert s.w.tolist() == [2.0]  # pi_hat_0 = 1/2: weight 2, 0 - (2/3)(0 - 3)


def test_full_participation_is_fedavg() -> None:
    """Every client in every round: pi_hat = 1, weight 1 / N, the mean of the models:
    FedAvg (equal sizes) round for round."""
    rng = np.random.default_rng(0)
    debiased, fedavg = core(4), FedAvgCore()
    s, f = debiased.init(W0), fedavg.init(W0)
    for r in range(1, 6):
        replies = [vector_reply(i, rng.standard_normal(1)) for i in range(4)]
        s = debiased.aggregate(s, r, replies, 1).state
        f = fedavg.aggregate(f, r, replies, 1).state
        np.testing.assert_allclose(s.w, f.arrays[0], rtol=1e-6)


def test_known_uniform_frequencies_are_fedavg() -> None:
    """pi_R = m / N known (the cyclic case R = N/m - 1): each of the m participants
    weighs 1/m, the mean of their models, whoever participates."""
    c = core(4, known_p=[0.5] * 4)
    s = c.aggregate(c.init(W0), 1, [vector_reply(1, [2.0]), vector_reply(3, [6.0])], 1).state
    assert s.w.tolist() == [4.0]


@pytest.mark.parametrize("separation", [0, 1, 2])
def test_unbiased_under_minimum_separation_where_fedavg_is_not(separation: int) -> None:
    """Constant updates Delta_i = e_i under the law (N = 4, m = 1): the debiased step
    averages to (1/N) sum_i e_i = 1/4 each; FedAvg's (the mean of the participants') to
    pi_R, far from uniform unless R = N - 1."""
    q, rounds = np.array([1.0, 0.6, 0.3, 0.1]), 4000
    chain = SeparationChain(q, 1, separation, seed=0)
    c = core(4)
    counts = c.init_estimator()
    debiased, fedavg = np.zeros(4), np.zeros(4)
    for r in range(1, rounds + 1):
        active = chain.participants(r)
        omega, counts = c.weights(counts, r, active, 1)
        debiased[active] += omega / 4
        fedavg[active] += 1.0
    np.testing.assert_allclose(debiased / rounds, 0.25, atol=0.02)
    pi = stationary_participation(q, 1, separation)
    np.testing.assert_allclose(fedavg / rounds, pi, atol=0.02)
    assert np.abs(pi - 0.25).max() > 0.05
