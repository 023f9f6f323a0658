"""A scenario's federated data: every client's training set, the server's test set and
each client's share of it, built from a data config and a seed (the ``data-split`` and
``test-split`` streams of :mod:`fedram_flwr.rng`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fedram_flwr.data.partition import (
    blocks,
    dirichlet_partition,
    exclusive_classes,
    keep_and_relabel,
    rare_pattern_client_classes,
    split_by_class_lists,
    split_fractions,
    split_test_like,
    split_train_test,
    subsample_per_class,
    two_class_client_classes,
)
from fedram_flwr.data.sources import (
    data_root,
    gaussian_patterns,
    leaf_synthetic,
    load_image_dataset,
)
from fedram_flwr.rng import stream
from fedram_flwr.scenario.config import DataConfig, ScenarioError
from fedram_flwr.scenario.schema import few


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
            f"data: clients {few(empty)} received no training samples; give them classes or "
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
    """Assemble :class:`FederatedData`; the rare classes are those only rare clients hold.
    Each client's x (and y) is a view of one array of all clients' rows
    (:func:`packed_rows`)."""
    return FederatedData(
        client_test=tuple(client_test),
        client_x=packed_rows(client_x),
        client_y=packed_rows(client_y),
        test_x=test[0],
        test_y=test[1],
        num_classes=num_classes,
        client_classes=tuple(tuple(c) for c in client_classes),
        rare_clients=tuple(rare_clients),
        rare_classes=exclusive_classes(client_classes, rare_clients),
    )


def packed_rows(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """``arrays`` as consecutive row views of one C-contiguous array, the same values
    (local SGD of a round's clients stacked gathers all their batches from it with one
    call: :mod:`fedram_flwr.clients.batched`); as they are when their dtypes or row
    shapes differ."""
    if not arrays or any(
        a.dtype != arrays[0].dtype or a.shape[1:] != arrays[0].shape[1:] for a in arrays
    ):
        return arrays
    rows = np.concatenate(arrays)
    ends = np.cumsum([len(a) for a in arrays])
    return [rows[end - len(a) : end] for a, end in zip(arrays, ends)]


def row_views(views: Sequence[np.ndarray]) -> tuple[np.ndarray, list[int]] | None:
    """(the one array ``views`` are row views of, each view's first row there: any row
    for an empty view), or None when they are not all rows of one C-contiguous array
    (:func:`packed_rows`)."""
    base = views[0].base if views else None
    if not isinstance(base, np.ndarray) or not base.flags.c_contiguous or base.ndim < 1:
        return None
    row_bytes = base.strides[0] if len(base) else 0
    start = base.__array_interface__["data"][0]
    offsets = []
    for v in views:
        if v.base is not base or v.shape[1:] != base.shape[1:] or not v.flags.c_contiguous:
            return None
        at, rest = divmod(v.__array_interface__["data"][0] - start, row_bytes or 1)
        if rest:
            return None
        offsets.append(at)
    return base, offsets
