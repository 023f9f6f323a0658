"""Round policies on hand-made finish times (fedram_flwr.clock.policy)."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.clock.policy import LateUpdate, apply_policy, arrived, over_selected

CLIENTS = np.array([4, 1, 7, 2, 9])
SECONDS = np.array([30.0, 12.0, 45.0, 12.0, 60.0])  # 1 and 2 tie at 12 s


def ids(a: np.ndarray) -> list[int]:
    return np.asarray(a).tolist()


def test_wait_all_uses_everyone_and_lasts_as_long_as_the_slowest() -> None:
    out = apply_policy("wait-all", CLIENTS, SECONDS)
    assert ids(out.used) == [1, 2, 4, 7, 9]
    assert out.late.size == out.dropped.size == 0
    assert out.duration == 60.0


def test_nobody_started_lasts_nothing() -> None:
    for kind, kw in (
        ("wait-all", {}),
        ("deadline", {"deadline_s": 5.0}),
        ("over-selection", {"select": 2}),
    ):
        out = apply_policy(kind, np.array([], int), np.array([]), **kw)
        assert out.used.size == 0 and out.duration == 0.0


def test_a_deadline_drops_who_finishes_after_it() -> None:
    out = apply_policy("deadline", CLIENTS, SECONDS, deadline_s=45.0)
    assert ids(out.used) == [1, 2, 4, 7]  # 45 s arrives exactly at the deadline: used
    assert ids(out.dropped) == [9] and out.late.size == 0
    assert out.duration == 45.0


def test_a_deadline_nobody_misses_ends_with_the_slowest() -> None:
    out = apply_policy("deadline", CLIENTS, SECONDS, deadline_s=100.0)
    assert out.duration == 60.0 and out.dropped.size == 0


def test_a_deadline_keeping_late_updates_says_when_they_arrive() -> None:
    out = apply_policy("deadline", CLIENTS, SECONDS, deadline_s=20.0, keep_late=True)
    assert ids(out.used) == [1, 2]
    assert ids(out.late) == [4, 7, 9] and out.late_seconds.tolist() == [30.0, 45.0, 60.0]
    assert out.dropped.size == 0 and out.duration == 20.0


def test_over_selection_uses_the_first_k_ties_by_client_id() -> None:
    out = apply_policy("over-selection", CLIENTS, SECONDS, select=1)
    assert ids(out.used) == [1]  # 1 and 2 both finish at 12 s: the lower id first
    assert ids(out.dropped) == [2, 4, 7, 9] and out.duration == 12.0
    out = apply_policy("over-selection", CLIENTS, SECONDS, select=3, keep_late=True)
    assert ids(out.used) == [1, 2, 4] and ids(out.late) == [7, 9]
    assert out.duration == 30.0
    out = apply_policy("over-selection", CLIENTS, SECONDS, select=9)  # fewer started
    assert ids(out.used) == [1, 2, 4, 7, 9] and out.duration == 60.0


@pytest.mark.parametrize(
    ("kind", "kw", "message"),
    [
        ("first", {}, "kind: 'first' is not allowed; allowed values: wait-all, deadline"),
        ("deadline", {}, "deadline_s: None is not a deadline > 0"),
        ("deadline", {"deadline_s": 0.0}, "deadline_s: 0.0 is not a deadline > 0"),
        ("over-selection", {"select": 0}, "select: 0 is not a number of updates >= 1"),
    ],
)
def test_bad_policies_name_the_setting(kind: str, kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply_policy(kind, CLIENTS, SECONDS, **kw)


def test_over_selection_starts_ceil_over_times_select_drawn_per_seed_and_round() -> None:
    available = np.arange(0, 40, 2)
    picked = over_selected(available, 10, 1.3, seed=3, server_round=5)
    assert picked.size == 13 and set(picked) <= set(available)
    assert ids(picked) == sorted(ids(picked))
    assert ids(over_selected(available, 10, 1.3, seed=3, server_round=5)) == ids(picked)
    assert ids(over_selected(available, 10, 1.3, seed=3, server_round=6)) != ids(picked)
    assert ids(over_selected(available[:5], 10, 1.3, 3, 5)) == ids(available[:5])  # all of them


def test_late_updates_arrive_in_the_round_that_ends_after_them() -> None:
    pending = (LateUpdate(5, 30.0, 1), LateUpdate(2, 12.0, 2), LateUpdate(8, 12.5, 1))
    came, still = arrived(pending, 12.5)
    assert [u.client for u in came] == [2, 8] and [u.client for u in still] == [5]
