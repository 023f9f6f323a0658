"""Data, model, training and evaluation: a small torch model on 2-D Gaussian blobs.

Node ``partition_id`` of ``num_partitions`` holds mostly one class (non-IID, as
federated data is); the test set holds every class in equal parts.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 4


class Net(nn.Module):
    """A two-layer perceptron: 2 inputs, 16 hidden units, one output per class."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, 16)
        self.fc2 = nn.Linear(16, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def load_data(partition_id: int | None, num_partitions: int, n: int = 200) -> DataLoader:
    """A loader of node ``partition_id``'s data, or of the test set (``None``)."""
    g = torch.Generator().manual_seed(1000 + (-1 if partition_id is None else partition_id))
    if partition_id is None:
        y = torch.arange(n) % NUM_CLASSES
    else:  # 80% of the node's own class, 20% of the others
        own = partition_id % NUM_CLASSES
        y = torch.where(
            torch.rand(n, generator=g) < 0.8, own, torch.randint(0, NUM_CLASSES, (n,), generator=g)
        )
    angle = 2 * torch.pi * y / NUM_CLASSES
    x = 2 * torch.stack([angle.cos(), angle.sin()], 1) + torch.randn(n, 2, generator=g)
    return DataLoader(
        TensorDataset(x, y), batch_size=32, shuffle=partition_id is not None, generator=g
    )


def train(net: Net, loader: DataLoader, epochs: int, lr: float) -> float:
    """Local SGD; the mean training loss of the last epoch."""
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    for _ in range(epochs):
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
    return total / len(loader.dataset)


def test(net: Net, loader: DataLoader) -> tuple[float, float]:
    """(mean loss, accuracy) on the loader's data."""
    net.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            out = net(x)
            loss += nn.functional.cross_entropy(out, y, reduction="sum").item()
            correct += int((out.argmax(1) == y).sum())
    return loss / len(loader.dataset), correct / len(loader.dataset)
