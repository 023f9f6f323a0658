"""Where a client's mini-batches come from: a round's steps drawn at once (step_rows, the
stacked rounds' plan) are the batches its passes give one at a time (array_pass), draw
for draw, for every mix of data size, batch size, drop_last, epochs and steps."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedram_flwr.clients.batches import ArrayData, array_pass, step_rows


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 40),
    batch_size=st.integers(1, 12),
    drop_last=st.booleans(),
    epochs=st.integers(1, 3),
    steps=st.one_of(st.none(), st.integers(1, 20)),
    seed=st.integers(0, 2**31),
)
def test_a_planned_round_draws_the_batches_of_its_passes(
    n: int, batch_size: int, drop_last: bool, epochs: int, steps: int | None, seed: int
) -> None:
    x = np.arange(n, dtype=np.float32)[:, None]
    y = np.arange(n)
    one_pass = array_pass(x, y, batch_size, np.random.default_rng(seed), drop_last)
    expected: list[list[int]] = []
    lengths: list[int] = []
    for _ in range(epochs) if steps is None else itertools.count():
        taken = list(one_pass())
        if steps is not None:
            taken = taken[: steps - len(expected)]
        expected += [b[1].tolist() for b in taken]
        lengths.append(len(taken))
        if steps is not None and len(expected) == steps:
            break
    rows, sizes, pass_lengths = step_rows(
        n, batch_size, drop_last, np.random.default_rng(seed), epochs, steps
    )
    assert pass_lengths == lengths
    assert sizes.tolist() == [len(b) for b in expected]
    assert [r[:s].tolist() for r, s in zip(rows, sizes)] == expected
    assert rows.shape == (len(expected), batch_size)


def test_a_plan_is_drawn_from_the_clients_round_stream_and_batch_size() -> None:
    x, y = np.zeros((10, 2), np.float32), np.arange(10)
    data = ArrayData(x, y, batch_size=4, seed=7, partition_id=3)
    plan = data.plan({"server-round": 2, "batch-size": 3}, epochs=1, steps=None)
    firsts = [b[1].tolist() for b in data.passes({"server-round": 2, "batch-size": 3})()]
    assert [r[:s].tolist() for r, s in zip(plan.rows, plan.sizes)] == firsts
    assert plan.pass_lengths == [4] and plan.rows_of is None
    assert isinstance(plan.x, torch.Tensor) and plan.x.data_ptr() == x.ctypes.data


@pytest.mark.parametrize(("epochs", "steps", "match"), [(0, None, "local-epochs")])
def test_bad_rounds_are_refused(epochs: int, steps: int | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        step_rows(5, 2, False, np.random.default_rng(0), epochs, steps)
    with pytest.raises(ValueError, match="no mini-batch"):
        step_rows(0, 2, False, np.random.default_rng(0), 1, None)
