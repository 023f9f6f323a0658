"""The app's own optimizer in the client blocks (``optimizer=``, fedram_flwr.clients.optimizers):
it is the one that steps (momentum kept), plain SGD through it is the block's own step,
Fed-CVaR-Avg's t joins it with lr-t, SCAFFOLD refuses what breaks option II, and the
app's dict batches and reply content go through ``to_xy`` and ``local(...).reply``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from torch.nn import functional as F

from fedram_flwr.clients import train_ca_fed, train_cvar, train_erm, train_rcfl
from fedram_flwr.clients.models import get_weights
from fedram_flwr.objectives import cvar_gradient_weights
from fedram_flwr.protocol import RECEIVED_LOSS, SERVER_ROUND, THRESHOLD_T, join_theta_t
from tests.clients.test_message import (
    CASES,
    CVAR,
    PID,
    THETA,
    data,
    new_model,
    train_content,
)
from tests.helpers import instruction_message, node_with

LR = 0.05


def loader(batch_size: int = 6, dicts: bool = False):
    """A DataLoader over the test data, in a fixed order; ``dicts``: Flower Datasets'
    {"img": ..., "label": ...} batches, as Flower's quickstart-pytorch gets them."""
    x, y = data()
    if dicts:
        rows = [{"img": torch.from_numpy(a), "label": int(b)} for a, b in zip(x, y)]
        return torch.utils.data.DataLoader(rows, batch_size=batch_size)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size)


def momentum_sgd(params):
    return torch.optim.SGD(params, lr=123.0, momentum=0.9)  # lr: the round's replaces it


def fit(block, arrays, config, **kwargs) -> Message:
    msg = instruction_message(train_content(arrays, {SERVER_ROUND: 1, **config}))
    return block(msg, node_with(PID), new_model(), loader(), lr=LR, epochs=2, **kwargs)


def arrays_of(reply: Message) -> list[np.ndarray]:
    return reply.content["arrays"].to_numpy_ndarrays()


def reference_momentum() -> list[np.ndarray]:
    """The quickstart's own loop: SGD(lr, momentum=0.9), zero_grad, CE, step."""
    model = new_model()
    model.load_state_dict({k: torch.from_numpy(a) for k, a in zip(model.state_dict(), THETA)})
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for _ in range(2):
        for x, y in loader():
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    return get_weights(model)


@pytest.mark.parametrize("name", ["erm", "cvar", "rcfl", "ca-fed", "scaffold"])
def test_plain_sgd_through_the_optimizer_is_the_blocks_own_step(name: str) -> None:
    """torch's SGD without momentum, as an instance or a factory, gives the default
    path's arrays bit for bit (model) or to float rounding (t, eta in a float64 tensor)."""
    block, _, arrays, config = CASES[name]
    default = arrays_of(fit(block, arrays, config))
    via_factory = arrays_of(fit(block, arrays, config, optimizer=lambda p: torch.optim.SGD(p)))
    model = new_model()
    msg = instruction_message(train_content(arrays, {SERVER_ROUND: 1, **config}))
    instance = torch.optim.SGD(model.parameters(), lr=9.0)
    via_instance = arrays_of(
        block(msg, node_with(PID), model, loader(), lr=LR, epochs=2, optimizer=instance)
    )
    assert len(instance.param_groups) == 1  # t's group was taken out again
    for got in (via_factory, via_instance):
        n = len(THETA)
        assert all(np.array_equal(a, b) for a, b in zip(got[:n], default[:n]))
        assert all(np.allclose(a, b, rtol=1e-12) for a, b in zip(got[n:], default[n:]))


@pytest.mark.parametrize("block", [train_erm, train_ca_fed], ids=["erm", "ca-fed"])
def test_the_apps_momentum_optimizer_is_the_one_that_steps(block) -> None:
    """The quickstart's SGD(momentum=0.9) trains as its own loop would, at the round's lr;
    before, the block dropped it and trained plain SGD."""
    reply = fit(block, THETA, {}, optimizer=momentum_sgd)
    reference = reference_momentum()
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(arrays_of(reply), reference))
    plain = arrays_of(fit(block, THETA, {}))
    assert not all(np.allclose(a, b, atol=1e-4) for a, b in zip(plain, reference))


def test_cvar_t_joins_the_optimizer_with_lr_t_and_its_momentum() -> None:
    """t is stepped by the app's optimizer in its own group (lr = lr-t, momentum 0.9):
    two steps (one batch, two epochs) replayed by hand with torch's momentum SGD on
    (dG/df grad f_b, dG/dt) give the reply's t, which plain SGD does not."""
    one = loader(batch_size=23)  # one batch a pass: two steps over two epochs
    model, t0 = new_model(), 0.3
    msg = instruction_message(train_content(join_theta_t(THETA, t0), {SERVER_ROUND: 1, **CVAR}))
    reply = train_cvar(msg, node_with(PID), model, one, lr=LR, epochs=2, optimizer=momentum_sgd)
    t = reply.content["metrics"][THRESHOLD_T]
    # replay: the batch losses at the model before each step
    replay = new_model()
    replay.load_state_dict({k: torch.from_numpy(a) for k, a in zip(replay.state_dict(), THETA)})
    opt = torch.optim.SGD(replay.parameters(), lr=LR, momentum=0.9)
    s = torch.tensor([t0], dtype=torch.float64)
    opt.add_param_group({"params": [s], "lr": CVAR["lr-t"]})
    for _ in range(2):
        (x, y) = next(iter(one))
        loss = F.cross_entropy(replay(x), y)
        w, d_t = cvar_gradient_weights(
            loss.item(), float(s), CVAR["cvar-alpha"], CVAR["cvar-gamma"]
        )
        opt.zero_grad()
        (loss * w).backward()
        s.grad = torch.tensor([d_t], dtype=torch.float64)
        opt.step()
    assert t == pytest.approx(float(s), rel=1e-9)
    plain_t = fit(train_cvar, join_theta_t(THETA, t0), CVAR)
    assert arrays_of(reply)[-1][0] == t != arrays_of(plain_t)[-1][0]


def test_scaffold_refuses_momentum_naming_option_ii() -> None:
    block, _, arrays, config = CASES["scaffold"]
    with pytest.raises(ValueError, match=r"train_scaffold: optimizer=SGD with momentum=0.9 is"):
        fit(block, arrays, config, optimizer=momentum_sgd)
    with pytest.raises(ValueError, match="option II.*Allowed: no optimizer"):
        fit(block, arrays, config, optimizer=lambda p: torch.optim.Adam(p))


def test_wrong_optimizers_are_errors_naming_the_argument() -> None:
    with pytest.raises(ValueError, match=r"train_erm: optimizer=3 is neither"):
        fit(train_erm, THETA, {}, optimizer=3)
    other = torch.optim.SGD(new_model().parameters(), lr=0.1)  # another model's
    with pytest.raises(ValueError, match="optimizer's 6 tensors are not this model's 6"):
        fit(train_erm, THETA, {}, optimizer=other)
    with pytest.raises(ValueError, match="weight_decay=0.01 and optimizer=... both given"):
        fit(train_erm, THETA, {}, optimizer=momentum_sgd, weight_decay=0.01)
    with pytest.raises(ValueError, match="returned int, not a torch optimizer"):
        fit(train_rcfl, *CASES["rcfl"][2:3], CASES["rcfl"][3], optimizer=lambda p: 1)


def test_local_keeps_the_apps_train_and_reply_lines_with_dict_batches() -> None:
    """``local(...)``: ``train`` in the quickstart's signature returns the train loss;
    ``reply(content)`` keeps the app's records and metrics and puts the objective's in."""
    msg = instruction_message(train_content(THETA, {SERVER_ROUND: 1}))
    local = train_ca_fed.local(
        msg, node_with(PID), optimizer=momentum_sgd, to_xy=lambda b: (b["img"], b["label"])
    )
    with pytest.raises(ValueError, match=r"train_ca_fed: reply\(\) before train\(\)"):
        local.reply()
    model = new_model()
    train_loss = local.train(model, loader(dicts=True), 2, LR, "cpu")
    app = RecordDict(
        {
            "arrays": ArrayRecord(model.state_dict()),
            "metrics": MetricRecord({"train_loss": train_loss, "num-examples": 23}),
            "extra": MetricRecord({"mine": 1.0}),
        }
    )
    reply = local.reply(app)
    metrics = reply.content["metrics"]
    assert metrics["train_loss"] == metrics["train-loss"] == train_loss
    assert RECEIVED_LOSS in metrics and metrics["partition-id"] == PID
    assert reply.content["extra"]["mine"] == 1.0
    assert list(reply.content["arrays"].keys()) == list(msg.content["arrays"].keys())
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(arrays_of(reply), reference_momentum()))
