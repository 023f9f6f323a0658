"""The ``data:`` section of a scenario: the dataset and how it is split over clients. A
leaf of the schema, like :mod:`fedram_flwr.scenario.time_config`; re-exported by
:mod:`fedram_flwr.scenario.config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fedram_flwr.scenario.schema import ScenarioError, absolute_path, check_range

MAX_CLIENTS = 100_000
"""The most clients a scenario may have (``data.num_clients``): far above any experiment
here, low enough that every per-client array of a scenario fits in memory at load."""


@dataclass(frozen=True)
class DataConfig:
    """Dataset and partition (the paper's rare-pattern split, Sec. 4)."""

    dataset: Literal[
        "fashion-mnist", "mnist", "cifar10", "svhn", "cinic10", "gaussian2d", "synthetic"
    ] = "fashion-mnist"
    root: str = "data"
    num_clients: int = 30
    # M: fraction of users (the most likely ones) that are "frequent".
    frequent_fraction: float = 0.9
    # r: fraction of the patterns (classes) the frequent users share.
    frequent_pattern_fraction: float = 0.8
    # Which classes only rare users hold; default: the last (1 - r) * C classes.
    rare_classes: tuple[int, ...] | None = None
    # Explicit classes per client (overrides the M/r split; Fig. 2a/2b).
    client_classes: tuple[tuple[int, ...], ...] | None = None
    # Keep this fraction of each class of the training set (scaled-down runs).
    train_fraction: float = 1.0
    # Image datasets: keep only these classes, relabelled 0..k-1 in this order
    # (RC-FL Sec. 6: t-shirt/top, pullover, shirt = [0, 2, 6]).
    keep_classes: tuple[int, ...] | None = None
    # Image datasets: pool the training and test files and split every client's
    # samples into (train, validation, test) fractions (RC-FL Sec. 6: [0.8, 0.1, 0.1]);
    # the server's test set is the union of the clients' test splits, validation is
    # held out. Default: the dataset's own test set.
    client_split: tuple[float, ...] | None = None
    # gaussian2d only.
    num_classes: int = 3
    samples_per_class: int = 300
    cluster_std: float = 0.6
    # Class centres; default: evenly on a circle of radius 3.
    centres: tuple[tuple[float, ...], ...] | None = None
    # Image datasets: "dirichlet" gives each class to the clients in Dirichlet(varsigma)
    # proportions (CA-Fed Sec. V-A b) instead of the rare-pattern split; "two-classes"
    # gives each client two distinct classes, each class split evenly (FedAR Sec. 6.1).
    partition: Literal["rare-patterns", "dirichlet", "two-classes"] = "rare-patterns"
    dirichlet_concentration: float = 0.5
    # synthetic only: LEAF Synthetic(gamma, delta) (CA-Fed Sec. V-A b; num_classes classes).
    synthetic_gamma: float = 0.5
    synthetic_delta: float = 0.5
    synthetic_dim: int = 60

    def __post_init__(self) -> None:
        # Relative paths resolve against the working directory at load (module docstring).
        object.__setattr__(self, "root", absolute_path(self.root))
        check_range("data.num_clients", self.num_clients, 1, MAX_CLIENTS)
        check_range("data.frequent_fraction", self.frequent_fraction, 0.0, 1.0, lo_open=True)
        check_range(
            "data.frequent_pattern_fraction",
            self.frequent_pattern_fraction,
            0.0,
            1.0,
            lo_open=True,
        )
        check_range("data.train_fraction", self.train_fraction, 0.0, 1.0, lo_open=True)
        check_range("data.num_classes", self.num_classes, 2, None)
        check_range("data.samples_per_class", self.samples_per_class, 1, None)
        check_range("data.cluster_std", self.cluster_std, 0.0, None)
        check_range(
            "data.dirichlet_concentration", self.dirichlet_concentration, 0.0, None, lo_open=True
        )
        check_range("data.synthetic_gamma", self.synthetic_gamma, 0.0, None)
        check_range("data.synthetic_delta", self.synthetic_delta, 0.0, None)
        check_range("data.synthetic_dim", self.synthetic_dim, 1, None)
        if self.partition != "rare-patterns" and self.client_classes is not None:
            raise ScenarioError(
                f"data.partition: {self.partition} chooses each client's classes; remove "
                "data.client_classes"
            )
        if self.dataset == "synthetic" and (
            self.partition != "rare-patterns" or self.client_classes is not None
        ):
            raise ScenarioError(
                "data.dataset: synthetic generates each client's data (LEAF Synthetic); "
                "data.partition and data.client_classes apply to the other datasets"
            )
        if self.client_split is not None and (
            len(self.client_split) != 3
            or min(self.client_split) < 0
            or self.client_split[0] <= 0
            or self.client_split[2] <= 0
            or abs(sum(self.client_split) - 1.0) > 1e-9
        ):
            raise ScenarioError(
                "data.client_split: give [train, validation, test] fractions >= 0 that sum "
                f"to 1, train and test > 0 (e.g. [0.8, 0.1, 0.1]); got {list(self.client_split)}"
            )
        if self.keep_classes is not None and len(set(self.keep_classes)) < 2:
            raise ScenarioError(
                f"data.keep_classes: give at least two distinct classes, got {self.keep_classes}"
            )
        if self.client_classes is not None and len(self.client_classes) != self.num_clients:
            raise ScenarioError(
                f"data.client_classes: has {len(self.client_classes)} entries but "
                f"data.num_clients is {self.num_clients}; give one class list per client"
            )

    @property
    def num_rare_clients(self) -> int:
        """(100 - M)% of the K users, at least one when M < 1."""
        if self.frequent_fraction >= 1.0:
            return 0
        return max(1, round(self.num_clients * (1.0 - self.frequent_fraction)))
