"""The ERM client (clients/erm.py), the base every client trains with: one full-batch
SGD step by hand, the fit config's overrides, and its properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from fedram_flwr.clients import ERMClient
from fedram_flwr.clients.models import build_model, get_weights
from fedram_flwr.protocol import NUM_EXAMPLES, PARTITION_ID


def test_erm_client_one_full_batch_step_by_hand() -> None:
    """One epoch of one full batch: theta <- theta - lr grad f(theta), with the fit
    config's ``lr`` (0.1) overriding the client's default (0.5)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((10, 2)).astype(np.float32)
    y = (np.arange(10) % 3).astype(np.int64)
    theta = get_weights(build_model("logreg", (2,), 3, seed=1))
    w = torch.tensor(theta[0], requires_grad=True)
    b = torch.tensor(theta[1], requires_grad=True)
    f = F.cross_entropy(torch.from_numpy(x) @ w.T + b, torch.from_numpy(y))
    g_w, g_b = torch.autograd.grad(f, (w, b))

    client = ERMClient(
        partition_id=5,
        model=build_model("logreg", (2,), 3, seed=0),
        x=x,
        y=y,
        lr=0.5,
        local_epochs=1,
        batch_size=len(y),
        seed=0,
    )
    arrays, n, metrics = client.fit(theta, {"server-round": 1, "lr": 0.1})
    assert n == 10 and metrics[PARTITION_ID] == 5
    assert metrics["train-loss"] == pytest.approx(f.item(), rel=1e-6)
    np.testing.assert_allclose(arrays[0], theta[0] - 0.1 * g_w.numpy(), atol=1e-6)
    np.testing.assert_allclose(arrays[1], theta[1] - 0.1 * g_b.numpy(), atol=1e-6)
    assert client.get_properties({}) == {PARTITION_ID: 5, NUM_EXAMPLES: 10}


def test_a_reply_kept_as_arrays_reads_as_its_encoded_reply() -> None:
    """fit_res(..., encode=False): the same bytes when read, the same arrays decoded
    (fresh copies: writing them leaves the reply as it was)."""
    from flwr.common import parameters_to_ndarrays

    from fedram_flwr.clients.erm import ArrayParameters, fit_res
    from fedram_flwr.protocol import parameter_arrays

    rng = np.random.default_rng(0)
    stack = rng.standard_normal((3, 4, 5)).astype(np.float32)
    arrays = [stack[1], np.arange(4, dtype=np.int64)]
    result = (arrays, 7, {PARTITION_ID: 1})
    encoded, kept = fit_res(result), fit_res(result, encode=False)
    assert isinstance(kept.parameters, ArrayParameters)
    assert kept.parameters.tensors == encoded.parameters.tensors
    assert kept.parameters.tensor_type == encoded.parameters.tensor_type
    assert (kept.num_examples, kept.metrics, kept.status) == (7, {PARTITION_ID: 1}, encoded.status)
    for ours, flowers in zip(
        parameter_arrays(kept.parameters), parameters_to_ndarrays(encoded.parameters)
    ):
        np.testing.assert_array_equal(ours, flowers)
        assert ours.dtype == flowers.dtype and ours.flags.c_contiguous
    parameter_arrays(kept.parameters)[0][:] = 0.0
    np.testing.assert_array_equal(kept.parameters.arrays[0], stack[1])
    with pytest.raises(AttributeError, match="read-only"):
        kept.parameters.tensors = []
