"""Stacked local SGD (training.batched) against the per-client loop it replaces: the same
clients' weights, losses and K, to float32 rounding (the stacked kernels sum in another
order), for every hook local SGD has; refusals named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fedram_flwr.clients.batched import SGDJob, stacked_sgd, unbatchable
from fedram_flwr.clients.batched_round import BatchedRound
from fedram_flwr.clients.batches import ArrayData, LoaderData
from fedram_flwr.clients.models import build_model, get_weights, parameter_list, set_weights
from fedram_flwr.clients.training import LocalTrainer, sgd_passes
from fedram_flwr.protocol import SERVER_ROUND, TRAIN_LOSS

TOL = dict(rtol=1e-5, atol=1e-6)
"""float32 rounding of a few steps summed in another order."""

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible"),
    ),
]


def client_arrays(k: int, n: int, shape=(6,)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + k)
    x = rng.standard_normal((n, *shape)).astype(np.float32)
    return x, (np.arange(n) % 3).astype(np.int64)


def offsets_of(k: int, model: nn.Module) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(k)
    return [0.1 * torch.randn(p.shape, generator=g) for p in parameter_list(model)]


def cvar_weight() -> tuple[callable, list[float]]:
    """A stateful gradient weight, as CVaR's closure over its threshold s."""
    s = [0.5]

    def weight(loss: float) -> float:
        w = 2.0 if loss > s[0] else 0.5
        s[0] -= 0.01 * (1.0 - w)
        return w

    return weight, s


SIZES = [10, 7, 13, 4, 10]  # different K per epoch and a smaller last batch


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "case", ["epochs", "steps", "weight-decay", "grad-offset", "batch-weight", "cnn"]
)
def test_stacked_sgd_equals_the_per_client_loop(case: str, device: str) -> None:
    name, shape = ("cnn", (1, 28, 28)) if case == "cnn" else ("logreg", (6,))
    model = build_model(name, shape, 3, seed=0).to(device)
    theta = get_weights(model)
    settings = dict(epochs=2, steps=5 if case == "steps" else None)
    settings["weight_decay"] = 0.01 if case == "weight-decay" else 0.0
    per_client, jobs, thresholds = [], [], []
    for k, n in enumerate(SIZES):
        x, y = client_arrays(k, n, shape)
        data = ArrayData(x, y, batch_size=4, seed=3, partition_id=k, device=device)
        lr = 0.05 * (k + 1)
        offset = offsets_of(k, model) if case == "grad-offset" else None
        weight, s = cvar_weight() if case == "batch-weight" else (None, None)
        set_weights(model, theta)
        losses: list[float] = []
        loss, taken = sgd_passes(
            model,
            data.passes({SERVER_ROUND: 2}),
            lr=lr,
            grad_offset=offset,
            batch_weight=weight,
            losses=losses,
            **settings,
        )
        per_client.append((get_weights(model), losses, taken, None if s is None else s[0]))
        weight, s = cvar_weight() if case == "batch-weight" else (None, None)
        thresholds.append(s)
        start = [torch.as_tensor(a, device=device) for a in theta]
        hooks = dict(grad_offset=offset, batch_weight=weight)
        jobs.append(SGDJob(start, data.passes({SERVER_ROUND: 2}), lr=lr, **settings, **hooks))
    results = stacked_sgd(model, jobs)
    for (weights, losses, taken, s), result, s_stacked in zip(per_client, results, thresholds):
        assert result.steps == taken == len(losses)
        np.testing.assert_allclose(result.losses, losses, **TOL)
        for a, b in zip(weights, result.params):
            np.testing.assert_allclose(b.cpu().numpy(), a, **TOL)
        if s is not None:
            assert s_stacked[0] == pytest.approx(s, abs=1e-9)


def test_batches_from_a_data_loader_stack_as_the_loop_takes_them() -> None:
    """A user's loader (batches already gathered, a smaller last one): the same weights."""
    model = build_model("logreg", (6,), 3, seed=0)
    theta = get_weights(model)
    loaders = []
    for k, n in enumerate(SIZES):
        x, y = client_arrays(k, n)
        dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        loaders.append(LoaderData(DataLoader(dataset, batch_size=4)))
    alone = []
    for data in loaders:
        set_weights(model, theta)
        sgd_passes(model, data.passes({}), epochs=2, lr=0.1)
        alone.append(get_weights(model))
    start = [torch.from_numpy(a) for a in theta]
    jobs = [SGDJob(start, data.passes({}), epochs=2, lr=0.1) for data in loaders]
    for weights, result in zip(alone, stacked_sgd(model, jobs)):
        for a, b in zip(weights, result.params):
            np.testing.assert_allclose(b.numpy(), a, **TOL)


def trainer_of(model: nn.Module, k: int, local_steps: int | None = None) -> LocalTrainer:
    x, y = client_arrays(k, SIZES[k])
    data = ArrayData(x, y, batch_size=4, seed=1, partition_id=k)
    return LocalTrainer(model, data, k, lr=0.1, local_epochs=2, local_steps=local_steps)


def fit(trainer: LocalTrainer, theta: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
    """A client's fit: load, train, read its model (the shared one) back."""
    run = trainer.train(theta, {SERVER_ROUND: 1})
    return get_weights(trainer.model), run.metrics[TRAIN_LOSS]


def test_a_batched_round_of_clients_sharing_one_model_equals_them_in_turn() -> None:
    model = build_model("logreg", (6,), 3, seed=0)
    theta = get_weights(model)
    alone = [fit(trainer_of(model, k), theta) for k in range(len(SIZES))]
    with BatchedRound("on") as batch:
        calls = [lambda k=k: fit(trainer_of(model, k), theta) for k in range(len(SIZES))]
        for _ in range(2):  # its worker threads serve round after round
            together = [o.get() for o in batch.run(calls)]
            for (w1, l1), (w2, l2) in zip(alone, together):
                assert l2 == pytest.approx(l1, rel=1e-5)
                for a, b in zip(w1, w2):
                    np.testing.assert_allclose(b, a, **TOL)


def test_a_failing_call_fails_alone() -> None:
    model = build_model("logreg", (6,), 3, seed=0)
    theta = get_weights(model)

    def broken() -> None:
        raise RuntimeError("client 1 broke")

    calls = [lambda: fit(trainer_of(model, 0), theta), broken]
    with BatchedRound("on") as batch:
        ok, failed = batch.run(calls)
    assert isinstance(failed.error, RuntimeError)
    assert ok.get()[1] == pytest.approx(fit(trainer_of(model, 0), theta)[1], rel=1e-5)


def test_dropout_is_refused_by_on_and_left_to_the_loop_by_auto() -> None:
    model = build_model("fedawe-cnn-cinic10", (3, 8, 8), 3, seed=0)
    assert "SeededDropout" in unbatchable(model)
    theta = get_weights(model)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 3, 8, 8)).astype(np.float32), np.arange(6) % 3
    trainer = LocalTrainer(model, ArrayData(x, y, batch_size=4, seed=0, partition_id=0), 0, 0.1)
    alone = fit(trainer, theta)
    with BatchedRound("on") as batch:
        (refused,) = batch.run([lambda: fit(trainer, theta)])
    assert "cannot train stacked" in str(refused.error)
    with BatchedRound("auto") as batch:
        (looped,) = batch.run([lambda: fit(trainer, theta)])
    assert looped.get()[1] == alone[1]  # the per-client loop itself: bit for bit
    for a, b in zip(alone[0], looped.get()[0]):
        np.testing.assert_array_equal(a, b)


def test_a_mode_other_than_on_or_auto_is_refused() -> None:
    with pytest.raises(ValueError, match="'on' or 'auto'"):
        BatchedRound("off")


def test_a_client_alone_in_its_round_trains_in_the_per_client_loop_bit_for_bit() -> None:
    model = build_model("logreg", (6,), 3, seed=0)
    theta = get_weights(model)
    alone = fit(trainer_of(model, 2), theta)
    with BatchedRound("on") as batch:
        (together,) = batch.run([lambda: fit(trainer_of(model, 2), theta)])
    assert together.get()[1] == alone[1]
    for a, b in zip(alone[0], together.get()[0]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("name", "chain"),
    [
        ("logreg", ["Flatten", "Linear"]),
        ("mlp", ["Flatten", "Linear", "ReLU", "Linear", "ReLU", "Linear"]),
        ("cnn", None),
    ],
)
def test_stacked_gradients_are_each_clients_own(name: str, chain: list[str] | None) -> None:
    """A linear chain (logreg, the MLP: closed form) and a CNN (autograd through vmap):
    every client's loss and gradient equal autograd's on its own parameters and batch,
    a padded row weighing nothing (the chains' logits large)."""
    from torch.func import functional_call
    from torch.nn import functional as F

    from fedram_flwr.clients.stacked_loss import linear_chain, stacked_gradients

    shape = (1, 28, 28)
    model = build_model(name, shape, 5, seed=0)
    layers = linear_chain(model)
    assert (layers is None) if chain is None else [type(m).__name__ for _, m in layers] == chain
    g = torch.Generator().manual_seed(1)
    params = {
        n: p.detach() + (0.5 if chain else 0.05) * torch.randn((3, *p.shape), generator=g)
        for n, p in model.named_parameters()
    }
    x = (3 if chain else 1) * torch.randn(3, 4, *shape, generator=g)  # large logits too
    y = torch.randint(0, 5, (3, 4), generator=g)
    w = torch.full((3, 4), 0.25)
    w[2] = torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0])  # client 2: a batch of 3, one padded row
    grads, losses = stacked_gradients(model)(params, x, y, w)
    atol = 1e-6 if chain else 1e-5  # float32: a convolution sums hundreds of products
    for k in range(3):
        own = {n: p[k].clone().requires_grad_() for n, p in params.items()}
        rows = 4 if k < 2 else 3
        out = functional_call(model, own, (x[k, :rows],))
        loss = F.cross_entropy(out, y[k, :rows])
        expected = torch.autograd.grad(loss, list(own.values()))
        assert losses[k].item() == pytest.approx(loss.item(), rel=1e-5)
        for n, e in zip(own, expected):
            torch.testing.assert_close(grads[n][k], e, rtol=1e-4, atol=atol)
