"""Models (fedram_flwr/models.py): ResNet-18 on SVHN images, LeNet-5's input check."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedram_flwr.data import load_image_dataset
from fedram_flwr.models import build_model
from tests.helpers import write_svhn


def test_resnet18_on_svhn_images(tmp_path: Path) -> None:
    write_svhn(tmp_path / "svhn", n=2)
    x, _ = load_image_dataset("svhn", tmp_path, train=True)
    model = build_model("resnet18", x.shape[1:], 10, seed=0)
    assert model(torch.from_numpy(x)).shape == (2, 10)
    assert not list(model.buffers())  # GroupNorm: the parameters are the whole model
    with pytest.raises(ValueError, match="square"):
        build_model("lenet5", (1, 28, 28), 10, seed=0)
