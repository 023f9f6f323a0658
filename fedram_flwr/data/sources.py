"""Data sets read from disk or generated.

Image datasets (Fashion-MNIST, MNIST) load through torchvision from a data root; the
Debian package ``dataset-fashion-mnist`` is used when present, torchvision downloads
on machines with internet, and otherwise :class:`DatasetNotFoundError` says both ways
to get the files. CIFAR-10 and SVHN (FedAR Sec. 6.1) are fetched by torchvision the
same way and read from their published formats here; CINIC-10 (FedAWE Sec. 6) is
fetched and read by :mod:`~fedram_flwr.data.cinic10`. The 2-D Gaussian patterns of
Fig. 2 and LEAF Synthetic(gamma, delta) (CA-Fed Sec. V-A b) are generated.
"""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np

from fedram_flwr.data.cinic10 import load_cinic10
from fedram_flwr.data.files import DatasetNotFoundError, fetch_into, writable_folder
from fedram_flwr.scenario.config import ScenarioError

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
_TORCHVISION_CLASS = {"fashion-mnist": "FashionMNIST", "mnist": "MNIST"}
_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def gaussian_patterns(
    num_classes: int,
    samples_per_class: int,
    std: float,
    rng: np.random.Generator,
    centres: Sequence[Sequence[float]] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """2-D Gaussian blobs, one per class (Fig. 2); centres default to a circle of
    radius 3."""
    if centres is None:
        angles = 2 * np.pi * np.arange(num_classes) / num_classes
        centres = 3.0 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    centres = np.asarray(centres, dtype=float)
    if centres.shape != (num_classes, 2):
        raise ScenarioError(
            f"data.centres: need {num_classes} points [x, y] (one per class), "
            f"got shape {centres.shape}"
        )
    y = np.repeat(np.arange(num_classes), samples_per_class)
    x = centres[y] + std * rng.standard_normal((y.size, 2))
    return x.astype(np.float32), y.astype(np.int64)


def leaf_synthetic(
    num_clients: int,
    gamma: float,
    delta: float,
    dim: int,
    num_classes: int,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """LEAF Synthetic(gamma, delta) (Li et al., "Federated Optimization in Heterogeneous
    Networks" (FedProx), MLSys 2020, Sec. 5.1; CA-Fed Sec. V-A b): per client k,
    u_k ~ N(0, gamma^2) and B_k ~ N(0, delta^2); a local model W_k ~ N(u_k, 1)
    (dim x C), b_k ~ N(u_k, 1); features x ~ N(v_k, diag(j^-1.2)) with v_k ~ N(B_k, 1)
    per coordinate; labels y = argmax(x W_k + b_k). gamma sets how much the local models
    differ, delta how much the local features do. Sizes lognormal(4, 2) + 50, as in the
    FedProx generator. Returns each client's (x, y)."""
    sizes = rng.lognormal(4, 2, num_clients).astype(int) + 50
    u = rng.normal(0.0, gamma, num_clients)
    b_mean = rng.normal(0.0, delta, num_clients)
    scale = np.arange(1, dim + 1) ** -0.6  # sqrt of the diagonal covariance j^-1.2
    xs, ys = [], []
    for k in range(num_clients):
        w = rng.normal(u[k], 1.0, (dim, num_classes))
        b = rng.normal(u[k], 1.0, num_classes)
        v = rng.normal(b_mean[k], 1.0, dim)
        x = v + scale * rng.standard_normal((sizes[k], dim))
        xs.append(x.astype(np.float32))
        ys.append(np.argmax(x @ w + b, axis=1).astype(np.int64))
    return xs, ys


def data_root(cfg_root: str) -> Path:
    """``$FEDRAM_DATA`` if set, else the scenario's ``data.root``."""
    return Path(os.environ.get("FEDRAM_DATA", cfg_root)).expanduser()


def _install_debian_fashion_mnist(raw: Path) -> bool:
    """Decompress the Debian package's files into torchvision's raw folder. Runs started
    together (a sweep's processes) may do this at once: each writes its own temporary
    file and renames it into place, so none truncates or moves another's."""
    if not all((DEBIAN_FASHION_MNIST / f"{name}.gz").is_file() for name in _IDX_FILES):
        return False
    raw.mkdir(parents=True, exist_ok=True)
    for name in _IDX_FILES:
        target = raw / name
        if not target.is_file():
            fd, tmp = tempfile.mkstemp(dir=raw, prefix=f"{name}.", suffix=".part")
            try:
                with (
                    os.fdopen(fd, "wb") as dst,
                    gzip.open(DEBIAN_FASHION_MNIST / f"{name}.gz") as src,
                ):
                    shutil.copyfileobj(src, dst)
                os.replace(tmp, target)  # never a half-written file under its real name
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
    return True


_CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_SVHN_FILE = {True: "train_32x32.mat", False: "test_32x32.mat"}


def read_cifar10(folder: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10's python version (``cifar-10-batches-py``): pickled batches with
    ``data`` (N x 3072 uint8, channel-major 32x32 images) and ``labels``. Returns
    float32 (N, 3, 32, 32) in [0, 1] and int64 labels."""
    xs, ys = [], []
    for name in _CIFAR10_TRAIN if train else ("test_batch",):
        with (folder / name).open("rb") as fh:
            batch = pickle.load(fh, encoding="latin1")
        xs.append(np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch["labels"], dtype=np.int64))
    return np.concatenate(xs).astype(np.float32) / 255.0, np.concatenate(ys)


def read_svhn(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """SVHN's cropped digits (``train_32x32.mat`` / ``test_32x32.mat``): ``X`` is
    (32, 32, 3, N) uint8 and ``y`` (N, 1) in 1..10, 10 standing for the digit 0. Returns
    float32 (N, 3, 32, 32) in [0, 1] and labels 0..9, as torchvision's ``SVHN``."""
    from scipy.io import loadmat

    mat = loadmat(path)
    x = np.transpose(mat["X"], (3, 2, 0, 1)).astype(np.float32) / 255.0
    return x, mat["y"].reshape(-1).astype(np.int64) % 10


def load_colour_dataset(name: str, root: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 (``root/cifar-10-batches-py``) or SVHN (``root/svhn``); missing files
    are downloaded by torchvision (which checks their MD5 sums), then read here."""
    import torchvision

    if name == "cifar10":
        folder = root / "cifar-10-batches-py"
        files = _CIFAR10_TRAIN if train else ("test_batch",)
        fetch = partial(torchvision.datasets.CIFAR10, str(root), train=train, download=True)
    else:
        folder, files = root / "svhn", (_SVHN_FILE[train],)
        split = "train" if train else "test"
        fetch = partial(torchvision.datasets.SVHN, str(folder), split=split, download=True)
    if not all((folder / f).is_file() for f in files):
        how = (
            "run once on a machine with internet (torchvision downloads it into "
            f"data.root), or copy {', '.join(files)} into {folder}"
        )
        fetch_into(folder, name, fetch, how)
    if name == "cifar10":
        return read_cifar10(folder, train)
    return read_svhn(folder / _SVHN_FILE[train])


def load_image_dataset(name: str, root: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """Images as float32 (N, C, H, W) in [0, 1] and int64 labels, via torchvision."""
    if name in ("cifar10", "svhn"):
        return load_colour_dataset(name, root, train)
    if name == "cinic10":
        return load_cinic10(root, train)
    import torchvision

    cls = getattr(torchvision.datasets, _TORCHVISION_CLASS[name])
    raw = root / _TORCHVISION_CLASS[name] / "raw"
    have = all((raw / f).is_file() for f in _IDX_FILES)
    if not have:
        writable_folder(raw, name)
    if not have and name == "fashion-mnist":
        have = _install_debian_fashion_mnist(raw)
    try:
        ds = cls(str(root), train=train, download=not have)
    except Exception as err:  # noqa: BLE001 - any download failure means "not here"
        hint = (
            "install Debian's package (`apt-get update && apt-get install -y "
            "dataset-fashion-mnist`, files in /usr/share/datasets/fashion-mnist) or "
            if name == "fashion-mnist"
            else ""
        )
        raise DatasetNotFoundError(
            f"{name} not found under {raw} and the download failed ({err.__class__.__name__}). "
            f"To get it: {hint}run once on a machine with internet (torchvision downloads "
            f"it into data.root), or copy the four IDX files ({', '.join(_IDX_FILES)}) "
            f"into {raw}. Set data.root or $FEDRAM_DATA to use another folder."
        ) from err
    x = ds.data.numpy().astype(np.float32)[:, None] / 255.0
    y = ds.targets.numpy().astype(np.int64)
    return x, y
