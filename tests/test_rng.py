"""The named random streams (fedram_flwr/rng.py): one salt per stream."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedram_flwr.rng import SALTS, stream, streams


def test_every_stream_has_its_own_salt() -> None:
    shared = {s: [n for n, v in SALTS.items() if v == s] for s in SALTS.values()}
    assert {hex(s): names for s, names in shared.items() if len(names) > 1} == {}


def test_fedavg_s_subsample_does_not_replay_the_ram_relay() -> None:
    """Same (seed, round), different streams: FedAvg(S)'s draw is not the relay's."""
    relay = stream("ram-relay", 3, 7).random(8)
    subsample = stream("fedavg-s-subsample", 3, 7).random(8)
    assert not np.array_equal(relay, subsample)


def test_unknown_stream_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown random stream 'nope'.*ram-relay"):
        stream("nope", 0)


@pytest.mark.parametrize("keys", [(0,), (3, 17), (2**32 - 1, 5), (2**32, 5), (2**40 + 3, 1, 2)])
def test_streams_are_numpys_default_rng_of_the_key_list(keys) -> None:
    """Whatever form the entropy is handed to numpy in, a stream is default_rng([seed,
    *keys, salt]) (keys of one 32-bit word each and larger ones alike)."""
    seed, *rest = keys
    expected = np.random.default_rng([seed, *rest, SALTS["client-batches"]])
    got = stream("client-batches", seed, *rest)
    assert got.bit_generator.state == expected.bit_generator.state


def test_a_stream_key_that_is_no_integer_is_refused() -> None:
    with pytest.raises(TypeError):
        stream("client-batches", 0, 1.5)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
        min_size=1,
        max_size=20,
    )
)
def test_streams_seeded_together_draw_what_each_stream_draws(keys) -> None:
    """numpy's seeding vectorised (SeedSequence's mixing, PCG64's initial state): every
    generator's state and draws equal default_rng's for its entropy."""
    for rng, k in zip(streams("client-batches", keys), keys, strict=True):
        own = stream("client-batches", *k)
        assert rng.bit_generator.state == own.bit_generator.state
        assert rng.permutation(33).tolist() == own.permutation(33).tolist()


def test_streams_that_do_not_fit_the_fast_seeding_are_each_their_own(monkeypatch) -> None:
    from fedram_flwr import rng as module

    short = [(3, 4), (3, 5)]  # (seed, round) + salt: three words
    assert [g.integers(1 << 30) for g in streams("ram-relay", short)] == [
        stream("ram-relay", *k).integers(1 << 30) for k in short
    ]
    keys = [(0, 1, 2), (0, 1, 3)]
    monkeypatch.setattr(module, "pcg64_states", lambda e: [(1, 3)] * len(e))  # numpy changed
    assert [g.random() for g in streams("client-batches", keys)] == [
        stream("client-batches", *k).random() for k in keys
    ]
    with pytest.raises(ValueError, match="unknown random stream"):
        list(streams("no-such-stream", keys))
