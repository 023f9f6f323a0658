"""Pure client splits: which samples and classes each client holds.

Partition (Fed-CVaR-Avg paper, Sec. 4): the M% most frequent users share r% of the
patterns (classes); the remaining (100 - r)% of the data goes, uniformly, to the
(100 - M)% least frequent ("rare") users. Fig. 2a/2b give explicit classes per client.
FedAR (Sec. 6.1) gives two classes per client, CA-Fed (Sec. V-A b) Dirichlet shares, and
RC-FL (Sec. 6) an 80/10/10 split per client. Every function draws only from the
generator it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedram_flwr.scenario.config import ScenarioError


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
