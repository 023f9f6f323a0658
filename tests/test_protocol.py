"""The wire contract (fedram_flwr/protocol.py): packing layouts, replies, the .npy codec."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common import bytes_to_ndarray, ndarray_to_bytes

from fedram_flwr import protocol
from fedram_flwr.protocol import (
    ClientReply,
    join_model_control,
    join_theta_t,
    npy_array,
    npy_bytes,
    split_model_control,
    split_theta_t,
)


def test_theta_t_is_theta_then_a_float64_scalar_array() -> None:
    theta = [np.ones((2, 3), np.float32), np.zeros(3, np.float32)]
    packed = join_theta_t(theta, 0.25)
    assert len(packed) == 3 and packed[-1].dtype == np.float64 and packed[-1].tolist() == [0.25]
    back, t = split_theta_t(packed)
    assert t == 0.25 and all(a is b for a, b in zip(back, theta))


def test_model_control_halves() -> None:
    x = [np.ones(2), np.ones(3)]
    c = [np.zeros(2), np.full(3, 2.0)]
    model, control = split_model_control(join_model_control(x, c))
    assert [a.tolist() for a in model] == [[1, 1], [1, 1, 1]]
    assert [a.tolist() for a in control] == [[0, 0], [2, 2, 2]]


def test_reply_decodes_on_demand_and_names_a_missing_metric() -> None:
    calls = []
    reply = ClientReply(3, 10, {"received-loss": 0.5}, lambda: calls.append(1) or [np.ones(1)])
    assert calls == [] and reply.metric("received-loss") == 0.5
    assert reply.arrays()[0].tolist() == [1.0] and calls == [1]
    with pytest.raises(ValueError, match="client 3 sent no 'local-optimum-loss'"):
        reply.metric(protocol.LOCAL_OPTIMUM)


def test_every_key_is_unique_and_kebab_case() -> None:
    keys = [v for k, v in vars(protocol).items() if k.isupper() and isinstance(v, str)]
    assert len(keys) == len(set(keys)) >= 20
    assert all(k == k.lower() and " " not in k and "_" not in k for k in keys)


def test_a_reply_partition_id_is_read_or_named_when_missing() -> None:
    assert protocol.reply_partition_id({protocol.PARTITION_ID: 3}, True, "FedAR") == 3
    assert protocol.reply_partition_id({}, False, "FedAvg") == -1
    with pytest.raises(ValueError, match="FedAR: .*no 'partition-id' fit metric"):
        protocol.reply_partition_id({}, True, "FedAR")


def test_replies_sort_by_partition_id_stably() -> None:
    replies = [protocol.ClientReply(p, 1, {}, list) for p in (2, -1, 0, -1)]
    ordered = protocol.in_partition_order(replies)
    assert [r.partition_id for r in ordered] == [-1, -1, 0, 2]
    assert ordered[0] is replies[1] and ordered[1] is replies[3]


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([1.5]),
        np.array(2.0),
        np.zeros((0, 3), np.float32),
        np.arange(5, dtype=">i4"),
        np.array([True, False]),
        np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        np.arange(12.0).reshape(3, 4)[:, ::2],
    ],
)
def test_npy_codec_is_flowers_bytes_and_arrays(array: np.ndarray) -> None:
    data = ndarray_to_bytes(array)
    assert npy_bytes(array) == data  # byte for byte what Flower sends
    for _ in range(2):  # the second time from the cached header
        ours, flowers = npy_array(data), bytes_to_ndarray(data)
        assert ours.dtype == flowers.dtype and ours.shape == flowers.shape
        assert np.array_equal(ours, flowers) and ours.flags.writeable
