"""The composition root (fedram_flwr/engines/experiment.py): the clients' one shared model, and
``training.device``: a scenario on another device agrees with the CPU run to
:data:`DEVICE_ATOL`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines import run_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import SERVER_ROUND
from fedram_flwr.registry import scenario_from_dict
from tests.helpers import TINY_GAUSSIAN, final_arrays, relayed

# Largest |GPU - CPU| difference allowed in the final arrays of TINY_GAUSSIAN (logistic
# regression, 6 rounds of 2 epochs): float32 sums in another order (cuBLAS vs. MKL),
# TF32 off (resolve_device); the differences seen are of order 1e-7.
DEVICE_ATOL = 1e-4


def tiny(**training) -> dict:
    return {**TINY_GAUSSIAN, "training": {**TINY_GAUSSIAN["training"], **training}}


def test_clients_share_one_model_reset_to_the_initial_weights() -> None:
    fedavg = {**TINY_GAUSSIAN, "algorithm": {"name": "fedavg"}}
    exp = Experiment(scenario_from_dict(fedavg), 0)
    initial = get_weights(exp.new_model())
    first = exp.client(0)
    arrays, _, _ = first.fit(initial, {SERVER_ROUND: 1})
    assert not np.array_equal(arrays[0], initial[0])  # it trained the shared model
    second = exp.client(1)
    assert second.model is first.model
    assert all(np.array_equal(a, b) for a, b in zip(second.get_parameters({}), initial))


def assert_devices_agree(device: str, tmp_path: Path) -> None:
    cpu = run_in_process(scenario_from_dict(tiny(device="cpu")), 0, tmp_path / "cpu")
    other = run_in_process(scenario_from_dict(tiny(device=device)), 0, tmp_path / device)
    for a, b in zip(final_arrays(cpu), final_arrays(other), strict=True):
        np.testing.assert_allclose(b, a, rtol=0, atol=DEVICE_ATOL)
    assert relayed(cpu) == relayed(other)


def test_auto_device_on_this_machine_agrees_with_cpu(tmp_path: Path) -> None:
    """``auto``: the CPU here (bit for bit), the GPU where torch sees one."""
    assert_devices_agree("auto", tmp_path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_agrees_with_cpu(tmp_path: Path) -> None:
    assert_devices_agree("cuda", tmp_path)
    exp = Experiment(scenario_from_dict(tiny(device="cuda")), 0)
    assert next(exp.client(0).model.parameters()).device.type == "cuda"
