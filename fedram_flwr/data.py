"""Datasets and federated partitions.

Image datasets (Fashion-MNIST, MNIST) load through torchvision from a data root; the
Debian package ``dataset-fashion-mnist`` is used when present, torchvision downloads
on machines with internet, and otherwise :class:`DatasetNotFoundError` says both ways
to get the files. CIFAR-10 and SVHN (FedAR Sec. 6.1) are fetched by torchvision the
same way and read from their published formats here. The 2-D Gaussian patterns of
Fig. 2 and LEAF Synthetic(gamma, delta) (CA-Fed Sec. V-A b) are generated.

Partition (Fed-CVaR-Avg paper, Sec. 4): the M% most frequent users share r% of the
patterns (classes); the remaining (100 - r)% of the data goes, uniformly, to the
(100 - M)% least frequent ("rare") users. Fig. 2a/2b give explicit classes per client.
"""

from __future__ import annotations

import gzip
import os
import pickle
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np

from fedram_flwr.config import DataConfig, ScenarioError
from fedram_flwr.rng import stream

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
_TORCHVISION_CLASS = {"fashion-mnist": "FashionMNIST", "mnist": "MNIST"}
_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are missing and could not be fetched."""


@dataclass(frozen=True)
class FederatedData:
    """Client training sets, the server's test set, which patterns are rare, and each
    client's test set (``client_test``: indices into the server's test set)."""

    client_x: list[np.ndarray]
    client_y: list[np.ndarray]
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    client_classes: tuple[tuple[int, ...], ...]
    rare_clients: tuple[int, ...]
    rare_classes: tuple[int, ...]
    client_test: tuple[np.ndarray, ...]

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.test_x.shape[1:])


# ----------------------------------------------------------------- pure functions
def split_by_class_lists(
    labels: np.ndarray, client_classes: Sequence[Sequence[int]], rng: np.random.Generator
) -> list[np.ndarray]:
    """Indices per client: each class's samples are shuffled and split evenly among
    the clients that list it (a class held by one client goes to it whole)."""
    holders: dict[int, list[int]] = {}
    for client, classes in enumerate(client_classes):
        for c in classes:
            holders.setdefault(int(c), []).append(client)
    parts: list[list[np.ndarray]] = [[] for _ in client_classes]
    for c in sorted(holders):
        idx = rng.permutation(np.flatnonzero(labels == c))
        for client, chunk in zip(holders[c], np.array_split(idx, len(holders[c]))):
            parts[client].append(chunk)
    return [np.sort(np.concatenate(p)) if p else np.empty(0, np.int64) for p in parts]


def rare_pattern_client_classes(
    num_clients: int,
    num_classes: int,
    rare_clients: Sequence[int],
    frequent_pattern_fraction: float,
    rare_classes: Sequence[int] | None = None,
) -> list[list[int]]:
    """Classes per client for the paper's split: frequent users share the r% frequent
    patterns, rare users share the rest (default: the last classes)."""
    if rare_classes is None:
        num_frequent = round(num_classes * frequent_pattern_fraction)
        rare_classes = list(range(num_frequent, num_classes))
    bad = [c for c in rare_classes if not 0 <= c < num_classes]
    if bad:
        raise ScenarioError(
            f"data.rare_classes: {bad} are not classes; allowed values: 0..{num_classes - 1}"
        )
    if not rare_classes or len(set(rare_classes)) >= num_classes:
        raise ScenarioError(
            "data.frequent_pattern_fraction / data.rare_classes: the split must leave at "
            f"least one frequent and one rare class among {num_classes}"
        )
    frequent = [c for c in range(num_classes) if c not in set(rare_classes)]
    rare_set = set(rare_clients)
    return [sorted(rare_classes) if k in rare_set else frequent for k in range(num_clients)]


def two_class_client_classes(num_clients: int, num_classes: int) -> list[list[int]]:
    """Two distinct classes per client (FedAR Sec. 6.1): client k holds k mod C and
    (k + s_k) mod C with s_k = 1 + (k // C) mod (C - 1). Each block of C consecutive
    clients holds every class twice, so when C divides N every class is split among
    2N / C clients and, with balanced classes, every client gets as many samples."""
    return [
        sorted({k % num_classes, (k + 1 + (k // num_classes) % (num_classes - 1)) % num_classes})
        for k in range(num_clients)
    ]


def exclusive_classes(
    client_classes: Sequence[Sequence[int]], clients: Sequence[int]
) -> tuple[int, ...]:
    """Classes held only by ``clients`` (the rare users' patterns)."""
    inside = {c for k in clients for c in client_classes[k]}
    outside = {c for k, cl in enumerate(client_classes) if k not in set(clients) for c in cl}
    return tuple(sorted(inside - outside))


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


def dirichlet_partition(
    labels: np.ndarray,
    num_clients: int,
    concentration: float,
    rng: np.random.Generator,
    max_draws: int = 100,
) -> list[np.ndarray]:
    """Indices per client: each class's shuffled samples go to the clients in proportions
    drawn from a symmetric Dirichlet(varsigma) (CA-Fed Sec. V-A b, following Wang et al.,
    "Federated Learning with Matched Averaging", ICLR 2020). The whole draw is repeated,
    at most ``max_draws`` times, until every client holds at least one sample."""
    classes = np.unique(labels)
    for _ in range(max_draws):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            share = rng.dirichlet(np.full(num_clients, concentration))
            cuts = np.round(np.cumsum(share)[:-1] * idx.size).astype(int)
            for part, chunk in zip(parts, np.split(idx, cuts)):
                part.append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(p.size for p in out) > 0:
            return out
    raise ScenarioError(
        f"data.dirichlet_concentration: {max_draws} Dirichlet({concentration:g}) draws all "
        f"left a client without samples; use fewer clients or a larger concentration"
    )


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


def split_train_test(
    x: np.ndarray, y: np.ndarray, train_fraction: float, rng: np.random.Generator
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Shuffle one client's samples and keep the first ``train_fraction`` for training
    (LEAF's per-client split; the FedProx generator keeps 90%)."""
    order = rng.permutation(len(y))
    cut = int(train_fraction * len(y))
    train, test = order[:cut], order[cut:]
    return (x[train], y[train]), (x[test], y[test])


def split_test_like(
    train_labels: Sequence[np.ndarray], test_y: np.ndarray, rng: np.random.Generator
) -> list[np.ndarray]:
    """Each client's share of a pooled test set, with its training label skew: every
    class's test samples, shuffled, go to the clients in proportion to how many samples
    of that class each holds for training (classes nobody trains on go to nobody)."""
    parts: list[list[np.ndarray]] = [[] for _ in train_labels]
    for c in np.unique(test_y):
        share = np.array([np.sum(y == c) for y in train_labels], dtype=float)
        if share.sum() == 0:
            continue
        idx = rng.permutation(np.flatnonzero(test_y == c))
        cuts = np.round(np.cumsum(share)[:-1] / share.sum() * idx.size).astype(int)
        for part, chunk in zip(parts, np.split(idx, cuts)):
            part.append(chunk)
    return [np.sort(np.concatenate(p)) if p else np.empty(0, np.int64) for p in parts]


def split_fractions(
    n: int, fractions: Sequence[float], rng: np.random.Generator
) -> list[np.ndarray]:
    """A random split of range(n) into consecutive parts of the given fractions (RC-FL
    Sec. 6: 80% training, 10% validation, 10% test per client)."""
    cuts = np.round(np.cumsum(fractions)[:-1] * n).astype(int)
    return np.split(rng.permutation(n), cuts)


def keep_and_relabel(
    x: np.ndarray, y: np.ndarray, classes: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The samples of ``classes`` only, relabelled 0..k-1 in the order given."""
    new = np.full(max(int(y.max()), *classes) + 1, -1, dtype=np.int64)
    new[list(classes)] = np.arange(len(classes))
    keep = np.isin(y, list(classes))
    return x[keep], new[y[keep]]


def blocks(sizes: Sequence[int]) -> list[np.ndarray]:
    """Index ranges of consecutive blocks of these sizes (clients' concatenated test sets)."""
    ends = np.cumsum(sizes)
    return [np.arange(e - s, e) for s, e in zip(sizes, ends)]


def subsample_per_class(
    labels: np.ndarray, fraction: float, rng: np.random.Generator
) -> np.ndarray:
    """Indices keeping ``fraction`` of every class (scaled-down runs)."""
    if fraction >= 1.0:
        return np.arange(labels.size)
    keep = [
        rng.permutation(np.flatnonzero(labels == c))[
            : max(1, round(fraction * np.sum(labels == c)))
        ]
        for c in np.unique(labels)
    ]
    return np.sort(np.concatenate(keep))


# --------------------------------------------------------------------- loading
def data_root(cfg_root: str) -> Path:
    """``$FEDRAM_DATA`` if set, else the scenario's ``data.root``."""
    return Path(os.environ.get("FEDRAM_DATA", cfg_root)).expanduser()


def _install_debian_fashion_mnist(raw: Path) -> bool:
    """Decompress the Debian package's files into torchvision's raw folder."""
    if not all((DEBIAN_FASHION_MNIST / f"{name}.gz").is_file() for name in _IDX_FILES):
        return False
    raw.mkdir(parents=True, exist_ok=True)
    for name in _IDX_FILES:
        target = raw / name
        if not target.is_file():
            tmp = target.with_suffix(".part")
            with gzip.open(DEBIAN_FASHION_MNIST / f"{name}.gz") as src, tmp.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            tmp.replace(target)  # never leave a half-written file under its real name
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
        try:
            fetch()
        except Exception as err:  # noqa: BLE001 - any download failure means "not here"
            raise DatasetNotFoundError(
                f"{name} not found under {folder} and the download failed "
                f"({err.__class__.__name__}). To get it: run once on a machine with internet "
                f"(torchvision downloads it into data.root), or copy {', '.join(files)} into "
                f"{folder}. Set data.root or $FEDRAM_DATA to use another folder."
            ) from err
    if name == "cifar10":
        return read_cifar10(folder, train)
    return read_svhn(folder / _SVHN_FILE[train])


def load_image_dataset(name: str, root: Path, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """Images as float32 (N, C, H, W) in [0, 1] and int64 labels, via torchvision."""
    if name in ("cifar10", "svhn"):
        return load_colour_dataset(name, root, train)
    import torchvision

    cls = getattr(torchvision.datasets, _TORCHVISION_CLASS[name])
    raw = root / _TORCHVISION_CLASS[name] / "raw"
    have = all((raw / f).is_file() for f in _IDX_FILES)
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


@lru_cache(maxsize=4)
def load_federated_data(cfg: DataConfig, rare_clients: tuple[int, ...], seed: int) -> FederatedData:
    """Build every client's data and the test set; cached per (config, seed)."""
    rng = stream("data-split", seed)
    if cfg.dataset == "synthetic":
        return synthetic_federated_data(cfg, rare_clients, rng)
    if cfg.dataset == "gaussian2d":
        args = (cfg.num_classes, cfg.samples_per_class, cfg.cluster_std, rng, cfg.centres)
        train_x, train_y = gaussian_patterns(*args)
        test_x, test_y = gaussian_patterns(*args)
        num_classes = cfg.num_classes
    else:
        root = data_root(cfg.root)
        train_x, train_y = load_image_dataset(cfg.dataset, root, train=True)
        test_x, test_y = load_image_dataset(cfg.dataset, root, train=False)
        num_classes = 10
        if cfg.keep_classes is not None:
            bad = [c for c in cfg.keep_classes if not 0 <= c < num_classes]
            if bad:
                raise ScenarioError(f"data.keep_classes: {bad} are not classes of {cfg.dataset}")
            train_x, train_y = keep_and_relabel(train_x, train_y, cfg.keep_classes)
            test_x, test_y = keep_and_relabel(test_x, test_y, cfg.keep_classes)
            num_classes = len(cfg.keep_classes)
        if cfg.client_split is not None:  # one pool, split per client below
            train_x = np.concatenate([train_x, test_x])
            train_y = np.concatenate([train_y, test_y])
        keep = subsample_per_class(train_y, cfg.train_fraction, rng)
        train_x, train_y = train_x[keep], train_y[keep]
    if cfg.partition == "dirichlet":
        parts = dirichlet_partition(train_y, cfg.num_clients, cfg.dirichlet_concentration, rng)
        client_classes = [np.unique(train_y[p]).tolist() for p in parts]
    else:
        if cfg.client_classes is not None:
            client_classes = [list(c) for c in cfg.client_classes]
            bad = sorted({c for cl in client_classes for c in cl if not 0 <= c < num_classes})
            if bad:
                raise ScenarioError(
                    f"data.client_classes: {bad} are not classes; allowed values: "
                    f"0..{num_classes - 1}"
                )
        elif cfg.partition == "two-classes":
            client_classes = two_class_client_classes(cfg.num_clients, num_classes)
        else:
            client_classes = rare_pattern_client_classes(
                cfg.num_clients,
                num_classes,
                rare_clients,
                cfg.frequent_pattern_fraction,
                cfg.rare_classes,
            )
        parts = split_by_class_lists(train_y, client_classes, rng)
    empty = [k for k, p in enumerate(parts) if p.size == 0]
    if empty:
        raise ScenarioError(
            f"data: clients {empty} received no training samples; give them classes or "
            "use fewer clients"
        )
    test_rng = stream("test-split", seed)
    if cfg.client_split is not None:
        splits = [split_fractions(p.size, cfg.client_split, test_rng) for p in parts]
        train_parts = [p[np.sort(train)] for p, (train, _, _) in zip(parts, splits)]
        test_parts = [p[np.sort(test)] for p, (_, _, test) in zip(parts, splits)]
        test_idx = np.concatenate(test_parts)
        test_x, test_y = train_x[test_idx], train_y[test_idx]
        client_test = blocks([t.size for t in test_parts])
    else:
        train_parts = parts
        client_test = split_test_like([train_y[p] for p in parts], test_y, test_rng)
    return federated_data(
        [train_x[p] for p in train_parts],
        [train_y[p] for p in train_parts],
        (test_x, test_y),
        num_classes,
        client_classes,
        rare_clients,
        client_test,
    )


def synthetic_federated_data(
    cfg: DataConfig, rare_clients: tuple[int, ...], rng: np.random.Generator
) -> FederatedData:
    """LEAF Synthetic clients (:func:`leaf_synthetic`), each split 90/10 into its
    training set and its share of the server's test set."""
    xs, ys = leaf_synthetic(
        cfg.num_clients,
        cfg.synthetic_gamma,
        cfg.synthetic_delta,
        cfg.synthetic_dim,
        cfg.num_classes,
        rng,
    )
    splits = [split_train_test(x, y, 0.9, rng) for x, y in zip(xs, ys)]
    test_x = np.concatenate([test[0] for _, test in splits])
    test_y = np.concatenate([test[1] for _, test in splits])
    return federated_data(
        [train[0] for train, _ in splits],
        [train[1] for train, _ in splits],
        (test_x, test_y),
        cfg.num_classes,
        [np.unique(train[1]).tolist() for train, _ in splits],
        rare_clients,
        blocks([len(test[1]) for _, test in splits]),
    )


def federated_data(
    client_x: list[np.ndarray],
    client_y: list[np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    num_classes: int,
    client_classes: Sequence[Sequence[int]],
    rare_clients: Sequence[int],
    client_test: Sequence[np.ndarray],
) -> FederatedData:
    """Assemble :class:`FederatedData`; the rare classes are those only rare clients hold."""
    return FederatedData(
        client_test=tuple(client_test),
        client_x=client_x,
        client_y=client_y,
        test_x=test[0],
        test_y=test[1],
        num_classes=num_classes,
        client_classes=tuple(tuple(c) for c in client_classes),
        rare_clients=tuple(rare_clients),
        rare_classes=exclusive_classes(client_classes, rare_clients),
    )
