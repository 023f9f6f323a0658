"""Models of the papers' experiments, numpy <-> torch parameter conversion, and where
models and data live (``training.device``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class LeNetCNN(nn.Module):
    """Fed-CVaR-Avg Table 1 CNN: 5x5 convs of 6 and 16 channels (padding 2), each
    followed by 2x2 max-pool, then FC 120 and 84 (as in the authors' code). With
    ``in_channels=3, side=32, padding=0`` it is LeNet-5's layout for CIFAR-10 (FedAR
    Sec. 6.1; LeCun et al. 1998), 16 x 5 x 5 features into FC 120."""

    def __init__(
        self, num_classes: int = 10, in_channels: int = 1, side: int = 28, padding: int = 2
    ) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, kernel_size=5, padding=padding)
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5, padding=padding)
        features = ((side + 2 * padding - 4) // 2 + 2 * padding - 4) // 2
        self.fc1 = nn.Linear(16 * features * features, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.leaky_relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.leaky_relu(self.conv2(x)), 2)
        x = x.flatten(1)
        x = F.leaky_relu(self.fc1(x))
        x = F.leaky_relu(self.fc2(x))
        return self.fc3(x)


def build_model(name: str, input_shape: Sequence[int], num_classes: int, seed: int) -> nn.Module:
    """A freshly initialised model; the init is seeded without touching global RNG."""
    in_features = int(np.prod(input_shape))
    with torch.random.fork_rng(devices=[]):
        # The CPU generator only: torch.manual_seed also queues lazy seeds of every
        # accelerator (formatting a stack trace each, ~2 ms a client a round).
        torch.random.default_generator.manual_seed(seed)
        if name == "logreg":
            return nn.Sequential(nn.Flatten(), nn.Linear(in_features, num_classes))
        if name == "mlp":  # Fed-CVaR-Avg Figs. 3/4: two hidden layers of 128
            return nn.Sequential(
                nn.Flatten(),
                nn.Linear(in_features, 128),
                nn.ReLU(),
                nn.Linear(128, 128),
                nn.ReLU(),
                nn.Linear(128, num_classes),
            )
        if name == "cnn":
            if tuple(input_shape) != (1, 28, 28):
                raise ValueError(f"model.name: cnn needs 1x28x28 images, got {input_shape}")
            return LeNetCNN(num_classes)
        if name in ("lenet5", "resnet18"):
            if len(input_shape) != 3 or input_shape[1] != input_shape[2] or input_shape[1] < 32:
                raise ValueError(f"model.name: {name} needs square CxHxW images of side >= 32")
            if name == "lenet5":  # FedAR Sec. 6.1, CIFAR-10
                return LeNetCNN(num_classes, input_shape[0], input_shape[1], padding=0)
            if input_shape[0] != 3:
                raise ValueError(f"model.name: resnet18 needs RGB images, got {input_shape}")
            return resnet18(num_classes)
    raise ValueError(
        f"model.name: unknown model {name!r}; allowed: logreg, mlp, cnn, lenet5, resnet18"
    )


def resnet18(num_classes: int) -> nn.Module:
    """torchvision's ResNet-18 (FedAR Sec. 6.1, SVHN) with GroupNorm (2 groups) in place
    of BatchNorm: no running statistics, so the model is its parameters alone and every
    server rule averages it like any other (BatchNorm's buffers are not updates)."""
    import torchvision

    return torchvision.models.resnet18(
        weights=None, num_classes=num_classes, norm_layer=lambda c: nn.GroupNorm(2, c)
    )


def get_weights(model: nn.Module) -> list[np.ndarray]:
    """The model's state as fresh numpy arrays (copied to the CPU from any device)."""
    return [v.detach().cpu().numpy().copy() for v in model.state_dict().values()]


@torch.no_grad()
def set_weights(model: nn.Module, weights: Sequence[np.ndarray]) -> None:
    """Copy ``weights`` into the model's state in place (onto its device): the
    ``copy_`` that ``load_state_dict`` does, without its per-module traversal (~5x
    cheaper for a small model, the same values)."""
    state = model.state_dict()
    if len(weights) != len(state):
        raise ValueError(f"expected {len(state)} parameter arrays, got {len(weights)}")
    sources = [torch.from_numpy(np.asarray(w)) for w in weights]
    bad = [k for (k, v), w in zip(state.items(), sources) if v.shape != w.shape]
    if bad:
        raise ValueError(f"parameter arrays of the wrong shape for {bad}")
    for v, w in zip(state.values(), sources):
        v.copy_(w)


def on_device(x: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` as a tensor on ``device``: a numpy array shares its memory on the CPU; a
    tensor already there is returned as it is (callers cache device copies)."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    return x if x.device == device else x.to(device)


def resolve_device(name: str) -> torch.device:
    """``training.device`` as a torch device: ``cpu``, ``cuda`` (an error naming the
    setting when no GPU is visible) or ``auto`` (``cuda`` where available, else ``cpu``).
    On ``cuda`` it turns TensorFloat-32 off for matmuls and convolutions (cuDNN allows it
    by default: 10-bit mantissas), so GPU runs stay within float32 rounding of CPU runs."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "training.device: cuda is not available on this machine (torch sees no GPU); "
            "allowed values here: cpu, auto"
        )
    if name not in ("cpu", "cuda"):
        raise ValueError(
            f"training.device: {name!r} is not allowed; allowed values: cpu, cuda, auto"
        )
    if name == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(name)
