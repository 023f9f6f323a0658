"""FedAR's data and models (Sec. 6.1): two classes per client, CIFAR-10 and SVHN read
from tiny files in their published formats (checked against torchvision's own
readers), LeNet-5 and ResNet-18 on their images."""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from scipy.io import savemat

from fedram_flwr.config import Scenario
from fedram_flwr.data import (
    DatasetNotFoundError,
    load_image_dataset,
    two_class_client_classes,
)
from fedram_flwr.experiment import Experiment
from fedram_flwr.models import build_model
from fedram_flwr.registry import with_overrides


@pytest.mark.parametrize("num_clients", [80, 90, 100, 110, 120])
def test_two_classes_per_client_split_every_class_evenly(num_clients: int) -> None:
    classes = two_class_client_classes(num_clients, 10)
    assert all(len(set(c)) == 2 for c in classes)
    holders = Counter(c for pair in classes for c in pair)
    assert set(holders.values()) == {2 * num_clients // 10}


def write_cifar10(root: Path, per_batch: int = 20) -> np.ndarray:
    """Five training batches and a test batch; returns the first batch's raw data."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    first = None
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [i % 10 for i in range(per_batch)]
        with (folder / name).open("wb") as fh:
            pickle.dump({"data": data, "labels": labels, "batch_label": name}, fh)
        first = data if first is None else first
    with (folder / "batches.meta").open("wb") as fh:
        pickle.dump({"label_names": [f"class{c}" for c in range(10)]}, fh)
    return first


def write_svhn(folder: Path, n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
    y = (np.arange(n) % 10 + 1).astype(np.uint8).reshape(-1, 1)  # 10 is the digit 0
    for name in ("train_32x32.mat", "test_32x32.mat"):
        savemat(folder / name, {"X": x, "y": y})
    return x, y


def test_cifar10_batches_read_like_torchvision(tmp_path: Path, monkeypatch) -> None:
    raw = write_cifar10(tmp_path)
    x, y = load_image_dataset("cifar10", tmp_path, train=True)
    assert x.shape == (100, 3, 32, 32) and x.dtype == np.float32 and y.dtype == np.int64
    # Channel-major rows: pixel (c, i, j) of image 0 is byte c * 1024 + i * 32 + j.
    assert x[0, 2, 5, 7] == raw[0, 2 * 1024 + 5 * 32 + 7] / np.float32(255.0)
    # torchvision checks the real files' MD5 sums; tiny files need that check off.
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *a, **k: True)
    ref = torchvision.datasets.CIFAR10(str(tmp_path), train=True, download=False)
    np.testing.assert_array_equal(np.rint(x * 255).astype(np.uint8), ref.data.transpose(0, 3, 1, 2))
    assert y.tolist() == list(ref.targets)
    x_test, _ = load_image_dataset("cifar10", tmp_path, train=False)
    assert x_test.shape == (20, 3, 32, 32)


def test_svhn_mat_reads_like_torchvision(tmp_path: Path, monkeypatch) -> None:
    raw_x, raw_y = write_svhn(tmp_path / "svhn")
    x, y = load_image_dataset("svhn", tmp_path, train=True)
    assert x.shape == (6, 3, 32, 32) and y.tolist() == [1, 2, 3, 4, 5, 6]
    assert x[4, 1, 3, 9] == raw_x[3, 9, 1, 4] / np.float32(255.0)
    monkeypatch.setattr(torchvision.datasets.SVHN, "_check_integrity", lambda self: True)
    ref = torchvision.datasets.SVHN(str(tmp_path / "svhn"), split="train", download=False)
    np.testing.assert_array_equal(np.rint(x * 255).astype(np.uint8), ref.data)
    assert y.tolist() == ref.labels.tolist()
    savemat(tmp_path / "svhn" / "test_32x32.mat", {"X": raw_x, "y": np.full((6, 1), 10)})
    assert load_image_dataset("svhn", tmp_path, train=False)[1].tolist() == [0] * 6


@pytest.mark.parametrize("name", ["cifar10", "svhn"])
def test_missing_files_say_how_to_get_them(tmp_path: Path, monkeypatch, name: str) -> None:
    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(torchvision.datasets, {"cifar10": "CIFAR10", "svhn": "SVHN"}[name], offline)
    with pytest.raises(DatasetNotFoundError, match="download failed.*copy"):
        load_image_dataset(name, tmp_path, train=True)


def test_two_class_cifar10_clients_train_lenet5(
    tmp_path: Path, monkeypatch, tiny_gaussian: Scenario
) -> None:
    write_cifar10(tmp_path)
    monkeypatch.setenv("FEDRAM_DATA", str(tmp_path))
    scenario = with_overrides(
        tiny_gaussian,
        {
            "data": {
                "dataset": "cifar10",
                "num_clients": 10,
                "partition": "two-classes",
                "frequent_fraction": 1.0,
            },
            "availability": {"oracle": "bernoulli", "params": {"p_min": 0.5}},
            "algorithm": {"name": "fedar", "params": {}},
            "training": {"lr": 0.1, "local_steps": 2, "batch_size": 4, "weight_decay": 1e-3},
            "model": {"name": "lenet5"},
        },
    )
    exp = Experiment(scenario, 0)
    # Client k holds classes k and k + 1 (mod 10); each class (10 images) is halved.
    assert exp.data.client_classes == tuple(tuple(sorted((k, (k + 1) % 10))) for k in range(10))
    assert [np.unique(y).tolist() for y in exp.data.client_y][9] == [0, 9]
    assert {len(y) for y in exp.data.client_y} == {10}
    arrays, n, metrics = exp.client(3).fit(exp.client(3).get_parameters({}), {"lr": 0.1})
    assert n == 10 and metrics["partition-id"] == 3 and np.isfinite(metrics["train-loss"])


def test_resnet18_on_svhn_images(tmp_path: Path) -> None:
    write_svhn(tmp_path / "svhn", n=2)
    x, _ = load_image_dataset("svhn", tmp_path, train=True)
    model = build_model("resnet18", x.shape[1:], 10, seed=0)
    assert model(torch.from_numpy(x)).shape == (2, 10)
    assert not list(model.buffers())  # GroupNorm: the parameters are the whole model
    with pytest.raises(ValueError, match="square"):
        build_model("lenet5", (1, 28, 28), 10, seed=0)
