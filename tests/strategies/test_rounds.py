"""The round policy's Flower-free checks (strategies/rounds.py): which replies are refused
(a bad or duplicated partition id, NaN or inf) and when failed rounds stop a run."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.scenario.config import DEFAULT_MAX_FAILED_ROUNDS
from fedram_flwr.strategies.rounds import (
    FailedRounds,
    FailedRoundsError,
    after_round,
    check_max_failed_rounds,
    nonfinite_array,
    nonfinite_metric,
    partition_problems,
    refusals,
)


def test_duplicated_and_out_of_range_ids_are_named_and_the_others_pass() -> None:
    why = partition_problems([0, 2, 2, -1, 3, None, None, 1.5, "1"], num_clients=3)
    assert why[0] is None and why[5] is None and why[6] is None  # no id: not checked
    assert why[1] == why[2] and "partition id 2 is reported by 2 replies" in why[1]
    assert why[3] == "partition id -1 is outside 0..2"  # would index the last client
    assert why[4] == "partition id 3 is outside 0..2"
    assert why[7] == "partition id 1.5 is not an integer"
    assert why[8] == "partition id '1' is not an integer"


def test_without_a_client_count_only_negative_ids_are_out_of_range() -> None:
    assert partition_problems([0, 10**6, -1, float("nan")], None) == [
        None,
        None,
        "partition id -1 is outside 0..N-1",
        "partition id nan is not an integer",
    ]
    assert partition_problems([1, 1.0], None)[0].startswith("partition id 1 is reported by 2")


def test_non_finite_arrays_and_metrics_are_named() -> None:
    good = [np.zeros(3, np.float32), np.arange(2)]
    assert nonfinite_array(good) is None
    bad = [np.zeros(3, np.float32), np.array([1.0, np.nan, np.inf])]
    assert nonfinite_array(bad) == "non-finite update: array 1 (shape (3,)) holds 2 NaN or inf"
    assert nonfinite_metric({"a": 1, "b": 0.5, "c": "x", "d": True, "e": [1.0, 2]}) is None
    assert nonfinite_metric({"a": 1, "loss": float("inf")}) == "non-finite metric 'loss' = inf"
    assert "'q' = [1.0, nan]" in nonfinite_metric({"q": [1.0, float("nan")]})


def test_refusals_decode_only_the_replies_whose_id_is_fine() -> None:
    decoded = []

    def decode(k: int, value: float):
        return lambda: decoded.append(k) or [np.full(2, value)]

    why = refusals(
        [0, 0, 1, 2],
        [{}, {}, {}, {"t": float("nan")}],
        [decode(0, 1.0), decode(1, 1.0), decode(2, np.inf), decode(3, 1.0)],
        num_clients=3,
    )
    assert decoded == [2, 3]  # the two replies of id 0 are refused already
    assert why[0] == why[1] and why[0].startswith("partition id 0 is reported by 2")
    assert why[2].startswith("non-finite update: array 0")
    assert why[3] == "non-finite metric 't' = nan"


def test_failed_rounds_in_a_row_stop_the_run_quoting_the_first_error() -> None:
    guard = FailedRounds(3)
    guard, line = after_round(guard, 1, ["client 0: ValueError: boom"], 0)
    assert guard.streak == 1 and line == (
        "round 1: no update aggregated: 1 of 1 selected clients failed; first error: "
        "'client 0: ValueError: boom' (failed round 1 in a row; the run stops at 3: "
        "max_failed_rounds)"
    )
    guard, line = after_round(guard, 2, [], 0)  # nobody selected: neither counts nor resets
    assert guard.streak == 1 and line is None
    guard, line = after_round(guard, 3, ["a", "b"], 0)
    assert guard.streak == 2 and "round 3: no update aggregated: 2 of 2 selected" in line
    with pytest.raises(FailedRoundsError) as err:
        after_round(guard, 4, ["c"], 0)
    message = str(err.value)
    assert message.startswith("3 rounds in a row (1..4) trained nothing because clients failed")
    assert "first error (round 1): 'client 0: ValueError: boom'" in message
    assert "max_failed_rounds" in message


def test_a_round_that_aggregates_ends_the_streak() -> None:
    guard, _ = after_round(FailedRounds(2), 1, ["x"], 0)
    guard, line = after_round(guard, 2, ["y"], 1)  # one failed, one taken: trained
    assert guard.streak == 0 and line is None
    guard, _ = after_round(guard, 3, ["z"], 0)
    assert (guard.streak, guard.first_round, guard.first_error) == (1, 3, "z")
    guard, _ = after_round(guard, 4, [], 2)
    assert guard.streak == 0


def test_with_accept_failures_off_one_failure_is_a_round_that_trained_nothing() -> None:
    guard, line = after_round(FailedRounds(2), 5, ["lost"], 3, accept_failures=False)
    assert guard.streak == 1
    assert "1 of 4 selected clients failed and accept_failures is False" in line


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3", None])
def test_max_failed_rounds_must_be_a_positive_integer(bad) -> None:
    with pytest.raises(ValueError, match=r"max_failed_rounds: .* give an integer >= 1"):
        check_max_failed_rounds(bad)
    with pytest.raises(ValueError, match="max_failed_rounds"):
        FailedRounds(bad)


def test_the_default_is_small() -> None:
    assert FailedRounds().limit == DEFAULT_MAX_FAILED_ROUNDS == 3
