"""Partitions (the paper's rare-pattern split, Sec. 4), the Gaussian patterns of Fig. 2,
and image loading from IDX files, with a clear error when a dataset is missing."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from fedram_flwr import data as data_mod
from fedram_flwr.config import ScenarioError
from fedram_flwr.data import (
    DatasetNotFoundError,
    data_root,
    exclusive_classes,
    gaussian_patterns,
    load_federated_data,
    load_image_dataset,
    rare_pattern_client_classes,
    split_by_class_lists,
    subsample_per_class,
)
from fedram_flwr.experiment import rare_clients
from fedram_flwr.registry import with_overrides


# ----------------------------------------------------------- split by classes
def test_split_by_class_lists_uses_every_index_once() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, size=503)
    client_classes = [[0, 1], [1, 2], [2, 3, 4], [0], [4]]
    parts = split_by_class_lists(labels, client_classes, np.random.default_rng(1))
    assert len(parts) == len(client_classes)
    joined = np.concatenate(parts)
    assert np.array_equal(np.sort(joined), np.arange(labels.size))  # each index exactly once
    for part, classes in zip(parts, client_classes):
        assert set(labels[part]) <= set(classes)  # classes only go to their holders
        assert np.all(np.diff(part) > 0)  # sorted, no duplicates
    # A class shared by n holders is split evenly (sizes differ by at most one).
    for c in range(5):
        holders = [k for k, cl in enumerate(client_classes) if c in cl]
        sizes = [int(np.sum(labels[parts[k]] == c)) for k in holders]
        assert sum(sizes) == int(np.sum(labels == c))
        assert max(sizes) - min(sizes) <= 1


def test_split_by_class_lists_unheld_class_and_empty_client() -> None:
    labels = np.array([0, 1, 2, 0, 1, 2, 2])
    parts = split_by_class_lists(labels, [[0], [], [1]], np.random.default_rng(0))
    assert parts[0].tolist() == [0, 3]
    assert parts[1].size == 0 and parts[1].dtype == np.int64
    assert parts[2].tolist() == [1, 4]  # class 2 is held by nobody: unused


def test_split_by_class_lists_depends_on_rng_only() -> None:
    labels = np.repeat(np.arange(3), 20)
    cc = [[0, 1], [0, 1, 2], [2]]
    a = split_by_class_lists(labels, cc, np.random.default_rng(7))
    b = split_by_class_lists(labels, cc, np.random.default_rng(7))
    c = split_by_class_lists(labels, cc, np.random.default_rng(8))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


# --------------------------------------------------------- rare-pattern split
def test_rare_pattern_split_paper_setup() -> None:
    # K=30, M=90% -> 3 rare users, r=80% of 10 classes -> rare classes 8, 9.
    classes = rare_pattern_client_classes(30, 10, [27, 28, 29], 0.8)
    assert len(classes) == 30
    for k in range(27):
        assert classes[k] == [0, 1, 2, 3, 4, 5, 6, 7]
    for k in (27, 28, 29):
        assert classes[k] == [8, 9]
    assert exclusive_classes(classes, [27, 28, 29]) == (8, 9)


def test_rare_pattern_split_r90_and_explicit_rare_classes() -> None:
    classes = rare_pattern_client_classes(5, 10, [0], 0.9)
    assert classes[0] == [9] and classes[1] == list(range(9))
    classes = rare_pattern_client_classes(4, 10, [1, 3], 0.5, rare_classes=[5, 2])
    assert classes[1] == classes[3] == [2, 5]
    assert classes[0] == classes[2] == [0, 1, 3, 4, 6, 7, 8, 9]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rare_classes": [10]}, "data.rare_classes"),
        ({"rare_classes": list(range(10))}, "data.frequent_pattern_fraction"),
        ({"frequent_pattern_fraction": 1.0}, "data.frequent_pattern_fraction"),
    ],
)
def test_rare_pattern_split_rejects_degenerate_splits(kwargs, field) -> None:
    args = {"frequent_pattern_fraction": 0.8, **kwargs}
    with pytest.raises(ScenarioError, match=field):
        rare_pattern_client_classes(30, 10, [29], **args)


def test_exclusive_classes() -> None:
    cc = [[0, 1], [1, 2], [2, 3], [3, 4]]
    assert exclusive_classes(cc, [0]) == (0,)
    assert exclusive_classes(cc, [3]) == (4,)
    assert exclusive_classes(cc, [1, 2]) == (2,)  # 1 and 3 are also held outside
    assert exclusive_classes([[0, 1], [0, 1]], [0]) == ()
    assert exclusive_classes(cc, [2, 3]) == (3, 4)
    assert exclusive_classes(cc, [0, 1, 2, 3]) == (0, 1, 2, 3, 4)


def test_subsample_per_class_keeps_fraction_of_each_class() -> None:
    labels = np.repeat(np.arange(4), [100, 40, 10, 1])
    keep = subsample_per_class(labels, 0.25, np.random.default_rng(0))
    counts = np.bincount(labels[keep], minlength=4)
    assert counts.tolist() == [25, 10, 2, 1]  # round(2.5) = 2; at least one per class
    assert np.unique(keep).size == keep.size
    assert np.array_equal(subsample_per_class(labels, 1.0, None), np.arange(labels.size))


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


def test_federated_gaussian_fig2a(tiny_scenario) -> None:
    # rho = (0.5, 0.4, 0.1): the least likely user 2 is rare and holds pattern 2 alone.
    rare = rare_clients(tiny_scenario, 0)
    assert rare == (2,)
    fd = load_federated_data(tiny_scenario.data, rare, 0)
    assert fd.rare_classes == (2,)
    assert fd.client_classes == ((0,), (1,), (2,))
    for k in range(3):
        assert fd.client_y[k].tolist() == [k] * 40
        assert fd.client_x[k].shape == (40, 2)
    assert fd.input_shape == (2,) and fd.num_classes == 3
    assert np.bincount(fd.test_y).tolist() == [40, 40, 40]


def test_federated_data_checks_client_classes(tiny_scenario) -> None:
    cfg = with_overrides(tiny_scenario, {"data.client_classes": [[0], [1], [1, 2]]}).data
    fd = load_federated_data(cfg, (2,), 0)
    assert fd.rare_classes == (2,)
    assert len(fd.client_y[1]) + len(fd.client_y[2]) == 80
    bad = with_overrides(tiny_scenario, {"data.client_classes": [[0], [1], [7]]}).data
    with pytest.raises(ScenarioError, match=r"data\.client_classes: \[7\].*0\.\.2"):
        load_federated_data(bad, (2,), 0)


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


@pytest.fixture
def offline(monkeypatch, tmp_path: Path) -> list[str]:
    """No Debian package and no network: torchvision's download fails at once."""
    import torchvision

    calls: list[str] = []

    def failing_download(self):
        calls.append(type(self).__name__)
        raise RuntimeError("Error downloading: no network in tests")

    monkeypatch.setattr(torchvision.datasets.MNIST, "download", failing_download)
    monkeypatch.setattr(torchvision.datasets.FashionMNIST, "download", failing_download)
    monkeypatch.setattr(data_mod, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian-package")
    return calls


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


def test_federated_image_data_missing_raises(tmp_path: Path, offline, monkeypatch) -> None:
    from fedram_flwr.config import DataConfig

    monkeypatch.setenv("FEDRAM_DATA", str(tmp_path / "nothing-here"))
    cfg = DataConfig(dataset="fashion-mnist", root="ignored", num_clients=3)
    with pytest.raises(DatasetNotFoundError, match="nothing-here"):
        load_federated_data(cfg, (2,), 0)


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
    assert sorted(p.name for p in raw.iterdir()) == sorted(data_mod._IDX_FILES)  # no .part
    assert x.shape == (10000, 1, 28, 28) and x.dtype == np.float32
    assert np.bincount(y).tolist() == [1000] * 10  # the test set is balanced
    images = read_gz_idx(DEBIAN / "t10k-images-idx3-ubyte.gz")
    labels = read_gz_idx(DEBIAN / "t10k-labels-idx1-ubyte.gz")
    assert np.array_equal(y, labels)
    assert np.array_equal(np.rint(x[:, 0] * 255.0).astype(np.uint8), images)
    assert 0.0 <= x.min() and x.max() <= 1.0
