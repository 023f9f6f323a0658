"""CA-Fed's availability estimators (Sec. IV-B): hand-worked values, the tracker agrees
with the batch functions, and both estimates converge to the true pi_k and lambda_k
of long simulated chains."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.availability import MarkovClientManager, ca_fed_markov_law
from fedram_flwr.strategies.availability_estimates import (
    AvailabilityTracker,
    LossEstimates,
    filter_losses,
    lambda_hat,
    pi_hat,
    transition_counts,
    transition_matrix_hat,
)
from fedram_flwr.strategies.ca_fed_math import (
    ca_fed_weights,
)

# Rounds 1..4 of two clients: client 0 is 1, 1, 0, 1; client 1 is never active.
STATES = np.array([[1, 0], [1, 0], [0, 0], [1, 0]], dtype=bool)


# ------------------------------------------------------------ pure functions
def test_pi_hat_is_the_beta_posterior_mean() -> None:
    # (count + n_k) / (t + n_k + m_k) with t = 10 rounds.
    assert pi_hat([0, 3, 10], 10, 1, 1) == pytest.approx([1 / 12, 4 / 12, 11 / 12])
    assert pi_hat([0, 3], 10, [2, 0], [0, 2]) == pytest.approx([2 / 12, 3 / 12])
    assert pi_hat(np.zeros(2), 0, 3, 1) == pytest.approx([0.75, 0.75])  # the prior alone


def test_transition_counts_by_hand() -> None:
    counts = transition_counts(STATES)
    # c[k, s, s']: client 0 moved 1->1, 1->0, 0->1; client 1 stayed at 0 three times.
    assert counts.tolist() == [[[0, 1], [1, 1]], [[3, 0], [0, 0]]]
    assert transition_counts(STATES[:1]).sum() == 0  # one round: no transition yet


def test_transition_matrix_rows_are_fractions_of_transitions_from_each_state() -> None:
    p = transition_matrix_hat(transition_counts(STATES), prior=1.0)
    # Client 0: from 0, (0 + 1, 1 + 1) / 3; from 1, (1 + 1, 1 + 1) / 4.
    assert p[0] == pytest.approx(np.array([[1 / 3, 2 / 3], [1 / 2, 1 / 2]]))
    # Client 1: from 0, (3 + 1, 0 + 1) / 5; from 1 never seen: the prior's (1/2, 1/2).
    assert p[1] == pytest.approx(np.array([[4 / 5, 1 / 5], [1 / 2, 1 / 2]]))
    # A (2, 2) prior applies per row: pseudo-counts of the transitions from each state.
    prior = np.array([[9.0, 1.0], [1.0, 3.0]])
    assert transition_matrix_hat(np.zeros((1, 2, 2)), prior)[0] == pytest.approx(
        np.array([[0.9, 0.1], [0.25, 0.75]])
    )


def test_lambda_hat_is_the_second_eigenvalue() -> None:
    p = transition_matrix_hat(transition_counts(STATES))
    lam = lambda_hat(p)
    assert lam == pytest.approx([1 / 2 + 1 / 3 - 1, 1 / 2 + 4 / 5 - 1])
    for k in range(2):
        assert np.sort(np.linalg.eigvals(p[k]).real) == pytest.approx([lam[k], 1.0])
    # On the true chain of the oracles (P(1->1) = lam + (1 - lam) pi, P(0->1) = (1 -
    # lam) pi) it returns lambda exactly.
    pi, true_lam = np.array([0.1, 0.5, 0.9, 0.3]), np.array([0.9, -0.5, 0.0, 0.5])
    p01, p11 = (1 - true_lam) * pi, true_lam + (1 - true_lam) * pi
    chains = np.stack([np.stack([1 - p01, p01], -1), np.stack([1 - p11, p11], -1)], 1)
    assert lambda_hat(chains) == pytest.approx(true_lam, abs=1e-12)


# ------------------------------------------------------------------- tracker
def test_tracker_counts_and_estimates_by_hand() -> None:
    """The tracker against counts and posterior means written out with plain loops (not
    the functions it calls): pi_hat = (active + n) / (t + n + m) and lambda_hat =
    P11 + P00 - 1 with P_ss = (c_ss + prior) / (c_s0 + c_s1 + 2 prior)."""
    states = MarkovClientManager([0.2, 0.5, 0.8], [0.6, 0.0, -0.2], seed=1).availability_matrix(300)
    tracker = AvailabilityTracker.start(3)
    assert tracker.estimates()[0] == pytest.approx([0.5] * 3)  # Beta(1, 1): no information
    for row in states:
        before = tracker
        tracker = tracker.observe(row)
    assert before.rounds == 299 and tracker.rounds == 300  # a new value each round
    counts = np.zeros((3, 2, 2), dtype=int)
    active = [0, 0, 0]
    for t in range(300):
        for k in range(3):
            active[k] += int(states[t, k])
            if t > 0:
                counts[k, int(states[t - 1, k]), int(states[t, k])] += 1
    assert tracker.active_counts.tolist() == active
    assert tracker.transitions.tolist() == counts.tolist()
    assert tracker.last.tolist() == states[-1].tolist()
    pi, lam = tracker.estimates(pi_prior=(2.0, 3.0), transition_prior=0.5)
    for k in range(3):
        c = counts[k]
        p00 = (c[0, 0] + 0.5) / (c[0, 0] + c[0, 1] + 1.0)
        p11 = (c[1, 1] + 0.5) / (c[1, 0] + c[1, 1] + 1.0)
        assert pi[k] == pytest.approx((active[k] + 2.0) / (300 + 5.0), abs=1e-12)
        assert lam[k] == pytest.approx(p11 + p00 - 1.0, abs=1e-12)


# --------------------------------------------------------------- convergence
def estimates(states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pi_hat, lambda_hat) after observing ``states`` (rounds x clients), Beta(1, 1)."""
    pi = pi_hat(states.sum(axis=0), len(states), 1.0, 1.0)
    return pi, lambda_hat(transition_matrix_hat(transition_counts(states)))


def test_estimates_converge_on_the_papers_chains() -> None:
    """Fig. 4a's experiment: N = 200 clients of the paper's generator (pi 0.9 / 0.1,
    lambda 0.9 / ~0), estimated after 10^2, 10^3 and 10^4 observed rounds. Standard
    errors at t rounds are about sqrt(pi (1 - pi) (1 + lam) / ((1 - lam) t)) for pi and
    sqrt(P11 (1 - P11) / (t pi) + P01 (1 - P01) / (t (1 - pi))) for lambda: at 10^4 at
    most 0.013 and 0.010, so the mean absolute errors must be below 0.01 and 0.015,
    and shrink about sqrt(10) per decade (asked: at least 2x per decade)."""
    pi, lam = ca_fed_markov_law(200, 0.4, 0.9, 1e-2, np.random.default_rng(0))
    states = MarkovClientManager(pi, lam, seed=3).availability_matrix(10_000)
    errors = []
    for t in (100, 1_000, 10_000):
        pi_est, lam_est = estimates(states[:t])
        errors.append((np.abs(pi_est - pi).mean(), np.abs(lam_est - lam).mean()))
    (pi_2, lam_2), (pi_3, lam_3), (pi_4, lam_4) = errors
    assert pi_2 > 2 * pi_3 > 4 * pi_4 and pi_4 < 0.01, errors
    assert lam_2 > 2 * lam_3 > 4 * lam_4 and lam_4 < 0.015, errors


def test_each_estimate_is_within_five_standard_errors() -> None:
    """Per client, on chains with negative, zero and strong correlation, after 10^4
    rounds (the asymptotic standard errors of the docstring above)."""
    pi = np.array([0.1, 0.1, 0.5, 0.5, 0.9, 0.9, 0.3, 0.7])
    lam = np.array([0.0, 0.9, -0.5, 0.5, 0.0, 0.9, -0.2, 0.7])
    t = 10_000
    states = MarkovClientManager(pi, lam, seed=11).availability_matrix(t)
    pi_est, lam_est = estimates(states)
    p11, p01 = lam + (1 - lam) * pi, (1 - lam) * pi
    se_pi = np.sqrt(pi * (1 - pi) * (1 + lam) / ((1 - lam) * t))
    se_lam = np.sqrt(p11 * (1 - p11) / (t * pi) + p01 * (1 - p01) / (t * (1 - pi)))
    assert np.all(np.abs(pi_est - pi) < 5 * se_pi), (pi_est, pi)
    assert np.all(np.abs(lam_est - lam) < 5 * se_lam), (lam_est, lam)


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
