"""The one Flower base every strategy adapter shares (strategies/base.py): the failure
guard (``accept_failures=False``: nothing aggregated, state unchanged), partition-id
order, and the rule that rounds Flower skips still count."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays

from fedram_flwr.protocol import PARTITION_ID, RECEIVED_LOSS
from fedram_flwr.strategies import FedAvg, Unbiased
from fedram_flwr.strategies.rounds import FailedRoundsError
from tests.helpers import ALPHA, MODEL, STRATEGIES, N


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


# ------------------------------------ replies that are no update; failed rounds
def with_metric(result: tuple[None, FitRes], **metrics) -> tuple[None, FitRes]:
    _, res = result
    return None, FitRes(res.status, res.parameters, res.num_examples, {**res.metrics, **metrics})


def proxied(result: tuple[None, FitRes], cid: str) -> tuple[SimpleNamespace, FitRes]:
    return SimpleNamespace(cid=cid), result[1]


def aggregated(name: str, results: list) -> tuple[list[np.ndarray] | None, dict]:
    """What a fresh ``name`` strategy makes of one round of ``results`` (arrays or None,
    and the core's state or None)."""
    strategy = STRATEGIES[name](initial_arrays=MODEL)
    if name == "qffl":
        strategy.pre_weights = MODEL
    like = broadcast(strategy)
    params, _ = strategy.aggregate_fit(1, [r(like) for r in results], [])
    arrays = None if params is None else parameters_to_ndarrays(params)
    return arrays, getattr(strategy, "state", None)


def assert_same_round(name: str, results: list, expected: list) -> None:
    """``results`` give the strategy exactly what ``expected`` alone gives it."""
    got, state = aggregated(name, results)
    want, want_state = aggregated(name, expected)
    assert (got is None) == (want is None), name
    for a, b in zip(got or [], want or []):
        np.testing.assert_array_equal(a, b, err_msg=name)
    if state is not None:  # the core's whole state too (memory, tau, estimates)
        assert repr(state) == repr(want_state), name


def client(pid, value: float = 1.0, **metrics):
    return lambda like: proxied(with_metric(reply(like, pid, value), **metrics), f"c{pid}")


KEEP_NOTHING_PER_CLIENT = {"fedavg", "fed-cvar-avg", "qffl", "rfedfair"}  # (one alpha)


def test_the_strategies_that_know_n_are_the_ones_keeping_something_per_client() -> None:
    for name, make in STRATEGIES.items():
        n = make(initial_arrays=MODEL).client_count()
        assert n == (None if name in KEEP_NOTHING_PER_CLIENT else N), name


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_a_duplicated_reply_is_refused_not_counted_twice(name: str) -> None:
    """Two replies carrying partition id 1 (a reply delivered twice): neither is taken."""
    assert_same_round(name, [client(0), client(1, 3.0), client(1, 3.0)], [client(0)])


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize("bad_id", [-1, N])
def test_a_partition_id_out_of_range_is_refused(name: str, bad_id: int) -> None:
    """Id -1 would update the last client's memory, id N would index past it."""
    if bad_id == N and name in KEEP_NOTHING_PER_CLIENT:
        pytest.skip("keeps nothing per client: any id >= 0 is taken")
    assert_same_round(name, [client(0), client(bad_id, 3.0)], [client(0)])


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize(
    "bad",
    [client(1, np.nan), client(1, np.inf), client(1, 3.0, **{RECEIVED_LOSS: np.nan})],
    ids=["nan-update", "inf-update", "nan-received-loss"],
)
def test_a_non_finite_reply_is_refused(name: str, bad) -> None:
    assert_same_round(name, [client(0), bad], [client(0)])


def test_fedawe_keeps_no_nan_in_the_models_clients_restart_from(caplog) -> None:
    strategy = STRATEGIES["fedawe"](initial_arrays=MODEL)
    like = broadcast(strategy)
    results = [proxied(reply(like, 0, 1.0), "7"), proxied(reply(like, 1, np.nan), "8")]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.aggregate_fit(1, results, [])
    for pid in range(N):
        for array in strategy.core.client_arrays(strategy.state, pid):
            assert np.isfinite(array).all(), pid
    assert "round 1: FedAWE refused client 8: non-finite update: array 0" in caplog.text


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_failed_rounds_in_a_row_stop_with_the_first_error(name: str, caplog) -> None:
    """Rounds 1 and 3 fail, round 2 selects nobody (no count), round 4 fails: stop."""
    strategy = STRATEGIES[name](initial_arrays=MODEL)
    if name == "qffl":
        strategy.pre_weights = MODEL
    nan = [proxied(reply(broadcast(strategy), 0, np.nan), "5")]
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.aggregate_fit(1, [], [RuntimeError("to_xy is missing")])
        strategy.aggregate_fit(2, [], [])
        strategy.aggregate_fit(3, nan, [])
        with pytest.raises(FailedRoundsError) as err:
            strategy.aggregate_fit(4, [], [RuntimeError("again")])
    assert "3 rounds in a row (1..4) trained nothing" in str(err.value)
    assert "first error (round 1): 'RuntimeError: to_xy is missing'" in str(err.value)
    assert (
        "round 1: no update aggregated: 1 of 1 selected clients failed; first error: "
        "'RuntimeError: to_xy is missing'" in caplog.text
    )
    assert (
        "round 3: no update aggregated: 1 of 1 selected clients failed; first error: "
        + ("'client 5: non-finite update: array 0 (shape (2, 2)) holds 4 NaN or inf'")
        in caplog.text
    )


def test_max_failed_rounds_is_a_constructor_argument_and_a_good_round_resets() -> None:
    strategy = FedAvg(initial_arrays=MODEL, max_failed_rounds=2)
    good = [reply(broadcast(strategy), 0, 1.0)]
    strategy.aggregate_fit(1, [], [RuntimeError("a")])
    strategy.aggregate_fit(2, good, [RuntimeError("b")])  # one update taken: trained
    strategy.aggregate_fit(3, [], [RuntimeError("c")])
    with pytest.raises(FailedRoundsError, match=r"\(3..4\).*first error \(round 3\): 'Runtime"):
        strategy.aggregate_fit(4, [], [RuntimeError("d")])
    with pytest.raises(ValueError, match="max_failed_rounds: 0 is not allowed"):
        FedAvg(initial_arrays=MODEL, max_failed_rounds=0)
