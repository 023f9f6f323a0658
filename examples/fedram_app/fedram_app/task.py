"""The model and each node's data: a small MLP on synthetic 2-D points, no download."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A two-layer perceptron over 2-D points, two classes."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def points(seed: int, n: int, shift: float) -> TensorDataset:
    """n points around (shift, shift), labelled by the side of the line x0 + x1 = 2 shift."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g) + shift
    return TensorDataset(x, (x.sum(dim=1) > 2 * shift).long())


def load_data(partition_id: int, num_partitions: int) -> tuple[DataLoader, DataLoader]:
    """Partition ``partition_id``'s train and test loaders: each partition's points sit
    elsewhere in the plane, so the partitions' objectives differ."""
    shift = partition_id / max(num_partitions - 1, 1)
    # shuffled by a generator of the partition's own, so that a run replays exactly
    order = torch.Generator().manual_seed(partition_id)
    train_set = points(partition_id, 64, shift)
    train = DataLoader(train_set, batch_size=16, shuffle=True, generator=order)
    test = DataLoader(points(1000 + partition_id, 32, shift), batch_size=32)
    return train, test


def server_testset() -> DataLoader:
    """The server's test set: points of every partition's region."""
    return DataLoader(points(10_000, 128, 0.5), batch_size=128)


def accuracy(model: nn.Module, loader: DataLoader) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on ``loader``."""
    model.eval()
    loss, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            loss += nn.functional.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(dim=1) == y).sum().item()
            n += len(y)
    return loss / n, correct / n
