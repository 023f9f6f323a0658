"""Models (clients/models.py): ResNet-18 on SVHN images, LeNet-5's input check,
FedAWE's Table 6 CNNs and their seeded dropout; where models and data live (the
``training.device`` setting)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedram_flwr.clients.models import (
    SeededDropout,
    build_model,
    fix_tensors,
    get_weights,
    module_list,
    parameter_list,
    resolve_device,
    seed_dropout,
    set_weights,
    train_mode,
)
from fedram_flwr.data import load_image_dataset
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.scenario.config import ScenarioError
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


# FedAWE Table 6 by hand: a conv C(a, b) has 9ab + b parameters, a linear L(a -> b) ab + b;
# two 2x2 pools take 32x32 to 8x8, so the first linear layer sees 32 * 8 * 8 = 2048.
CONVS = (9 * 3 * 32 + 32) + (9 * 32 * 32 + 32)  # 896 + 9248
FEDAWE_PARAMS = {
    "fedawe-cnn-svhn": CONVS + (2048 * 128 + 128) + (128 * 10 + 10),  # 273706
    "fedawe-cnn-cifar10": CONVS + (2048 * 256 + 256) + (256 * 64 + 64) + (64 * 10 + 10),
    "fedawe-cnn-cinic10": CONVS + (2048 * 512 + 512) + (512 * 256 + 256) + (256 * 10 + 10),
}


@pytest.mark.parametrize("name", sorted(FEDAWE_PARAMS))
def test_fedawe_cnns_have_table_6s_shapes_and_sizes(name: str) -> None:
    model = build_model(name, (3, 32, 32), 10, seed=0)
    assert model(torch.zeros(5, 3, 32, 32)).shape == (5, 10)
    assert sum(p.numel() for p in model.parameters()) == FEDAWE_PARAMS[name]
    assert sum(w.size for w in get_weights(model)) == FEDAWE_PARAMS[name]  # no buffers
    assert build_model(name, (1, 28, 28), 7, seed=0)(torch.zeros(2, 1, 28, 28)).shape == (2, 7)


@pytest.mark.parametrize("name", sorted(FEDAWE_PARAMS))
def test_fedawe_cnns_are_seeded_like_the_other_models(name: str) -> None:
    state = torch.random.get_rng_state()
    a, b = (get_weights(build_model(name, (3, 32, 32), 10, seed=3)) for _ in range(2))
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    c = get_weights(build_model(name, (3, 32, 32), 10, seed=4))
    assert not np.array_equal(a[0], c[0])
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched


def test_fedawe_cnns_use_kaiming_normal_init() -> None:
    """He et al. (2015) normal init, fan-in and ReLU gain: std sqrt(2 / fan_in); zero
    biases. 262144 weights put the sample std within 0.14% (one s.e.) of it."""
    weights = dict(build_model("fedawe-cnn-svhn", (3, 32, 32), 10, seed=0).state_dict())
    assert weights["fcs.0.weight"].std().item() == pytest.approx((2 / 2048) ** 0.5, rel=0.01)
    assert weights["conv2.weight"].std().item() == pytest.approx((2 / 288) ** 0.5, rel=0.05)
    assert weights["fcs.0.weight"].mean().item() == pytest.approx(
        0.0, abs=5 * (2 / 2048) ** 0.5 / 512
    )
    assert all(not v.any() for k, v in weights.items() if k.endswith("bias"))


def test_cinic10_cnn_dropout_is_seeded_and_off_in_eval() -> None:
    x = torch.randn(4, 3, 32, 32)
    a, b = (build_model("fedawe-cnn-cinic10", (3, 32, 32), 10, seed=1) for _ in range(2))
    state = torch.random.get_rng_state()
    assert torch.equal(a.train()(x), b.train()(x))  # same seed, same masks
    assert not torch.equal(a(x), a.eval()(x))  # train mode drops units, eval does not
    assert torch.equal(a(x), b.eval()(x))
    seed_dropout(a, np.random.default_rng(9))
    seed_dropout(b, np.random.default_rng(9))
    assert torch.equal(a.train()(x), b.train()(x))
    assert torch.equal(torch.random.get_rng_state(), state)  # masks never use global RNG
    rng = np.random.default_rng(0)
    svhn = build_model("fedawe-cnn-svhn", (3, 32, 32), 10, seed=1)
    seed_dropout(svhn, rng)  # no dropout layer: draws nothing
    assert rng.integers(2**63) == np.random.default_rng(0).integers(2**63)


def test_seeded_dropout_drops_p_and_rescales_the_rest() -> None:
    drop = SeededDropout(0.2)
    seed_dropout(drop, np.random.default_rng(0))
    out = drop(torch.ones(100_000))
    dropped = (out == 0).double().mean().item()
    assert dropped == pytest.approx(0.2, abs=5 * (0.2 * 0.8 / 100_000) ** 0.5)
    assert torch.allclose(out[out != 0], torch.tensor(1 / 0.8))
    with pytest.raises(ValueError, match=r"dropout probability must be in \[0, 1\)"):
        SeededDropout(1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_seeded_dropout_masks_agree_on_cpu_and_gpu() -> None:
    cpu, gpu = SeededDropout(0.5), SeededDropout(0.5).cuda()
    seed_dropout(cpu, np.random.default_rng(0))
    seed_dropout(gpu, np.random.default_rng(0))
    x = torch.randn(64, 32)
    assert torch.equal(cpu(x), gpu(x.cuda()).cpu())


def test_model_names_list_the_fedawe_cnns(scenario_dict) -> None:
    scenario_dict["model"] = {"name": "vgg"}
    with pytest.raises(ScenarioError, match="fedawe-cnn-svhn, fedawe-cnn-cifar10, fedawe-cnn-"):
        scenario_from_dict(scenario_dict)
    with pytest.raises(ValueError, match="allowed: .*resnet18, fedawe-cnn-svhn, fedawe-cnn-ci"):
        build_model("vgg", (3, 32, 32), 10, seed=0)
    with pytest.raises(ValueError, match="fedawe-cnn-svhn needs CxHxW images"):
        build_model("fedawe-cnn-svhn", (3072,), 10, seed=0)


def test_a_fixed_models_lists_read_and_write_the_same_tensors() -> None:
    """fix_tensors: set_weights and get_weights go through the listed state tensors (the
    model's own storage), train_mode sets every module training, module_list and
    parameter_list are the model's."""
    model = build_model("mlp", (4,), 3, seed=0)
    listed = fix_tensors(model)
    assert parameter_list(model) is listed.parameters
    assert [id(p) for p in listed.parameters] == [id(p) for p in model.parameters()]
    assert module_list(model) == list(model.modules())
    weights = get_weights(build_model("mlp", (4,), 3, seed=1))
    set_weights(model, weights)
    assert all(np.array_equal(a, b) for a, b in zip(get_weights(model), weights))
    assert all(np.array_equal(v.numpy(), w) for v, w in zip(model.state_dict().values(), weights))
    model.eval()
    model[1].train()  # a mixed state is put right, as model.train() would
    train_mode(model)
    assert all(m.training for m in model.modules())
    with pytest.raises(ValueError, match="wrong shape for \\['1.weight'"):
        set_weights(model, [w.T if w.ndim == 2 else w for w in weights])
