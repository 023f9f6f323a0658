"""The one Flower base every strategy adapter shares (strategies/base.py): the failure
guard (``accept_failures=False``: nothing aggregated, state unchanged), partition-id
order, and the rule that rounds Flower skips still count."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from fedram_flwr.protocol import PARTITION_ID, RECEIVED_LOSS
from fedram_flwr.registry import ALGORITHMS
from fedram_flwr.strategies import FedAvg, Unbiased
from tests.helpers import ALPHA, MODEL, STRATEGIES


def test_every_registered_algorithm_is_checked_here() -> None:
    """A new algorithm's spec without an entry above would skip the failure-guard tests."""
    assert set(STRATEGIES) == set(ALGORITHMS)
    for name, make in STRATEGIES.items():
        assert make.func is ALGORITHMS[name].strategy, name


def broadcast(strategy) -> list[np.ndarray]:
    """What ``strategy`` broadcasts first (Flower hands its initial parameters out once)."""
    return parameters_to_ndarrays(strategy.initialize_parameters(None))


def reply(like: list[np.ndarray], pid: int, value: float) -> tuple[None, FitRes]:
    """A client's fit result shaped ``like`` the broadcast, every entry ``value``."""
    arrays = [np.full_like(a, value) for a in like]
    metrics = {PARTITION_ID: pid, RECEIVED_LOSS: 1.0}
    return None, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 10, metrics)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_accept_failures_false_aggregates_nothing_and_keeps_the_state(name: str) -> None:
    strategy = STRATEGIES[name](initial_arrays=MODEL, accept_failures=False)
    if name == "qffl":
        strategy.pre_weights = MODEL
    state = getattr(strategy, "state", None)
    diagnostics = strategy.diagnostics()
    results = [reply(broadcast(strategy), 0, 1.0)]
    params, metrics = strategy.aggregate_fit(1, results, [RuntimeError("lost")])
    assert params is None and metrics == {}
    assert getattr(strategy, "state", None) is state  # not even a new value
    assert strategy.last_round == 0  # the round counts as skipped
    assert strategy.diagnostics().keys() == diagnostics.keys()
    # the same round without the failure aggregates
    params, _ = strategy.aggregate_fit(1, results, [])
    assert params is not None


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_accept_failures_true_aggregates_the_results_it_has(name: str) -> None:
    strategy = STRATEGIES[name](initial_arrays=MODEL)
    if name == "qffl":
        strategy.pre_weights = MODEL
    results = [reply(broadcast(strategy), 0, 1.0)]
    params, _ = strategy.aggregate_fit(1, results, [RuntimeError("lost")])
    assert params is not None and strategy.last_round == 1


def test_results_are_taken_in_partition_order() -> None:
    """FedAvg's float sum in partition order whatever order the replies came in."""
    values = [np.float32(0.1), np.float32(0.7), np.float32(0.3)]
    a = FedAvg(initial_arrays=[np.zeros(1, np.float32)])
    b = FedAvg(initial_arrays=[np.zeros(1, np.float32)])
    like = broadcast(a)
    results = [reply(like, k, float(v)) for k, v in enumerate(values)]
    forward = parameters_to_ndarrays(a.aggregate_fit(1, results, [])[0])
    backward = parameters_to_ndarrays(b.aggregate_fit(1, results[::-1], [])[0])
    assert forward[0].tobytes() == backward[0].tobytes()


def test_skipped_rounds_count_in_ca_feds_tracker() -> None:
    """The first aggregation in round 3: rounds 1 and 2 are observed as all inactive."""
    strategy = Unbiased(initial_arrays=MODEL, alpha=ALPHA)
    strategy.aggregate_fit(3, [reply(broadcast(strategy), 1, 1.0)], [])
    tracker = strategy.state.tracker
    assert tracker.rounds == 3 and tracker.active_counts.tolist() == [0, 1]
    # client 1: 0 -> 0 (round 1 -> 2), 0 -> 1 (2 -> 3); client 0: 0 -> 0 twice
    assert tracker.transitions[1].tolist() == [[1, 1], [0, 0]]
    assert tracker.transitions[0].tolist() == [[2, 0], [0, 0]]
    pi, _ = strategy.diagnostics()["availability"]
    assert pi.tolist() == pytest.approx([1 / 5, 2 / 5])  # (count + 1) / (3 + 2)
