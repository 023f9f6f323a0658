"""Minimum-separation participation (Sun et al., ICLR 2025, Sec. 3): pi_R by hand, the
chain's frequencies against it, the separation never violated, replay by (seed, round),
the oracle and its scenario checks; and the cyclic oracle's groups and subsample
(Crawshaw and Liu's periodic participation)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fedram_flwr.availability import (
    CyclicClientManager,
    MinSeparationClientManager,
    SeparationChain,
    group_phases,
    stationary_participation,
)
from fedram_flwr.availability.separation import set_probability, successive_sample
from tests.helpers import TINY_GAUSSIAN, scenario_error


def test_stationary_participation_by_hand() -> None:
    """q = (1, 1, 2), one client a round. R = 0: q / sum q. R = 1: the last participant
    is the state; P(j -> i) = q_i / (4 - q_j), whose stationary law is (3, 3, 4) / 10.
    R = 2 = N - 1: the cyclic case, 1/3 each."""
    q = np.array([1.0, 1.0, 2.0])
    np.testing.assert_allclose(stationary_participation(q, 1, 0), [0.25, 0.25, 0.5])
    np.testing.assert_allclose(stationary_participation(q, 1, 1), [0.3, 0.3, 0.4])
    np.testing.assert_allclose(stationary_participation(q, 1, 2), [1 / 3] * 3)


def test_set_probability_and_successive_sample_by_hand() -> None:
    q = np.array([1.0, 2.0, 3.0])
    # {0, 2}: 1/6 * 3/5 + 3/6 * 1/3 = 1/10 + 1/6
    assert set_probability(q, [0, 1, 2], (0, 2)) == pytest.approx(1 / 10 + 1 / 6)
    # cumulative weights 1, 3, 6: u = 0.4 -> 2.4 falls on id 1; then (1, 3) of 4: 0.9 -> 2
    assert successive_sample(q, np.arange(3), np.array([0.4, 0.9])) == [1, 2]


@pytest.mark.parametrize(("m", "separation"), [(1, 0), (1, 1), (1, 2), (2, 1)])
def test_frequencies_match_the_stationary_law(m: int, separation: int) -> None:
    """20 000 rounds of the chain against pi_R, within 5 binomial standard deviations
    sqrt(pi (1 - pi) / T); the sets are m distinct ids and no client comes back within
    R rounds of a participation."""
    q, rounds = np.linspace(1.0, 0.1, 5), 20_000
    chain = SeparationChain(q, m, separation, seed=3)
    freq = chain.frequencies(rounds)
    pi = stationary_participation(q, m, separation)
    assert pi.sum() == pytest.approx(m)
    np.testing.assert_array_less(np.abs(freq - pi), 5 * np.sqrt(pi * (1 - pi) / rounds))
    last = np.full(q.size, -(10**9))
    for r in range(1, rounds + 1):
        ids = chain.participants(r)
        assert len(set(ids)) == m
        assert np.all(r - last[ids] > separation), (r, ids, last[ids])
        last[ids] = r


def test_larger_separation_makes_participation_more_uniform() -> None:
    """The paper's Sec. 4: the spread of pi_R shrinks as R grows, uniform at R = N - 1."""
    q = np.linspace(1.0, 0.1, 5)
    spreads = [np.ptp(stationary_participation(q, 1, r)) for r in range(5)]
    assert all(a > b for a, b in zip(spreads, spreads[1:]))
    assert spreads[-1] == pytest.approx(0.0, abs=1e-12)


def test_a_round_replays_in_any_order() -> None:
    q = np.linspace(1.0, 0.1, 6)
    ahead = SeparationChain(q, 2, 1, seed=7).participants(40)
    in_order = SeparationChain(q, 2, 1, seed=7)
    assert [in_order.participants(r) for r in range(1, 41)][-1] == ahead
    assert SeparationChain(q, 2, 1, seed=8).frequencies(40).tolist() != (
        in_order.frequencies(40).tolist()
    )


def test_oracle_draws_the_chain_and_hides_pi_r() -> None:
    q = [1.0, 0.5, 0.25, 0.1]
    manager = MinSeparationClientManager(q, 0, clients_per_round=1, separation=2)
    chain = SeparationChain(np.asarray(q), 1, 2, 0)
    assert [manager.draw(r) for r in range(1, 30)] == [chain.participants(r) for r in range(1, 30)]
    np.testing.assert_allclose(manager.pi, stationary_participation(np.asarray(q), 1, 2))
    with pytest.raises(ValueError, match="separation"):
        MinSeparationClientManager(q, 0, clients_per_round=2, separation=2)


def with_availability(availability: dict) -> dict:
    raw = copy.deepcopy(TINY_GAUSSIAN)  # K = 3 clients
    raw["availability"] = availability
    return raw


def test_scenario_checks_name_the_field() -> None:
    bad = {"oracle": "min-separation", "params": {"separation": 3}}
    assert "availability.params.separation" in scenario_error(with_availability(bad))
    bad = {"oracle": "min-separation", "params": {"q": [1.0, 0.0, 1.0]}}
    assert "availability.params.q" in scenario_error(with_availability(bad))


# ------------------------------------------------------- cyclic: groups, subsample
def test_group_phases_take_turns() -> None:
    """5 contiguous groups of 10 clients, P = 20: group g starts at round 4 g + 1."""
    assert group_phases(10, 20, 5).tolist() == [0, 0, 4, 4, 8, 8, 12, 12, 16, 16]


def test_cyclic_subsample_draws_from_the_active_group() -> None:
    """The authors' FashionMNIST setting shrunk: 20 clients, 5 groups of 4, each active
    4 of every 20 rounds, 2 relayed a round."""
    phase = group_phases(20, 20, 5)
    manager = CyclicClientManager(phase, 20, 4, seed=1, clients_per_round=2)
    for r in range(1, 41):
        group = ((r - 1) % 20) // 4
        ids = manager.draw(r)
        assert len(ids) == 2 and all(i // 4 == group for i in ids), (r, ids)
        assert manager.draw(r) == ids
    assert manager.pi.tolist() == [4 / 20 * 2 / 4] * 20
    every = CyclicClientManager(phase, 20, 4, seed=1)
    assert every.draw(5) == [4, 5, 6, 7] and every.pi.tolist() == [0.2] * 20


def test_cyclic_groups_and_phase_are_exclusive() -> None:
    bad = {"oracle": "cyclic", "params": {"groups": 3, "phase": [0, 1, 2]}}
    assert "phase or groups" in scenario_error(with_availability(bad))
