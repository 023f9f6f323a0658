"""Datasets and federated partitions: :mod:`~fedram_flwr.data.sources` reads or generates
data sets (:mod:`~fedram_flwr.data.cinic10` reads CINIC-10),
:mod:`~fedram_flwr.data.partition` splits them among clients (pure functions of a
generator), :mod:`~fedram_flwr.data.federated` assembles a scenario's
:class:`FederatedData`."""

from fedram_flwr.data.cinic10 import CINIC10_URL, load_cinic10, read_cinic10
from fedram_flwr.data.federated import (
    FederatedData,
    federated_data,
    load_federated_data,
    synthetic_federated_data,
)
from fedram_flwr.data.files import DatasetNotFoundError
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
    DEBIAN_FASHION_MNIST,
    data_root,
    gaussian_patterns,
    leaf_synthetic,
    load_colour_dataset,
    load_image_dataset,
    read_cifar10,
    read_svhn,
)

__all__ = [
    "CINIC10_URL",
    "DEBIAN_FASHION_MNIST",
    "DatasetNotFoundError",
    "FederatedData",
    "blocks",
    "data_root",
    "dirichlet_partition",
    "exclusive_classes",
    "federated_data",
    "gaussian_patterns",
    "keep_and_relabel",
    "leaf_synthetic",
    "load_cinic10",
    "load_colour_dataset",
    "load_federated_data",
    "load_image_dataset",
    "rare_pattern_client_classes",
    "read_cifar10",
    "read_cinic10",
    "read_svhn",
    "split_by_class_lists",
    "split_fractions",
    "split_test_like",
    "split_train_test",
    "subsample_per_class",
    "synthetic_federated_data",
    "two_class_client_classes",
]
