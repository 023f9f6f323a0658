"""The named random streams (fedram_flwr/rng.py): one salt per stream."""

from __future__ import annotations

import numpy as np
import pytest

from fedram_flwr.rng import SALTS, stream


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
