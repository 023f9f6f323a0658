"""Data sets from disk or generated (fedram_flwr/data/sources.py): the Gaussian patterns
of Fig. 2, image loading from IDX files (and the Debian Fashion-MNIST package), CIFAR-10
and SVHN read from tiny files in their published formats (checked against torchvision's
own readers, FedAR Sec. 6.1), with a clear error when a dataset is missing."""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torchvision
import yaml
from scipy.io import savemat

from fedram_flwr.data import (
    DatasetNotFoundError,
    data_root,
    gaussian_patterns,
    load_image_dataset,
    sources,
)
from fedram_flwr.registry import load_scenario, with_overrides
from fedram_flwr.registry.app_config import scenario_from_run_config
from tests.helpers import write_cifar10, write_svhn


# --------------------------------------------------------------- Gaussian data
def test_gaussian_patterns_centres_on_circle() -> None:
    x, y = gaussian_patterns(4, 2000, 0.6, np.random.default_rng(0))
    assert x.shape == (8000, 2) and x.dtype == np.float32
    assert y.dtype == np.int64 and np.bincount(y).tolist() == [2000] * 4
    expected = np.array([[3.0, 0.0], [0.0, 3.0], [-3.0, 0.0], [0.0, -3.0]])
    for c in range(4):
        pts = x[y == c]
        # Mean within ~5 standard errors (0.6 / sqrt(2000) = 0.013).
        np.testing.assert_allclose(pts.mean(0), expected[c], atol=0.07)
        np.testing.assert_allclose(pts.std(0), [0.6, 0.6], rtol=0.1)


# ------------------------------------------------------------------ IDX files
def write_idx_images(path: Path, images: np.ndarray) -> None:
    assert images.dtype == np.uint8 and images.ndim == 3
    header = struct.pack(">iiii", 2051, *images.shape)  # 0x00000803: uint8, 3 dims
    path.write_bytes(header + images.tobytes())


def write_idx_labels(path: Path, labels: np.ndarray) -> None:
    header = struct.pack(">ii", 2049, labels.size)  # 0x00000801: uint8, 1 dim
    path.write_bytes(header + labels.astype(np.uint8).tobytes())


def tiny_mnist(root: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(3)
    out = {}
    for split, n in (("train", 7), ("t10k", 4)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        images[0, 0, 0], images[0, 0, 1] = 0, 255
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        write_idx_images(raw / f"{split}-images-idx3-ubyte", images)
        write_idx_labels(raw / f"{split}-labels-idx1-ubyte", labels)
        out[split] = (images, labels)
    return out


@pytest.mark.parametrize("train", [True, False])
def test_load_mnist_from_idx_files(tmp_path: Path, train: bool, monkeypatch) -> None:
    import torchvision

    def no_download(self):  # the files are there: nothing may be downloaded
        raise AssertionError("download attempted")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", no_download)
    written = tiny_mnist(tmp_path)
    images, labels = written["train" if train else "t10k"]
    x, y = load_image_dataset("mnist", tmp_path, train=train)
    assert x.shape == (len(labels), 1, 28, 28) and x.dtype == np.float32
    assert y.shape == (len(labels),) and y.dtype == np.int64
    assert y.tolist() == labels.tolist()
    assert x.min() == 0.0 and x.max() == 1.0
    assert x[0, 0, 0, 0] == 0.0 and x[0, 0, 0, 1] == 1.0
    # Pixel p maps to p / 255, in the file's (row-major) order.
    np.testing.assert_allclose(x[:, 0], images / 255.0, rtol=0, atol=1e-7)
    np.testing.assert_allclose(x * 255.0, images[:, None].astype(np.float64), atol=1e-4)


def test_data_root_prefers_environment(monkeypatch, tmp_path: Path, no_data_env) -> None:
    assert data_root("some/where") == Path("some/where")
    assert data_root("~/d") == Path.home() / "d"
    monkeypatch.setenv("FEDRAM_DATA", str(tmp_path))
    assert data_root("some/where") == tmp_path


def test_missing_fashion_mnist_says_how_to_get_it(tmp_path: Path, offline) -> None:
    root = tmp_path / "empty"
    with pytest.raises(DatasetNotFoundError) as info:
        load_image_dataset("fashion-mnist", root, train=True)
    msg = str(info.value)
    assert offline == ["FashionMNIST"]
    assert isinstance(info.value, FileNotFoundError)
    assert "fashion-mnist not found under" in msg and str(root / "FashionMNIST" / "raw") in msg
    assert "apt-get" in msg and "dataset-fashion-mnist" in msg
    assert "$FEDRAM_DATA" in msg and "data.root" in msg
    assert "train-images-idx3-ubyte" in msg


def test_missing_mnist_has_no_apt_hint(tmp_path: Path, offline) -> None:
    with pytest.raises(DatasetNotFoundError) as info:
        load_image_dataset("mnist", tmp_path / "empty", train=False)
    msg = str(info.value)
    assert offline == ["MNIST"]
    assert "mnist not found" in msg and "apt-get" not in msg
    assert "$FEDRAM_DATA" in msg and "data.root" in msg


def test_partial_idx_files_count_as_missing(tmp_path: Path, offline) -> None:
    tiny_mnist(tmp_path)
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetNotFoundError):
        load_image_dataset("mnist", tmp_path, train=True)
    assert offline == ["MNIST"]


def read_gz_idx(path: Path) -> np.ndarray:
    with gzip.open(path) as fh:
        raw = fh.read()
    magic = struct.unpack(">i", raw[:4])[0]
    ndim = magic & 0xFF
    shape = struct.unpack(f">{ndim}i", raw[4 : 4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


DEBIAN = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(
    not (DEBIAN / "t10k-images-idx3-ubyte.gz").is_file(),
    reason="Debian package dataset-fashion-mnist is not installed",
)
def test_fashion_mnist_from_debian_package(tmp_path: Path, monkeypatch) -> None:
    import torchvision

    def no_download(self):
        raise AssertionError("download attempted although the Debian files exist")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", no_download)
    monkeypatch.setenv("FEDRAM_DATA", str(tmp_path))
    root = data_root("ignored")
    x, y = load_image_dataset("fashion-mnist", root, train=False)
    raw = tmp_path / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(sources._IDX_FILES)  # no .part
    assert x.shape == (10000, 1, 28, 28) and x.dtype == np.float32
    assert np.bincount(y).tolist() == [1000] * 10  # the test set is balanced
    images = read_gz_idx(DEBIAN / "t10k-images-idx3-ubyte.gz")
    labels = read_gz_idx(DEBIAN / "t10k-labels-idx1-ubyte.gz")
    assert np.array_equal(y, labels)
    assert np.array_equal(np.rint(x[:, 0] * 255.0).astype(np.uint8), images)
    assert 0.0 <= x.min() and x.max() <= 1.0


# ------------------------------------------------------------ CIFAR-10 and SVHN
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


def test_relative_data_root_resolves_against_the_working_directory_in_every_engine(
    tmp_path: Path, monkeypatch, offline, no_data_env
) -> None:
    """A relative data.root is made absolute when the scenario is loaded: the
    scenario ``fedram run`` hands the Flower engines holds the absolute path, so their
    ServerApp, loading it through the run config in its own working directory, reads the
    same MNIST files the in-process engine reads (it used to look in its app folder)."""
    work, elsewhere = tmp_path / "work", tmp_path / "flwr-home"
    written = tiny_mnist(work / "data")
    elsewhere.mkdir()
    raw = {"rounds": 1, "data": {"dataset": "mnist", "num_clients": 2, "root": "./data"}}
    raw["availability"] = {"oracle": "bernoulli", "params": {"p_min": 0.5}}
    (work / "s.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(work)
    scenario = load_scenario("s.yaml")
    assert scenario.data.root == str(work / "data")
    assert with_overrides(scenario, {"data.root": "other"}).data.root == str(work / "other")
    assert load_scenario(work / "s.yaml").to_dict()["data"]["root"] == str(work / "data")
    requested = tmp_path / "run" / "requested-scenario.yaml"  # as cli.py writes it
    requested.parent.mkdir()
    requested.write_text(yaml.safe_dump({**scenario.to_dict(), "seeds": [0]}))

    monkeypatch.chdir(elsewhere)
    seen = scenario_from_run_config.__wrapped__(str(requested), "")
    assert seen.data.root == str(work / "data")
    _, labels = load_image_dataset("mnist", data_root(seen.data.root), train=False)
    assert labels.tolist() == written["t10k"][1].tolist() and offline == []


def test_runs_decompressing_fashion_mnist_at_once_do_not_break_each_other(
    tmp_path: Path, monkeypatch
) -> None:
    """Two runs of a sweep started together both decompress the Debian files: while one
    copies, the other finishes the same file and renames it into place. Each must keep
    its own temporary file (a shared ``NAME.part`` was truncated and moved away under the
    first, whose rename then failed: seen with 6 runs started at once on a GPU machine)."""
    debian = tmp_path / "debian"
    debian.mkdir()
    for name in sources._IDX_FILES:
        with gzip.open(debian / f"{name}.gz", "wb") as f:
            f.write(name.encode() * 1000)
    monkeypatch.setattr(sources, "DEBIAN_FASHION_MNIST", debian)
    raw = tmp_path / "root" / "FashionMNIST" / "raw"
    copy, other_done = shutil.copyfileobj, []

    def copy_while_another_run_installs(src, dst, *args) -> None:
        if not other_done:  # the other run starts and finishes inside our first copy
            other_done.append(True)
            assert sources._install_debian_fashion_mnist(raw)
        copy(src, dst, *args)

    monkeypatch.setattr(sources.shutil, "copyfileobj", copy_while_another_run_installs)
    assert sources._install_debian_fashion_mnist(raw)
    assert sorted(p.name for p in raw.iterdir()) == sorted(sources._IDX_FILES)  # no .part
    for name in sources._IDX_FILES:
        assert (raw / name).read_bytes() == name.encode() * 1000
