"""CINIC-10 (fedram_flwr/data/cinic10.py): its published folder layout read into
CIFAR-10's arrays, the download into data.root, and the error when it cannot be had."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torchvision
from torchvision.datasets import utils

from fedram_flwr.data import CINIC10_URL, DatasetNotFoundError, load_image_dataset
from fedram_flwr.data.cinic10 import CINIC10_CLASSES, read_cinic10
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.registry import with_overrides
from fedram_flwr.scenario.config import Scenario
from tests.helpers import write_cinic10


def test_reads_the_published_layout_into_cifar10s_arrays(tmp_path: Path) -> None:
    written = write_cinic10(tmp_path / "CINIC-10")
    x, y = load_image_dataset("cinic10", tmp_path, train=True)
    assert x.shape == (20, 3, 32, 32) and x.dtype == np.float32 and y.dtype == np.int64
    assert y.tolist() == [c for c in range(10) for _ in range(2)]
    # Pixel (c, i, j) of image n is byte (i, j, c) of the n-th PNG, over 255.
    expected = np.stack(written["train"]).transpose(0, 3, 1, 2) / np.float32(255.0)
    np.testing.assert_array_equal(x, expected)
    x_test, y_test = load_image_dataset("cinic10", tmp_path, train=False)
    expected_test = np.stack(written["test"]).transpose(0, 3, 1, 2) / np.float32(255.0)
    np.testing.assert_array_equal(x_test, expected_test)
    grey = x_test[4]  # test/bird/n00_bird.png, greyscale: the three channels agree
    assert np.array_equal(grey[0], grey[1]) and np.array_equal(grey[0], grey[2])
    assert y_test.tolist() == y.tolist()


def test_labels_and_order_match_torchvisions_image_folder(tmp_path: Path) -> None:
    write_cinic10(tmp_path, per_class=3)
    x, y = read_cinic10(tmp_path, "valid")
    ref = torchvision.datasets.ImageFolder(str(tmp_path / "valid"))
    assert tuple(ref.classes) == CINIC10_CLASSES
    assert y.tolist() == [label for _, label in ref.samples]
    for n in (0, 7, 29):
        pixels = np.asarray(ref[n][0].convert("RGB")).transpose(2, 0, 1)
        np.testing.assert_array_equal(np.rint(x[n] * 255).astype(np.uint8), pixels)


def test_a_wrong_image_size_names_the_file(tmp_path: Path) -> None:
    write_cinic10(tmp_path, per_class=1)
    from PIL import Image

    bad = tmp_path / "train" / "dog" / "n00_dog.png"
    Image.new("RGB", (32, 31)).save(bad)
    with pytest.raises(ValueError, match=f"{bad}.*not a 32x32 image"):
        read_cinic10(tmp_path, "train")


def test_missing_files_are_downloaded_into_data_root(tmp_path: Path, monkeypatch) -> None:
    calls = []

    def fake_download(url, download_root, **kwargs):  # the archive unpacks train/ ...
        calls.append((url, Path(download_root), kwargs))
        write_cinic10(Path(download_root), per_class=1)

    monkeypatch.setattr(utils, "download_and_extract_archive", fake_download)
    x, y = load_image_dataset("cinic10", tmp_path, train=False)
    assert calls == [(CINIC10_URL, tmp_path / "CINIC-10", {"remove_finished": True})]
    assert x.shape == (10, 3, 32, 32) and y.tolist() == list(range(10))
    load_image_dataset("cinic10", tmp_path, train=True)
    assert len(calls) == 1  # present now: no second download


def test_offline_error_names_the_url_and_the_folder(tmp_path: Path, monkeypatch) -> None:
    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(utils, "download_and_extract_archive", offline)
    with pytest.raises(DatasetNotFoundError) as err:
        load_image_dataset("cinic10", tmp_path, train=True)
    msg = str(err.value)
    assert CINIC10_URL in msg and f"unpack it into {tmp_path / 'CINIC-10'}" in msg
    assert "download" in msg and "OSError" in msg


def test_an_archive_without_the_split_is_an_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(utils, "download_and_extract_archive", lambda *a, **k: None)
    with pytest.raises(DatasetNotFoundError, match="has no test/ folder with the classes"):
        load_image_dataset("cinic10", tmp_path, train=False)


def test_a_cinic10_scenario_trains_fedawes_cnn(
    tmp_path: Path, monkeypatch, tiny_gaussian: Scenario
) -> None:
    write_cinic10(tmp_path / "CINIC-10")
    monkeypatch.setenv("FEDRAM_DATA", str(tmp_path))
    scenario = with_overrides(
        tiny_gaussian,
        {
            "data": {
                "dataset": "cinic10",
                "num_clients": 10,
                "partition": "two-classes",
                "frequent_fraction": 1.0,
            },
            "availability": {"oracle": "bernoulli", "params": {"p_min": 0.5}},
            "algorithm": {"name": "fedavg", "params": {}},
            "training": {"lr": 0.05, "local_steps": 2, "batch_size": 2},
            "model": {"name": "fedawe-cnn-cinic10"},
        },
    )
    exp = Experiment(scenario, 0)
    assert exp.data.input_shape == (3, 32, 32) and len(exp.data.test_y) == 20
    client = exp.client(3)
    arrays, n, metrics = client.fit(client.get_parameters({}), {"lr": 0.05})
    assert n == 2 and np.isfinite(metrics["train-loss"]) and len(arrays) == 10
