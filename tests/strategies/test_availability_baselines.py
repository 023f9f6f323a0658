"""The availability-aware baselines' weights (CA-Fed Sec. V-A c), by hand, and F3AST
with its own participation-rate estimate over its first rounds."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import PARTITION_ID, ClientReply
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.strategies.availability_baselines import (
    F3ASTCore,
    adafed_weights,
    f3ast_selection,
    f3ast_weights,
    more_available_weights,
    smoothed_rate,
)
from fedram_flwr.strategies.ca_fed_math import (
    biased_importance,
    unbiased_weights,
)
from tests.helpers import scenario_error


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


# ------------------------------------------- F3AST with its own rate
def theta_reply(pid: int, value: float) -> ClientReply:
    """Client ``pid`` returning the one-array model [value]."""
    return ClientReply(pid, 10, {PARTITION_ID: pid}, lambda: [np.array([value])])


def f3ast(**kwargs) -> F3ASTCore:
    return F3ASTCore(alpha=np.array([0.5, 0.25, 0.25]), clients_per_round=1, **kwargs)


def test_f3ast_selection_and_rate_by_hand() -> None:
    alpha, rate = np.array([0.5, 0.25, 0.25]), np.array([0.75, 0.125, 0.125])
    # alpha / r = (2/3, 2, 2): the active client 2 beats client 0; 1 and 2 tie: lower id.
    active = np.array([True, False, True])
    assert f3ast_selection(alpha, rate, active, 1).tolist() == [False, False, True]
    assert f3ast_selection(alpha, rate, np.ones(3, bool), 1).tolist() == [False, True, False]
    assert f3ast_selection(alpha, rate, active, 5).tolist() == [True, False, True]
    selected = np.array([False, False, True])
    assert smoothed_rate(rate, selected, 0.5).tolist() == [0.375, 0.0625, 0.5625]


def test_f3ast_first_rounds_by_hand() -> None:
    """alpha = (1/2, 1/4, 1/4), one slot, beta = 1/2, r_0 = alpha, theta_0 = 0.
    Round 1, A = {0, 2}: alpha / r_0 = (1, 1, 1), tie: client 0; r_1 = r_0 / 2 +
    (1/2, 0, 0) = (3/4, 1/8, 1/8); q_0 = alpha_0 / r_1,0 = 2/3; theta = 0 + 2/3 (3 - 0).
    Round 2, A = {0, 2}: alpha / r_1 = (2/3, 2, 2): client 2; r_2 = (3/8, 1/16, 9/16);
    q_2 = (1/4) / (9/16) = 4/9; theta = 2 + 4/9 (11 - 2) = 6.
    Round 3, nobody: r_3 = r_2 / 2 = (3/16, 1/32, 9/32), theta stays.
    Round 4, A = {0, 1}: alpha / r_3 = (8/3, 8, 8/9): client 1; r_4 = (3/32, 33/64,
    9/64); q_1 = (1/4) / (33/64) = 16/33; theta = 6 + 16/33 (39 - 6) = 22."""
    c = f3ast(beta=0.5)
    state = c.init([np.array([0.0])])
    assert state.rate.tolist() == [0.5, 0.25, 0.25]
    out = c.aggregate(state, 1, [theta_reply(0, 3.0), theta_reply(2, 7.0)], 1)
    assert out.state.rate.tolist() == [0.75, 0.125, 0.125]
    np.testing.assert_allclose(out.state.q, [2 / 3, 0.0, 0.0])
    np.testing.assert_allclose(out.state.theta[0], [2.0])
    assert out.diagnostics["participants"] == 1
    out = c.aggregate(out.state, 2, [theta_reply(0, 5.0), theta_reply(2, 11.0)], 1)
    assert out.state.rate.tolist() == [0.375, 0.0625, 0.5625]
    np.testing.assert_allclose(out.state.q, [0.0, 0.0, 4 / 9])
    np.testing.assert_allclose(out.state.theta[0], [6.0])
    after_two = out.state
    empty = c.aggregate(after_two, 3, [], 1)
    assert not empty.aggregated
    out = c.aggregate(empty.state, 4, [theta_reply(0, 1.0), theta_reply(1, 39.0)], 1)
    assert out.state.rate.tolist() == [0.09375, 0.515625, 0.140625]
    np.testing.assert_allclose(out.state.q, [0.0, 16 / 33, 0.0])
    np.testing.assert_allclose(out.state.theta[0], [22.0])
    # The server skipped round 3 (elapsed 2): the same rate and model.
    skipped = c.aggregate(after_two, 4, [theta_reply(0, 1.0), theta_reply(1, 39.0)], 2)
    assert skipped.state.rate.tolist() == out.state.rate.tolist()
    np.testing.assert_allclose(skipped.state.theta[0], [22.0])


def test_f3ast_with_ca_fed_pi_is_a_named_option() -> None:
    """``rate: ca-fed`` (the rule before 2026-11-26): r = pi_hat = (count + 1) / (t + 2);
    round 1 with A = {0, 2}: pi_hat = (2/3, 1/3, 2/3), alpha / pi = (3/4, 3/4, 3/8):
    client 0 (client 1 is not active), q_0 = 3/4, not F3AST's own 2/3."""
    out = f3ast(rate="ca-fed").aggregate(
        f3ast(rate="ca-fed").init([np.array([0.0])]),
        1,
        [theta_reply(0, 3.0), theta_reply(2, 7.0)],
        1,
    )
    np.testing.assert_allclose(out.state.q, [0.75, 0.0, 0.0])
    with pytest.raises(ValueError, match="^rate: "):
        f3ast(rate="cafed")
    with pytest.raises(ValueError, match="^beta: "):
        f3ast(beta=0.0)


def test_f3ast_reads_the_hidden_law_only_with_ca_fed_rate(ca_fed_dict) -> None:
    raw = ca_fed_dict()
    raw["algorithm"] = {"name": "f3ast", "params": {"availability": "oracle"}}
    core = Experiment(scenario_from_dict(raw), 0).strategy().core
    assert (core.rate, core.beta, core.known_pi, core.budget) == ("smoothed", 0.01, None, 3)
    raw["algorithm"]["params"]["rate"] = "ca-fed"
    core = Experiment(scenario_from_dict(raw), 0).strategy().core
    np.testing.assert_array_equal(core.known_pi, raw["availability"]["params"]["pi"])
    # Its own rate reads nothing hidden: any oracle will do.
    raw["availability"] = {"oracle": "cyclic", "params": {"period": 4, "window": 2}}
    raw["algorithm"]["params"]["rate"] = "smoothed"
    assert Experiment(scenario_from_dict(raw), 0).strategy().core.known_pi is None
    raw["algorithm"]["params"]["beta"] = 1.5
    assert "algorithm.params.beta" in scenario_error(raw)
