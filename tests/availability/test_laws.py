"""The pure availability laws (numpy only): the RAM's relay frequencies follow rho, the
Markov chains' transitions follow (pi, lambda), Bernoulli rounds are independent with
frequencies p, draws replay from (seed, round), and the draws the published results
were made with are pinned, so a changed law or stream fails here first."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fedram_flwr.availability import laws, markov
from fedram_flwr.availability.laws import (
    HiddenLaw,
    connected_sample,
    cyclic_active,
    evenly_spread_phases,
    ram_probabilities,
    ram_relay,
)
from fedram_flwr.availability.markov import (
    MarkovChains,
    ca_fed_markov_law,
    check_markov_law,
    contiguous_clusters,
    fedar_spread,
    label_permutation,
    markov_activation,
    markov_lambda_min,
    markov_step,
)
from tests.helpers import MARKOV_LAM, MARKOV_PI


# -------------------------------------------------------------------- ram_relay
def test_relay_frequencies_match_rho() -> None:
    rho = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.03, 0.01])
    rounds = 20_000
    draws = [ram_relay(rho, 1, seed=123, server_round=r) for r in range(1, rounds + 1)]
    assert all(len(d) == 1 for d in draws)
    counts = np.bincount([d[0] for d in draws], minlength=rho.size)
    result = stats.chisquare(counts, f_exp=rounds * rho)
    assert result.pvalue > 1e-3, (counts, rounds * rho)
    # The rarest user (rho = 0.01) is relayed about 200 times, not never.
    assert 100 < counts[-1] < 300


def test_relay_never_picks_zero_probability_client() -> None:
    rho = np.array([0.5, 0.0, 0.5])
    picked = {ram_relay(rho, 1, 0, r)[0] for r in range(1, 500)}
    assert picked == {0, 2}


def test_relay_several_clients_are_distinct() -> None:
    rho = np.array([0.7, 0.1, 0.1, 0.05, 0.05])
    seen = np.zeros(5, int)
    for r in range(1, 2001):
        ids = ram_relay(rho, 3, seed=5, server_round=r)
        assert len(ids) == 3 and len(set(ids)) == 3
        assert ids == sorted(ids) and all(0 <= i < 5 for i in ids)
        seen[ids] += 1
    assert np.all(seen > 0)
    # Every client is in the draw when m = K.
    assert ram_relay(rho, 5, 0, 1) == [0, 1, 2, 3, 4]


def test_relay_is_replayable() -> None:
    rho = np.full(10, 0.1)
    first = [ram_relay(rho, 2, seed=1, server_round=r) for r in range(1, 51)]
    again = [ram_relay(rho, 2, seed=1, server_round=r) for r in range(1, 51)]
    assert first == again
    # Order of the calls does not matter: a draw is a function of (seed, round) only.
    assert ram_relay(rho, 2, 1, 37) == first[36]
    other_seed = [ram_relay(rho, 2, seed=2, server_round=r) for r in range(1, 51)]
    assert other_seed != first
    # Rounds are not all the same draw.
    assert len({tuple(d) for d in first}) > 10


# ----------------------------------------------------------- ram_probabilities
RARE_RHO = (0.0107, 0.0078, 0.0053)  # Table 1 of the paper


def test_ram_probabilities_with_pinned_rare_users() -> None:
    rho = ram_probabilities(30, 3, np.random.default_rng(0), RARE_RHO)
    assert rho.shape == (30,)
    assert rho.sum() == pytest.approx(1.0, abs=1e-12)
    assert rho[-3:].tolist() == list(RARE_RHO)
    assert np.all(rho[:27] > 0.0107)
    assert np.all(np.diff(rho) <= 0)  # sorted, most likely first


def test_ram_probabilities_rare_rho_order_does_not_matter() -> None:
    a = ram_probabilities(30, 3, np.random.default_rng(4), (0.0053, 0.0107, 0.0078))
    b = ram_probabilities(30, 3, np.random.default_rng(4), RARE_RHO)
    assert np.array_equal(a, b)


def test_ram_probabilities_uniform_law() -> None:
    rho = ram_probabilities(30, 3, np.random.default_rng(0))
    assert rho.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(rho > 0) and np.all(np.diff(rho) <= 0)
    assert not np.allclose(rho, rho[0])
    again = ram_probabilities(30, 3, np.random.default_rng(0))
    assert np.array_equal(rho, again)


@pytest.mark.parametrize(
    "rare_rho",
    [
        (0.01, 0.01),  # two values for three rare users
        (0.05, 0.01, 0.01),  # 27 x 0.05 + 0.07 > 1: the frequent users cannot all be above
    ],
)
def test_ram_probabilities_rejects_bad_rare_rho(rare_rho) -> None:
    with pytest.raises(ValueError, match=r"availability\.params\.rare_rho"):
        ram_probabilities(30, 3, np.random.default_rng(0), rare_rho)


def test_relay_of_two_clients_includes_each_by_successive_sampling() -> None:
    # m = 2 without replacement, by rho then by rho renormalised over the rest:
    # P(i relayed) = rho_i + sum_{j != i} rho_j rho_i / (1 - rho_j).
    rho = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.03, 0.01])
    rounds = 6000
    counts = np.zeros(rho.size)
    for r in range(1, rounds + 1):
        counts[ram_relay(rho, 2, seed=5, server_round=r)] += 1
    second = np.array([sum(rho[j] / (1 - rho[j]) for j in range(7) if j != i) for i in range(7)])
    inclusion = rho * (1 + second)
    assert inclusion.sum() == pytest.approx(2.0)
    se = np.sqrt(inclusion * (1 - inclusion) / rounds)
    assert np.all(np.abs(counts / rounds - inclusion) < 5 * se), (counts / rounds, inclusion)


def test_relay_draws_are_pinned() -> None:
    # The draws of the published runs' stream ("ram-relay", salt 0x5A3) at seed 0.
    rho = np.array([0.4, 0.3, 0.2, 0.1])
    assert [ram_relay(rho, 1, 0, r)[0] for r in range(1, 11)] == [1, 1, 2, 0, 0, 3, 2, 2, 1, 1]
    assert [ram_relay(rho, 2, 0, r) for r in range(1, 6)] == [
        [0, 1],
        [0, 1],
        [0, 2],
        [0, 1],
        [0, 3],
    ]


# ------------------------------------------------------------- Markov / Bernoulli
def test_markov_activation_by_hand() -> None:
    pi, lam = np.array([0.3, 0.8]), np.array([0.5, -0.25])
    # P(1->1) = lam + (1 - lam) pi, P(0->1) = (1 - lam) pi; the stationary pi before round 1.
    np.testing.assert_allclose(markov_activation(pi, lam, np.array([1, 1])), [0.65, 0.75])
    np.testing.assert_allclose(markov_activation(pi, lam, np.array([0, 0])), [0.15, 1.0])
    assert markov_activation(pi, lam, None) is pi


def test_markov_lambda_min_by_hand() -> None:
    np.testing.assert_allclose(
        markov_lambda_min(np.array([0.1, 0.5, 0.9, 0.0])), [-1 / 9, -1, -1 / 9, 0]
    )
    check_markov_law(np.array([0.1, 0.5]), np.array([-1 / 9, 0.99]))  # the closed range's ends
    with pytest.raises(ValueError, match=r"params\.lam\[1\]: 1 is outside"):
        check_markov_law(np.array([0.1, 0.5]), np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"params\.p\[0\]: -0\.1 is outside the allowed range"):
        check_markov_law(np.array([-0.1]), np.array([0.0]), pi_field="availability.params.p")


def test_bernoulli_frequencies_match_p_by_chi_square() -> None:
    # lambda = 0: every round an independent Bernoulli(p_k) per client (FedAR Sec. 6.1).
    p = np.array([0.9, 0.7, 0.5, 0.3, 0.1, 0.02])
    rounds = 10_000
    chains = MarkovChains(p, np.zeros_like(p), seed=11)
    x = np.array([chains.states(r) for r in range(1, rounds + 1)])
    active = x.sum(axis=0)
    observed = np.concatenate([active, rounds - active])
    expected = rounds * np.concatenate([p, 1 - p])
    statistic = ((observed - expected) ** 2 / expected).sum()
    assert stats.chi2.sf(statistic, df=p.size) > 1e-3, (active / rounds, p)
    # Independent rounds: active after active as often as after inactive.
    after_active = (x[1:] & x[:-1]).sum(axis=0) / x[:-1].sum(axis=0)
    after_inactive = (x[1:] & ~x[:-1]).sum(axis=0) / (~x[:-1]).sum(axis=0)
    se = np.sqrt(p * (1 - p) / (rounds * np.minimum(p, 1 - p)))
    assert np.all(np.abs(after_active - after_inactive) < 10 * se)


def test_markov_transitions_and_stationary_law_match_pi_and_lambda() -> None:
    rounds = 10_000
    chains = MarkovChains(MARKOV_PI, MARKOV_LAM, seed=3)
    x = np.array([chains.states(r) for r in range(1, rounds + 1)])
    # CA-Fed Sec. V-A: P(1->1) = lambda + (1 - lambda) pi, P(0->1) = (1 - lambda) pi.
    p11 = MARKOV_LAM + (1 - MARKOV_LAM) * MARKOV_PI
    p01 = (1 - MARKOV_LAM) * MARKOV_PI
    from_1 = x[:-1].sum(axis=0)
    from_0 = rounds - 1 - from_1
    est_p11 = (x[1:] & x[:-1]).sum(axis=0) / from_1
    est_p01 = (x[1:] & ~x[:-1]).sum(axis=0) / from_0
    se11 = np.sqrt(p11 * (1 - p11) / from_1)
    se01 = np.sqrt(p01 * (1 - p01) / from_0)
    assert np.all(np.abs(est_p11 - p11) < 5 * se11), (est_p11, p11)
    assert np.all(np.abs(est_p01 - p01) < 5 * se01), (est_p01, p01)
    # The chain [[1 - p01, p01], [1 - p11, p11]] has stationary law p01 / (1 - p11 + p01)
    # and second eigenvalue p11 - p01: the estimates give back the pi and lambda it was
    # built from (5 standard errors; the mean's from the chain's asymptotic variance).
    se_freq = np.sqrt(MARKOV_PI * (1 - MARKOV_PI) / rounds * (1 + MARKOV_LAM) / (1 - MARKOV_LAM))
    assert np.all(np.abs(x.mean(axis=0) - MARKOV_PI) < 5 * se_freq)
    assert np.all(np.abs(est_p11 - est_p01 - MARKOV_LAM) < 5 * np.hypot(se11, se01))
    np.testing.assert_allclose(p01 / (1 - p11 + p01), MARKOV_PI)  # the closed form itself


def test_markov_chains_step_in_order_and_replay_in_any_order() -> None:
    pi, lam = np.array([0.5, 0.2, 0.8]), np.array([0.0, 0.5, -0.2])
    chains = MarkovChains(pi, lam, seed=0)
    # The draws of the published runs' stream ("markov-step", salt 0x3A7) at seed 0.
    assert np.array([chains.states(r) for r in range(8, 0, -1)])[::-1].astype(int).tolist() == [
        [0, 0, 1],
        [0, 0, 1],
        [0, 0, 1],
        [1, 0, 1],
        [1, 0, 1],
        [1, 1, 1],
        [1, 1, 1],
        [1, 1, 1],
    ]
    state = None
    for r in range(1, 9):
        state = markov_step(pi, lam, state, 0, r)
        assert np.array_equal(state, chains.states(r))
    with pytest.raises(ValueError, match="rounds start at 1, got 0"):
        chains.states(0)


def test_fedar_spread_and_contiguous_clusters_by_hand() -> None:
    np.testing.assert_allclose(fedar_spread(5, 0.2), [1.0, 0.8, 0.6, 0.4, 0.2])
    assert contiguous_clusters(6, 3).tolist() == [0, 0, 1, 1, 2, 2]
    assert contiguous_clusters(5, 2).tolist() == [0, 0, 0, 1, 1]


def test_markov_generator_clips_lambda_to_the_valid_range() -> None:
    # With eps large, N(0, eps^2) draws fall outside [lambda_min(pi), 1): clipped.
    pi, lam = ca_fed_markov_law(40, 0.45, 0.9, 5.0, np.random.default_rng(0))
    lo = markov_lambda_min(pi)
    assert np.all(lam >= lo) and np.all(lam < 1)
    assert np.any(lam == lo) and np.any(lam == np.nextafter(1.0, 0.0))


def test_label_permutation_gives_low_classes_high_availability() -> None:
    classes = [[2], [0], [1, 2], [0, 1]]  # mean class ids 2, 0, 1.5, 0.5
    pi = np.array([0.2, 0.5, 0.9, 0.7])
    perm = label_permutation(pi, classes)
    assert pi[perm].tolist() == [0.2, 0.9, 0.5, 0.7]
    assert sorted(perm) == [0, 1, 2, 3]  # a permutation: the values are kept


# ------------------------------------------------------------------------ cyclic
def test_cyclic_active_by_hand() -> None:
    assert evenly_spread_phases(6, 10).tolist() == [0, 1, 3, 5, 6, 8]
    phase = np.array([0, 2, 9])
    # Window 3 of period 10 from round phase + 1: rounds 1-3, 3-5, 10-12 (= 10, 1, 2).
    table = np.array([cyclic_active(r, 10, 3, phase) for r in range(1, 13)]).astype(int)
    assert table.T.tolist() == [
        [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1],
        [0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1],
    ]


# --------------------------------------------------------------------- connected
def test_connected_oracle_samples_uniformly_among_connected() -> None:
    draws = np.array([connected_sample([0, 2, 5, 7], 2, 3, r) for r in range(1, 2001)])
    assert all(len(set(d)) == 2 for d in draws)
    freq = np.array([(draws == k).any(axis=1).mean() for k in (0, 2, 5, 7)])
    np.testing.assert_allclose(freq, 0.5, atol=5 * np.sqrt(0.25 / 2000))
    assert connected_sample([4, 1], 2, 3, 1) == [1, 4]
    assert connected_sample([4, 1], None, 3, 1) == [1, 4]
    assert draws.tolist() == [connected_sample([0, 2, 5, 7], 2, 3, r) for r in range(1, 2001)]


def test_connected_sample_draws_are_pinned() -> None:
    # The draws of the published runs' stream ("connected-sample", salt 0xC0C) at seed 0.
    assert [connected_sample([0, 3, 5, 8], 2, 0, r) for r in range(1, 5)] == [
        [0, 8],
        [0, 8],
        [3, 5],
        [0, 8],
    ]


def test_hidden_law_defaults_to_no_lambda() -> None:
    law = HiddenLaw(np.array([0.5]))
    assert law.lam is None and law.pi.tolist() == [0.5]


@pytest.mark.parametrize("module", [laws, markov], ids=lambda m: m.__name__)
def test_laws_import_numpy_and_the_named_streams_only(module: object) -> None:
    """The laws stay Flower-agnostic: every import of laws.py and markov.py, function-level
    included (laws.py may use markov.py's pure helpers)."""
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {
        alias.name if isinstance(node, ast.Import) else node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    allowed = {"__future__", "collections.abc", "dataclasses", "numpy", "fedram_flwr.rng"}
    allowed.add("fedram_flwr.availability.markov")  # the sibling pure module, numpy only
    assert imported <= allowed, imported - allowed
