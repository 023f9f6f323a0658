"""Local SGD options FedAR's setting needs: K local steps instead of epochs, weight
decay, SCAFFOLD's gradient offset, and whether a pass's last, smaller batch is a step;
data as arrays or tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from fedram_flwr.clients.batches import ArrayData, LoaderData, client_rng
from fedram_flwr.clients.models import build_model, get_weights, set_weights
from fedram_flwr.clients.training import (
    LocalTrainer,
    local_sgd,
    mean_of,
    num_local_steps,
    sgd_passes,
    sgd_step,
)
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import SERVER_ROUND, TRAIN_LOSS
from fedram_flwr.registry import scenario_from_dict


def problem(n: int = 10):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 2)).astype(np.float32), (np.arange(n) % 3).astype(np.int64)


def train(**kwargs) -> tuple[list[np.ndarray], float, int]:
    x, y = problem()
    model = build_model("logreg", (2,), 3, seed=0)
    calls = []

    def count(loss: float) -> float:
        calls.append(loss)
        return 1.0

    args = dict(epochs=1, batch_size=4, lr=0.1, rng=np.random.default_rng(5), batch_weight=count)
    loss = local_sgd(model, x, y, **{**args, **kwargs})
    return get_weights(model), loss, len(calls)


def test_steps_takes_exactly_k_batches_across_passes() -> None:
    # 10 examples in batches of 4: 3 batches a pass; K = 5 needs a second pass.
    _, _, n = train(steps=5)
    assert n == 5
    assert num_local_steps(10, 4, epochs=3, steps=5) == 5
    assert num_local_steps(10, 4, epochs=3, steps=None) == 9


def test_steps_covering_whole_epochs_equal_the_epoch_path() -> None:
    by_epochs, _, n_epochs = train(epochs=2)
    by_steps, _, n_steps = train(steps=6)
    assert n_epochs == n_steps == 6
    for a, b in zip(by_epochs, by_steps):
        np.testing.assert_array_equal(a, b)


def test_weight_decay_and_gradient_offset_in_one_full_batch_step() -> None:
    x, y = problem()
    theta = get_weights(build_model("logreg", (2,), 3, seed=0))
    w = torch.tensor(theta[0], requires_grad=True)
    b = torch.tensor(theta[1], requires_grad=True)
    loss = F.cross_entropy(torch.from_numpy(x) @ w.T + b, torch.from_numpy(y))
    g_w, g_b = (g.numpy() for g in torch.autograd.grad(loss, (w, b)))
    offset = [torch.full_like(torch.from_numpy(t), 0.3) for t in theta]
    got, _, _ = train(batch_size=10, steps=1, weight_decay=0.01, grad_offset=offset)
    lr = 0.1
    np.testing.assert_allclose(got[0], theta[0] - lr * (g_w + 0.3 + 0.01 * theta[0]), atol=1e-6)
    np.testing.assert_allclose(got[1], theta[1] - lr * (g_b + 0.3 + 0.01 * theta[1]), atol=1e-6)


def test_sgd_step_is_torch_optim_sgd_bit_for_bit() -> None:
    for weight_decay in (0.0, 1e-3):
        ours, ref = build_model("mlp", (20,), 5, 0), build_model("mlp", (20,), 5, 0)
        opt = torch.optim.SGD(ref.parameters(), lr=0.05, weight_decay=weight_decay)
        gen = torch.Generator().manual_seed(1)
        x, y = torch.randn(16, 20, generator=gen), torch.randint(0, 5, (16,), generator=gen)
        for _ in range(3):
            for model in (ours, ref):
                model.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
            sgd_step(list(ours.parameters()), 0.05, weight_decay)
            opt.step()
        for a, b in zip(get_weights(ours), get_weights(ref), strict=True):
            assert np.array_equal(a, b)


class BatchSizes(nn.Module):
    """A linear model that records the size of every batch it is called on."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(2, 3)
        self.sizes: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sizes.append(len(x))
        return self.linear(x)


@pytest.mark.parametrize(
    ("n", "epochs", "steps", "drop_last", "sizes"),
    [
        (10, 2, None, False, [4, 4, 2, 4, 4, 2]),  # the last batch of a pass is a step
        (10, 2, None, True, [4, 4, 4, 4]),  # ... or dropped, as the peers' loaders do
        (10, 1, 5, False, [4, 4, 2, 4, 4]),
        (10, 1, 5, True, [4, 4, 4, 4, 4]),
        (8, 2, None, True, [4, 4, 4, 4]),  # B divides n: nothing to drop
        (3, 2, None, True, [3, 3]),  # fewer than B examples: the one batch is kept
    ],
)
def test_drop_last_steps_and_batch_sizes(n, epochs, steps, drop_last, sizes) -> None:
    x, y = problem(n)
    model = BatchSizes()
    rng = np.random.default_rng(5)
    kwargs = dict(epochs=epochs, batch_size=4, lr=0.1, rng=rng, steps=steps)
    local_sgd(model, x, y, **kwargs, drop_last=drop_last)
    assert model.sizes == sizes
    assert num_local_steps(n, 4, epochs, steps, drop_last) == len(sizes)
    data = ArrayData(x, y, batch_size=4, seed=0, partition_id=0, drop_last=drop_last)
    trainer = LocalTrainer(BatchSizes(), data, 0, 0.1, epochs, steps)
    run = trainer.train(get_weights(trainer.model), {})
    assert run.steps == len(sizes) and trainer.model.sizes == sizes  # SCAFFOLD's K counted


def test_a_pass_that_yields_nothing_is_named() -> None:
    with pytest.raises(ValueError, match="a pass over the client's data gave no mini-batch"):
        sgd_passes(BatchSizes(), lambda: iter([]), epochs=1, lr=0.1)
    with pytest.raises(ValueError, match="local-epochs must be >= 1, got 0"):
        sgd_passes(BatchSizes(), lambda: iter([]), epochs=0, lr=0.1)


def test_loader_data_moves_batches_and_reads_its_dataset_size() -> None:
    x, y = problem(10)
    pairs = [(torch.from_numpy(x[i : i + 4]), torch.from_numpy(y[i : i + 4])) for i in (0, 4, 8)]
    data = LoaderData(pairs, num_examples=10, device="cpu")
    assert len(data) == 10
    assert [len(b) for b, _ in data.passes({})()] == [4, 4, 2]
    full_x, full_y = data.full()
    assert np.array_equal(full_x.numpy(), x) and np.array_equal(full_y.numpy(), y)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=3
    )
    assert len(LoaderData(loader)) == 10


def test_drop_last_is_a_training_setting(scenario_dict) -> None:
    assert scenario_from_dict(scenario_dict).training.drop_last is False  # results unchanged
    scenario_dict["training"]["drop_last"] = True
    exp = Experiment(scenario_from_dict(scenario_dict), 0)
    assert exp.client(0).drop_last is True


def test_local_sgd_on_tensors_equals_on_arrays() -> None:
    x, y = problem()
    models = [build_model("logreg", (2,), 3, seed=0) for _ in range(2)]
    args = dict(epochs=2, batch_size=4, lr=0.1, weight_decay=0.01)
    loss_a = local_sgd(models[0], x, y, rng=np.random.default_rng(5), **args)
    xt, yt = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    loss_t = local_sgd(models[1], xt, yt, rng=np.random.default_rng(5), **args)
    assert loss_a == loss_t
    assert all(np.array_equal(a, b) for a, b in zip(*map(get_weights, models)))


def test_trainer_on_tensors_is_a_plain_loop_bit_for_bit() -> None:
    """The path the legacy clients and the Message-API blocks share (ArrayData of
    tensors -> sgd_passes: index_select batches, the losses copied to the host once)
    against a plain loop (x[idx], loss.item() each step) on the same permutations."""
    x, y = problem()
    theta = get_weights(build_model("logreg", (2,), 3, seed=0))
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    data = ArrayData(xt, yt, batch_size=4, seed=7, partition_id=2, device="cpu")
    model = build_model("logreg", (2,), 3, seed=1)
    run = LocalTrainer(model, data, 2, 0.1, local_steps=5, weight_decay=0.01).train(
        theta, {SERVER_ROUND: 3}
    )
    reference = build_model("logreg", (2,), 3, seed=1)
    set_weights(reference, theta)
    params, rng, losses = list(reference.parameters()), client_rng(7, 3, 2), []
    orders = [torch.from_numpy(rng.permutation(10)) for _ in range(2)]  # K = 5 > 3 a pass
    for idx in [idx for order in orders for idx in torch.split(order, 4)][:5]:
        loss = F.cross_entropy(reference(xt[idx]), yt[idx])
        losses.append(loss.item())
        for p in params:
            p.grad = None
        loss.backward()
        sgd_step(params, 0.1, 0.01)
    assert run.steps == 5 and run.metrics[TRAIN_LOSS] == float(np.mean(losses))
    assert all(np.array_equal(a, b) for a, b in zip(get_weights(model), get_weights(reference)))


def test_dropout_masks_come_from_the_seed_round_client_stream() -> None:
    """CINIC-10's CNN draws dropout masks: a client's update at (seed, round, id) is the
    same whatever the shared client model trained before, and another round differs."""
    rng = np.random.default_rng(0)
    x = rng.random((16, 3, 32, 32), dtype=np.float32)
    y = rng.integers(0, 10, 16)
    model = build_model("fedawe-cnn-cinic10", (3, 32, 32), 10, seed=0)
    theta = get_weights(model)
    data = ArrayData(x, y, batch_size=8, seed=5, partition_id=1)
    trainer = LocalTrainer(model, data, 1, 0.1, local_steps=2)

    def update(server_round: int) -> list[np.ndarray]:
        trainer.train(theta, {SERVER_ROUND: server_round})
        return get_weights(trainer.model)

    first = update(3)
    other = update(4)  # advances every generator the model holds
    again = update(3)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("kwargs", [{"epochs": 2}, {"steps": 5}])
def test_losses_are_every_step_loss_and_change_nothing(kwargs) -> None:
    # ``losses`` gives what a batch_weight sees (loss.item() of every step, in order);
    # the model and the returned mean are those of a run without it.
    x, y = problem()
    seen, out, models = [], [], []
    for extra in ({"batch_weight": lambda f: seen.append(f) or 1.0}, {"losses": out}):
        model = build_model("logreg", (2,), 3, seed=0)
        data = ArrayData(x, y, batch_size=4, seed=0, partition_id=0)
        mean, steps = sgd_passes(model, data.passes({}), lr=0.1, **{"epochs": 1, **kwargs}, **extra)
        models.append((get_weights(model), mean, steps))
    assert out == seen and len(out) == models[0][2] == (6 if "epochs" in kwargs else 5)
    (wa, ma, _), (wb, mb, _) = models
    assert ma == mb and all(np.array_equal(a, b) for a, b in zip(wa, wb))
    # the mean: of the last pass (epochs), of all steps (steps)
    assert mb == pytest.approx(np.mean(out[-3:] if "epochs" in kwargs else out), abs=0)


def test_k_steps_gather_no_batch_beyond_the_last() -> None:
    """With ``steps``, a pass is asked for the batches the steps take, none more (a
    user's loader is not read ahead); the passes and batches are those of the epochs."""
    x, y = problem(10)
    asked: list[int] = []

    def one_pass():
        for i in range(0, 10, 4):
            asked.append(i)
            yield torch.from_numpy(x[i : i + 4]), torch.from_numpy(y[i : i + 4])

    _, steps = sgd_passes(BatchSizes(), one_pass, epochs=1, lr=0.1, steps=4)
    assert steps == 4 and asked == [0, 4, 8, 0]


def test_mean_of_is_np_mean() -> None:
    rng = np.random.default_rng(0)
    for n in range(1, 40):
        values = (rng.random(n) * 10.0 ** rng.integers(-4, 4, n)).tolist()
        assert mean_of(values) == float(np.mean(values))
