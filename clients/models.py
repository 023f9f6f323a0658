"""Models of the papers' experiments, numpy <-> torch parameter conversion, and where
models and data live (``training.device``)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedram_flwr.rng import stream


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


class SeededDropout(nn.Module):
    """Dropout of probability ``p`` (kept units scaled by 1 / (1 - p), as ``nn.Dropout``;
    the identity in eval mode) whose masks come from the module's own CPU generator, never
    torch's global RNG (every draw from a named stream); :func:`seed_dropout` seeds it.
    Masks are drawn on the CPU and moved to the input's device, so CPU and GPU runs drop
    the same units. The generator is no parameter: the model's state is unchanged."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        self.generator = torch.Generator()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape, generator=self.generator) >= self.p
        return x * keep.to(device=x.device, dtype=x.dtype) / (1.0 - self.p)


def seed_dropout(model: nn.Module, rng: np.random.Generator) -> None:
    """Seed every :class:`SeededDropout` of ``model`` from ``rng`` (one draw each, in
    module order); draws nothing from a model without one."""
    for module in model.modules():
        if isinstance(module, SeededDropout):
            module.generator.manual_seed(int(rng.integers(2**63)))


FEDAWE_CNNS: dict[str, tuple[tuple[int, ...], float]] = {
    "fedawe-cnn-svhn": ((128,), 0.0),
    "fedawe-cnn-cifar10": ((256, 64), 0.0),
    "fedawe-cnn-cinic10": ((512, 256), 0.2),
}
"""FedAWE Table 6 (App. J): each data set's hidden fully-connected widths and dropout."""


class FedAWECNN(nn.Module):
    """The CNNs of FedAWE (Xiang et al., NeurIPS 2024) Table 6: C(c, 32) - R - M -
    C(32, 32) - R - M - [D] - (L(h) - R - [D]) per hidden width h - L(classes), with 3x3
    convolutions (stride 1, padding 1), ReLU, 2x2 max-pools (stride 2) and, where
    ``dropout`` > 0, dropout before every linear layer (CINIC-10: p = 0.2). A 3x32x32
    image gives 32 x 8 x 8 features. Kaiming (He) normal init of every weight (fan-in,
    ReLU gain; App. J.2 "Kaiming initialization"), zero biases."""

    def __init__(
        self,
        hidden: Sequence[int],
        num_classes: int = 10,
        input_shape: Sequence[int] = (3, 32, 32),
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        channels, height, width = input_shape
        self.conv1 = nn.Conv2d(channels, 32, kernel_size=3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(32, 32, kernel_size=3, stride=1, padding=1)
        widths = [32 * (height // 4) * (width // 4), *hidden, num_classes]
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.drop = SeededDropout(dropout) if dropout > 0 else nn.Identity()
        for layer in (self.conv1, self.conv2, *self.fcs):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2).flatten(1)
        for i, fc in enumerate(self.fcs):
            x = fc(self.drop(x if i == 0 else F.relu(x)))
        return x


def build_model(name: str, input_shape: Sequence[int], num_classes: int, seed: int) -> nn.Module:
    """A freshly initialised model; the init is seeded without touching global RNG, and
    a model's dropout masks (``fedawe-cnn-cinic10``) come from the ``dropout-masks``
    stream of ``seed`` (:func:`seed_dropout` reseeds them)."""
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
        if name in FEDAWE_CNNS:  # FedAWE Table 6
            if len(input_shape) != 3 or min(input_shape[1:]) < 4:
                raise ValueError(f"model.name: {name} needs CxHxW images of side >= 4")
            hidden, dropout = FEDAWE_CNNS[name]
            model = FedAWECNN(hidden, num_classes, input_shape, dropout)
            seed_dropout(model, stream("dropout-masks", seed))
            return model
    raise ValueError(
        f"model.name: unknown model {name!r}; allowed: logreg, mlp, cnn, lenet5, resnet18, "
        f"{', '.join(FEDAWE_CNNS)}"
    )


def resnet18(num_classes: int) -> nn.Module:
    """torchvision's ResNet-18 (FedAR Sec. 6.1, SVHN) with GroupNorm (2 groups) in place
    of BatchNorm: no running statistics, so the model is its parameters alone and every
    server rule averages it like any other (BatchNorm's buffers are not updates)."""
    import torchvision

    return torchvision.models.resnet18(
        weights=None, num_classes=num_classes, norm_layer=lambda c: nn.GroupNorm(2, c)
    )


@dataclass(frozen=True, eq=False)
class ModelTensors:
    """What local training reads of a model at every fit, listed once (:func:`fix_tensors`):
    its state tensors (``state_dict()``'s values, in order), its parameters, its modules."""

    state: list[torch.Tensor]
    parameters: list[torch.Tensor]
    modules: list[nn.Module]


_FIXED: weakref.WeakKeyDictionary[nn.Module, ModelTensors] = weakref.WeakKeyDictionary()


def fix_tensors(model: nn.Module) -> ModelTensors:
    """List ``model``'s tensors and modules once, for the rest of its life: :func:`set_weights`,
    :func:`get_weights` and local SGD then read the list instead of traversing the module
    (``state_dict()``, ``parameters()``, ``train()``: ~5-10 us each, a client fit of a small
    model takes ~200 us). Only for a model that stays as it is once on its device, its
    tensors written in place (the clients' shared model,
    :meth:`~fedram_flwr.clients.node.NodeExperiment.client_model`): moving it again or giving it
    new parameters or modules would leave the list stale."""
    listed = ModelTensors(
        list(model.state_dict().values()), list(model.parameters()), list(model.modules())
    )
    _FIXED[model] = listed
    return listed


def state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """``model``'s state tensors in ``state_dict()`` order (listed once if fixed)."""
    listed = _FIXED.get(model)
    return list(model.state_dict().values()) if listed is None else listed.state


def parameter_list(model: nn.Module) -> list[torch.Tensor]:
    """``list(model.parameters())`` (listed once if fixed)."""
    listed = _FIXED.get(model)
    return list(model.parameters()) if listed is None else listed.parameters


def module_list(model: nn.Module) -> list[nn.Module]:
    """``list(model.modules())`` (listed once if fixed)."""
    listed = _FIXED.get(model)
    return list(model.modules()) if listed is None else listed.modules


def train_mode(model: nn.Module) -> None:
    """``model.train()``; a fixed model already wholly in training mode is left as it is
    (the same state, without the call's recursion over the modules)."""
    listed = _FIXED.get(model)
    if listed is None or not all(m.training for m in listed.modules):
        model.train()


def get_weights(model: nn.Module) -> list[np.ndarray]:
    """The model's state as fresh numpy arrays (copied to the CPU from any device)."""
    return [v.detach().cpu().numpy().copy() for v in state_tensors(model)]


def set_weights(model: nn.Module, weights: Sequence[np.ndarray]) -> None:
    """Copy ``weights`` into the model's state in place (onto its device): the
    ``copy_`` that ``load_state_dict`` does, without its per-module traversal (~5x
    cheaper for a small model, the same values). The state tensors are detached views
    (``state_dict()``'s), so the copies record no autograd history without ``no_grad``."""
    state = state_tensors(model)
    if len(weights) != len(state):
        raise ValueError(f"expected {len(state)} parameter arrays, got {len(weights)}")
    sources = [torch.from_numpy(np.asarray(w)) for w in weights]
    if any(v.shape != w.shape for v, w in zip(state, sources)):
        names = list(model.state_dict())
        bad = [k for k, v, w in zip(names, state, sources) if v.shape != w.shape]
        raise ValueError(f"parameter arrays of the wrong shape for {bad}")
    for v, w in zip(state, sources):
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
