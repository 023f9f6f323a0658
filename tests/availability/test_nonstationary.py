"""FedAWE's non-stationary Bernoulli law (fedram_flwr/availability/nonstationary.py,
App. J.3): f_i(t) in closed form, p_i = <nu_i, phi> by hand, realised frequencies
against p_i f_i(t), replay from (seed, round), and the stationary case is Bernoulli's law."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.availability import (
    BernoulliClientManager,
    NonStationaryClientManager,
    default_phi_max,
    fedawe_base_p,
    fedawe_f,
    fedawe_phi,
)
from fedram_flwr.rng import stream

P3 = np.array([0.12, 0.5, 0.9])


@pytest.mark.parametrize(
    ("t", "expected"),
    [(0, 1.0), (9, 1.0), (10, 0.4), (19, 0.4), (20, 1.0), (35, 0.4)],
)
def test_staircase_is_one_then_low_each_period(t: int, expected: float) -> None:
    assert fedawe_f("staircase", t, P3, period=20).tolist() == [expected] * 3
    assert fedawe_f("staircase", t, P3, period=20, low=0.25)[0] == (0.25 if expected < 1 else 1)


@pytest.mark.parametrize(("t", "expected"), [(0, 0.7), (5, 1.0), (10, 0.7), (15, 0.4), (20, 0.7)])
def test_sine_is_gamma_sin_plus_one_minus_gamma(t: int, expected: float) -> None:
    assert np.allclose(fedawe_f("sine", t, P3, period=20, gamma=0.3), expected)
    assert np.allclose(fedawe_f("stationary", t, P3), 1.0)


def test_interleaved_sine_cuts_each_client_below_delta0() -> None:
    # t = 0: g = 0.7, p g = (0.084, 0.35, 0.63): client 0 is cut off (< delta_0 = 0.1).
    assert np.allclose(fedawe_f("interleaved-sine", 0, P3), [0.0, 0.7, 0.7])
    # t = 15: g = 0.4, p g = (0.048, 0.2, 0.36); with delta_0 = 0.25 client 1 is cut too.
    assert np.allclose(fedawe_f("interleaved-sine", 15, P3, delta0=0.25), [0.0, 0.0, 0.4])
    # t = 5: g = 1, nobody is cut.
    assert np.allclose(fedawe_f("interleaved-sine", 5, P3), 1.0)


def test_unknown_dynamics_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"availability\.params\.dynamics: 'cosine'.*sine"):
        fedawe_f("cosine", 0, P3)  # type: ignore[arg-type]


def test_base_p_is_class_distribution_dot_phi() -> None:
    counts = np.array([[2, 0], [1, 1], [0, 5]])
    assert np.allclose(fedawe_base_p(counts, np.array([0.2, 0.6])), [0.2, 0.4, 0.6])
    with pytest.raises(ValueError, match=r"availability\.params\.p: client 1 holds no samples"):
        fedawe_base_p(np.array([[1, 0], [0, 0]]), np.array([0.2, 0.6]))


def test_phi_is_uniform_below_phi_max() -> None:
    assert default_phi_max(10).tolist() == [1.0] * 5 + [0.5] * 5  # the paper's Phi_c
    assert default_phi_max(3).tolist() == [1.0, 1.0, 0.5]
    rng = np.random.default_rng(0)
    phi = np.array([fedawe_phi(default_phi_max(10), rng) for _ in range(4000)])
    assert np.all((phi >= 0) & (phi < default_phi_max(10)))
    se = default_phi_max(10) / np.sqrt(12 * 4000)  # U(0, a): sd a / sqrt(12)
    assert np.all(np.abs(phi.mean(axis=0) - default_phi_max(10) / 2) < 5 * se)


@pytest.mark.parametrize("dynamics", ["stationary", "staircase", "sine", "interleaved-sine"])
def test_frequencies_match_p_times_f(dynamics: str) -> None:
    p = np.linspace(0.05, 0.95, 12)
    m = NonStationaryClientManager(p, dynamics, seed=3, period=8, gamma=0.5, delta0=0.2)
    rounds = 4000
    x = m.availability_matrix(rounds).astype(float)
    law = np.array(
        [
            p * fedawe_f(dynamics, r - 1, p, period=8, gamma=0.5, delta0=0.2)
            for r in range(1, rounds + 1)
        ]
    )
    assert np.allclose([m.probabilities(r) for r in (1, 2, 7)], law[[0, 1, 6]])
    # Per client: sum of independent Bernoulli(p_i^t), variance sum p (1 - p).
    se = np.sqrt((law * (1 - law)).sum(axis=0)) + 1e-12
    assert np.all(np.abs(x.sum(axis=0) - law.sum(axis=0)) < 5 * se)
    # Per phase of the period (pooling clients and periods): the shape of f over t.
    for phase in range(8):
        rows = slice(phase, rounds, 8)
        se = np.sqrt((law[rows] * (1 - law[rows])).sum()) + 1e-12
        assert abs(x[rows].sum() - law[rows].sum()) < 5 * se
    assert np.allclose(m.pi, law[:8].mean(axis=0))  # one period of the P-periodic law


def test_long_run_laws_in_closed_form() -> None:
    sine = NonStationaryClientManager(P3, "sine", seed=0, period=20, gamma=0.3)
    assert np.allclose(sine.pi, 0.7 * P3)  # the sine averages to 0 over a period
    stair = NonStationaryClientManager(P3, "staircase", seed=0, period=20)
    assert np.allclose(stair.pi, P3 * (1 + 0.4) / 2)


def test_draws_replay_from_seed_and_round_in_any_order() -> None:
    p = np.linspace(0.1, 0.9, 9)
    a = NonStationaryClientManager(p, "interleaved-sine", seed=5)
    late = a.draw(37)
    [a.draw(r) for r in range(1, 60)]
    assert a.draw(37) == late
    b = NonStationaryClientManager(p, "interleaved-sine", seed=5)
    assert b.draw(37) == late
    u = stream("nonstationary-step", 5, 37).random(9)
    assert late == np.flatnonzero(u < a.probabilities(37)).tolist()
    c = NonStationaryClientManager(p, "interleaved-sine", seed=6)
    assert c.availability_matrix(60).tolist() != a.availability_matrix(60).tolist()


def test_stationary_is_the_bernoulli_law() -> None:
    p = np.linspace(0.1, 0.9, 9)
    ns = NonStationaryClientManager(p, "stationary", seed=2)
    bern = BernoulliClientManager(p, seed=2)
    assert all(np.array_equal(ns.probabilities(r), p) for r in (1, 13, 400))
    assert np.array_equal(ns.pi, bern.pi)
    x, y = ns.availability_matrix(3000), bern.availability_matrix(3000)
    se = np.sqrt(2 * p * (1 - p) / 3000)  # difference of two independent frequencies
    assert np.all(np.abs(x.mean(axis=0) - y.mean(axis=0)) < 5 * se)


def test_manager_rejects_probabilities_outside_zero_one() -> None:
    with pytest.raises(ValueError, match=r"availability\.params\.p\[1\]: must be in \[0, 1\]"):
        NonStationaryClientManager([0.5, 1.5], "sine", seed=0)
    with pytest.raises(ValueError, match="rounds start at 1"):
        NonStationaryClientManager([0.5], "sine", seed=0).probabilities(0)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_manager_built_directly_rejects_nan_and_inf_naming_p(bad: float) -> None:
    """The scenario loader refuses NaN before; a library user's NaN passed ``p < 0``."""
    with pytest.raises(ValueError, match=r"availability\.params\.p\[1\]: must be in \[0, 1\]"):
        NonStationaryClientManager([0.5, bad], "stationary", seed=0)
