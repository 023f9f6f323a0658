"""Device speeds and FedScale's completion time (fedram_flwr/clock/speeds.py): the formula
on hand-worked numbers and against FedScale's code transcribed, log-normal draws against
their parameters, the same seed giving the same devices, FedScale capacity records from
JSON with errors naming the client and the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedram_flwr.clock import (
    DeviceSpeeds,
    capacity_speeds,
    completion_time,
    lognormal_speeds,
    model_size_kbit,
    read_device_capacity,
)


def fedscale_get_completion_time(
    compute_speed, bandwidth, batch_size, local_steps, upload_size, download_size
):
    """FedScale's ClientMetadata.get_completion_time (fedscale/cloud/internal/
    client_metadata.py, commit 7ec441c), transcribed for one client."""
    augmentation_factor = 3.0
    return {
        "computation": augmentation_factor
        * batch_size
        * local_steps
        * float(compute_speed)
        / 1000.0,
        "communication": (upload_size + download_size) / float(bandwidth),
    }


def test_completion_time_on_hand_worked_numbers() -> None:
    # A model of 250,000 float32 parameters: 1,000,000 bytes = 1e6 / 1024 x 8 = 7812.5
    # kbit, sent down and back up: 15,625 kbit a round.
    size = model_size_kbit(4 * 250_000)
    assert size == 7812.5
    # Client 0: 20 ms/sample, 1000 kbit/s; client 1: 50 ms/sample, 5000 kbit/s.
    # Batch 32, 5 local steps: 3 x 32 x 5 = 480 sample-inferences.
    #   computation   0: 480 x 20 / 1000 = 9.6 s;  1: 480 x 50 / 1000 = 24 s
    #   communication 0: 15625 / 1000 = 15.625 s; 1: 15625 / 5000 = 3.125 s
    cost = completion_time(
        np.array([20.0, 50.0]),
        np.array([1000.0, 5000.0]),
        batch_size=32,
        local_steps=5,
        download_kbit=size,
        upload_kbit=size,
    )
    assert cost.computation.tolist() == [9.6, 24.0]
    assert cost.communication.tolist() == [15.625, 3.125]
    assert cost.total == pytest.approx([25.225, 27.125], rel=1e-15)
    # Per-client steps: client 1 takes 2 steps: 3 x 32 x 2 x 50 / 1000 = 9.6 s.
    per_client = completion_time(
        np.array([20.0, 50.0]),
        np.array([1000.0, 5000.0]),
        batch_size=32,
        local_steps=np.array([5, 2]),
        download_kbit=size,
        upload_kbit=0.0,
    )
    assert per_client.computation.tolist() == [9.6, 9.6]
    assert per_client.communication.tolist() == [7.8125, 1.5625]  # 7812.5 / 1000, / 5000


def test_fedscale_own_test_case() -> None:
    """FedScale's tests/cloud/internal/test_client_metadata.py::test_get_completion_time:
    1000 ms/sample, 1 kbit/s, batch 1, 1 step, 1 kbit each way -> 3 s and 2 s."""
    cost = completion_time(
        np.array([1000.0]), np.array([1.0]), batch_size=1, local_steps=1,
        download_kbit=1, upload_kbit=1,
    )  # fmt: skip
    assert (cost.computation[0], cost.communication[0]) == (3.0, 2.0)


def test_completion_time_equals_fedscale_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    compute = rng.lognormal(3.0, 1.0, 200)
    bandwidth = rng.lognormal(7.0, 1.5, 200)
    steps = rng.integers(1, 50, 200)
    cost = completion_time(
        compute, bandwidth, batch_size=20, local_steps=steps, download_kbit=8123.25,
        upload_kbit=4100.5,
    )  # fmt: skip
    for k in range(200):
        want = fedscale_get_completion_time(
            compute[k], bandwidth[k], 20, int(steps[k]), 4100.5, 8123.25
        )
        assert cost.computation[k] == want["computation"]
        assert cost.communication[k] == want["communication"]


def test_same_seed_same_devices_another_seed_others() -> None:
    laws = ((50.0, 0.5), (2000.0, 0.8))
    a, b = lognormal_speeds(8, 3, *laws), lognormal_speeds(8, 3, *laws)
    assert np.array_equal(a.compute_ms_per_sample, b.compute_ms_per_sample)
    assert np.array_equal(a.bandwidth_kbps, b.bandwidth_kbps)
    c = lognormal_speeds(8, 4, *laws)
    assert not np.any(a.compute_ms_per_sample == c.compute_ms_per_sample)
    # Client k's device does not depend on how many clients there are.
    few = lognormal_speeds(5, 3, *laws)
    assert np.array_equal(few.compute_ms_per_sample, a.compute_ms_per_sample[:5])
    assert np.array_equal(few.bandwidth_kbps, a.bandwidth_kbps[:5])
    # Compute and bandwidth are different draws.
    assert not np.allclose(np.log(a.compute_ms_per_sample / 50.0) / 0.5,
                           np.log(a.bandwidth_kbps / 2000.0) / 0.8)  # fmt: skip


@pytest.mark.parametrize(("median", "sigma"), [(50.0, 0.5), (3000.0, 1.2)])
def test_lognormal_median_and_sigma_match_the_parameters(median: float, sigma: float) -> None:
    n = 40_000
    speeds = lognormal_speeds(n, 11, (median, sigma), (median, sigma))
    for x in (speeds.compute_ms_per_sample, speeds.bandwidth_kbps):
        logs = np.log(x)
        # Standard errors: of a normal sample's median 1.2533 s / sqrt(n), of its standard
        # deviation s / sqrt(2n); 4 of them (fixed seed: the check is deterministic).
        assert abs(np.median(logs) - np.log(median)) < 4 * 1.2533 * sigma / np.sqrt(n)
        assert abs(logs.std(ddof=1) - sigma) < 4 * sigma / np.sqrt(2 * n)


def test_sigma_zero_gives_every_client_the_median_exactly() -> None:
    speeds = lognormal_speeds(6, 0, (40.0, 0.0), (1500.0, 0.0))
    uniform = DeviceSpeeds.uniform(6, 40.0, 1500.0)
    assert np.array_equal(speeds.compute_ms_per_sample, uniform.compute_ms_per_sample)
    assert np.array_equal(speeds.bandwidth_kbps, uniform.bandwidth_kbps)


def test_bad_laws_and_speeds_are_named() -> None:
    with pytest.raises(ValueError, match=r"compute\.median: 0\.0 is not a number > 0"):
        lognormal_speeds(3, 0, (0.0, 1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match=r"bandwidth\.sigma: -1\.0 is not a number >= 0"):
        lognormal_speeds(3, 0, (1.0, 1.0), (1.0, -1.0))
    with pytest.raises(ValueError, match=r"bandwidth_kbps\[1\]: 0\.0 is not a number > 0"):
        DeviceSpeeds(np.ones(2), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="one value per client"):
        DeviceSpeeds(np.ones(2), np.ones(3))


CAPACITY = {
    "12": {"computation": 80.5, "communication": 1200.0},
    "3": {"computation": 20.0, "communication": 9000.0},
    "7": {"computation": 45, "communication": 300},
}


def test_fedscale_capacity_from_json(tmp_path: Path) -> None:
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps(CAPACITY))
    capacity = read_device_capacity(path)
    speeds = capacity_speeds(capacity, 2)  # ascending ids: 3, 7
    assert speeds.compute_ms_per_sample.tolist() == [20.0, 45.0]
    assert speeds.bandwidth_kbps.tolist() == [9000.0, 300.0]
    chosen = capacity_speeds(capacity, 3, clients=(12, 3, 12))
    assert chosen.compute_ms_per_sample.tolist() == [80.5, 20.0, 80.5]


def test_bad_capacity_files_name_the_client_and_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="holds 3 clients; 4 are needed"):
        capacity_speeds(CAPACITY, 4)
    with pytest.raises(ValueError, match="clients: client 5 is not in"):
        capacity_speeds(CAPACITY, 1, clients=(5,))
    with pytest.raises(ValueError, match=r"client 3\.communication: 0 is not a number > 0"):
        capacity_speeds({"3": {"computation": 1, "communication": 0}}, 1)
    with pytest.raises(ValueError, match=r"client 3\.computation: missing or not a number"):
        capacity_speeds({"3": {"communication": 1}}, 1)
    with pytest.raises(ValueError, match="client 'a': ids must be integers"):
        capacity_speeds({"a": {}}, 1)
    with pytest.raises(ValueError, match="client 3 is given twice"):
        capacity_speeds({"3": {}, "03": {}}, 1)
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected an object mapping client ids"):
        read_device_capacity(tmp_path / "list.json")
    with pytest.raises(ValueError, match="device capacity file not found"):
        read_device_capacity(tmp_path / "missing.json")
