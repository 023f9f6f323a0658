"""Pure client splits (fedram_flwr/data/partition.py): the paper's rare-pattern split
(Sec. 4), FedAR's two classes per client (Sec. 6.1), CA-Fed's Dirichlet shares and LEAF
Synthetic (Sec. V-A b), RC-FL's kept classes and per-client fractions (Sec. 6)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fedram_flwr.data import (
    dirichlet_partition,
    exclusive_classes,
    keep_and_relabel,
    leaf_synthetic,
    rare_pattern_client_classes,
    split_by_class_lists,
    split_fractions,
    split_test_like,
    subsample_per_class,
    two_class_client_classes,
)
from fedram_flwr.scenario.config import ScenarioError


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


@pytest.mark.parametrize("num_clients", [80, 90, 100, 110, 120])
def test_two_classes_per_client_split_every_class_evenly(num_clients: int) -> None:
    classes = two_class_client_classes(num_clients, 10)
    assert all(len(set(c)) == 2 for c in classes)
    holders = Counter(c for pair in classes for c in pair)
    assert set(holders.values()) == {2 * num_clients // 10}


def test_keep_and_relabel_and_split_fractions() -> None:
    x = np.arange(8.0)
    y = np.array([0, 2, 6, 6, 1, 2, 0, 9])
    kx, ky = keep_and_relabel(x, y, [0, 2, 6])
    assert kx.tolist() == [0, 1, 2, 3, 5, 6] and ky.tolist() == [0, 1, 2, 2, 1, 0]
    parts = split_fractions(7000, [0.8, 0.1, 0.1], np.random.default_rng(0))
    assert [p.size for p in parts] == [5600, 700, 700]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(7000))


def test_split_test_like_follows_each_clients_label_mix() -> None:
    train = [np.array([0] * 30 + [1] * 10), np.array([1] * 30), np.array([0] * 10)]
    test_y = np.array([0] * 40 + [1] * 40 + [2] * 5)
    parts = split_test_like(train, test_y, np.random.default_rng(1))
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(80))  # class 2: nobody
    counts = [np.bincount(test_y[p], minlength=3).tolist() for p in parts]
    assert counts == [[30, 10, 0], [0, 30, 0], [10, 0, 0]]


def test_leaf_synthetic_and_dirichlet_partition() -> None:
    xs, ys = leaf_synthetic(5, 0.5, 0.5, 7, 4, np.random.default_rng(0))
    again = leaf_synthetic(5, 0.5, 0.5, 7, 4, np.random.default_rng(0))
    assert [x.shape[1] for x in xs] == [7] * 5 and all(len(x) >= 50 for x in xs)
    assert all(np.array_equal(a, b) for a, b in zip(ys, again[1]))
    assert all(y.min() >= 0 and y.max() < 4 for y in ys)
    labels = np.repeat(np.arange(4), 50)
    parts = dirichlet_partition(labels, 6, 0.5, np.random.default_rng(1))
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(labels.size))
    assert min(p.size for p in parts) > 0
