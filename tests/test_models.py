"""Models (fedram_flwr/models.py): ResNet-18 on SVHN images, LeNet-5's input check;
where models and data live (the ``training.device`` setting)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedram_flwr.config import ScenarioError
from fedram_flwr.data import load_image_dataset
from fedram_flwr.models import build_model, get_weights, resolve_device, set_weights
from fedram_flwr.registry import scenario_from_dict
from tests.helpers import write_svhn


def test_resnet18_on_svhn_images(tmp_path: Path) -> None:
    write_svhn(tmp_path / "svhn", n=2)
    x, _ = load_image_dataset("svhn", tmp_path, train=True)
    model = build_model("resnet18", x.shape[1:], 10, seed=0)
    assert model(torch.from_numpy(x)).shape == (2, 10)
    assert not list(model.buffers())  # GroupNorm: the parameters are the whole model
    with pytest.raises(ValueError, match="square"):
        build_model("lenet5", (1, 28, 28), 10, seed=0)


def test_set_weights_loads_like_load_state_dict_and_checks_shapes() -> None:
    model = build_model("cnn", (1, 28, 28), 10, seed=0)
    other = build_model("cnn", (1, 28, 28), 10, seed=1)
    weights = get_weights(other)
    set_weights(model, weights)
    assert all(np.array_equal(a, b) for a, b in zip(get_weights(model), weights))
    reference = build_model("cnn", (1, 28, 28), 10, seed=0)
    reference.load_state_dict(other.state_dict())
    x = torch.ones(2, 1, 28, 28)
    assert torch.equal(model(x), reference(x))
    with pytest.raises(ValueError, match="expected 10 parameter arrays"):
        set_weights(model, weights[:-1])
    with pytest.raises(ValueError, match="wrong shape"):
        set_weights(model, [w.T for w in weights])


def test_device_names_the_setting_and_its_values(scenario_dict) -> None:
    scenario_dict["training"]["device"] = "tpu"
    with pytest.raises(ScenarioError, match="training.device.*allowed values: cpu, cuda, auto"):
        scenario_from_dict(scenario_dict)
    with pytest.raises(ValueError, match="training.device.*allowed values: cpu, cuda, auto"):
        resolve_device("tpu")
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto") == torch.device(expected)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="training.device: cuda is not available"):
            resolve_device("cuda")
