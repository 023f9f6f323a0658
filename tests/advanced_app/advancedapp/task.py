"""advancedapp: the model, the data and the training loop."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """A small MLP: a shared body and a classification head kept by each client."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(2, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.body(x))


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """Three Gaussian blobs, shifted per partition (offline: no download)."""
    g = torch.Generator().manual_seed(partition_id)
    y = torch.randint(0, 3, (48,), generator=g)
    x = torch.randn(48, 2, generator=g) + 2.0 * y[:, None] + 0.3 * partition_id
    train = DataLoader(TensorDataset(x[:32], y[:32]), batch_size=batch_size, shuffle=True)
    return train, DataLoader(TensorDataset(x[32:], y[32:]), batch_size=batch_size)


def train(net, trainloader, epochs, lr, device):
    """Train the model on the training set."""
    net.to(device)
    criterion = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for x, y in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / (epochs * len(trainloader))


def test(net, testloader, device):
    """Validate the model on the test set."""
    net.to(device)
    criterion = nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for x, y in testloader:
            outputs = net(x.to(device))
            loss += criterion(outputs, y.to(device)).item()
            correct += (outputs.argmax(1) == y.to(device)).sum().item()
    return loss / len(testloader), correct / len(testloader.dataset)
