"""The client blocks train the model the handler prepared: a personal head stays.

The handler of a personalised app loads the server's model, then restores its own head
from ``context.state``. In the ``.local(...)`` form the block loads nothing over that
model (the message carries the whole model; the handler loaded it); in the one-call form
it loads what the message carries, by key, and leaves the rest (the server sends the
body only). A forward pre-hook on the head sees its weights at the first forward pass.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fedram_flwr.clients import train_cvar, train_erm, train_scaffold
from fedram_flwr.protocol import ALGORITHM_ARRAYS, CVAR_ALPHA, CVAR_GAMMA, LR_T
from tests.helpers import instruction_message

HEAD = "personal-head"
CVAR = {CVAR_ALPHA: 0.5, CVAR_GAMMA: 0.1, LR_T: 0.01}


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(2, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(x)))


def server_model() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return Net().state_dict()


def personal_head() -> dict[str, np.ndarray]:
    g = np.random.default_rng(7)
    return {
        "head.weight": g.normal(size=(2, 4)).astype(np.float32),
        "head.bias": np.ones(2, np.float32),
    }


def context() -> Context:
    state = RecordDict({HEAD: ArrayRecord({k: Array(v) for k, v in personal_head().items()})})
    return Context(0, 1, {"partition-id": 0, "num-partitions": 1}, state, {})


def message(keys: list[str] | None = None, extra: dict | None = None, **config) -> Message:
    model = {k: v for k, v in server_model().items() if keys is None or k in keys}
    content = RecordDict(
        {"arrays": ArrayRecord(model), "config": ConfigRecord({"lr": 0.1, **config})}
    )
    if extra is not None:
        content[ALGORITHM_ARRAYS] = ArrayRecord(extra)
    return instruction_message(content)


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 2, generator=g)
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def restore_head(model: Net, context: Context) -> None:
    """The app's line: its own head from context.state, over the global one."""
    head = context.state[HEAD].to_torch_state_dict()
    model.load_state_dict({**model.state_dict(), **head})


def first_forward(module: nn.Module) -> list[np.ndarray]:
    """The module's weight at its first forward pass (a pre-hook that changes nothing)."""
    seen: list[np.ndarray] = []

    def hook(m: nn.Module, args: tuple) -> None:
        if not seen:
            seen.append(m.weight.detach().numpy().copy())

    module.register_forward_pre_hook(hook)
    return seen


@pytest.mark.parametrize("block", ["erm", "cvar"])
def test_local_form_trains_the_handlers_model_and_reads_back_by_key(block: str) -> None:
    objective, config, extra = (
        (train_cvar, CVAR, {"4": Array(np.array([0.0]))})
        if block == "cvar"
        else (train_erm, {}, None)
    )
    msg, ctx = message(extra=extra, **config), context()
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())  # Flower's line works
    restore_head(model, ctx)
    seen = first_forward(model.head)
    local = objective.local(msg, ctx)
    local.train(model, loader(), 1, 0.1, "cpu")
    reply = local.reply()
    assert np.array_equal(seen[0], personal_head()["head.weight"])  # not the server's head
    arrays = reply.content["arrays"]
    sent = list(msg.content["arrays"].keys()) + (list(extra) if extra else [])
    assert list(arrays.keys()) == sent  # read back by key, t after the model
    trained = model.state_dict()
    for key in msg.content["arrays"].keys():
        assert np.array_equal(arrays[key].numpy(), trained[key].numpy())
    # the body trained from the server's body: it moved from there, not from a fresh Net
    assert not np.array_equal(arrays["body.weight"].numpy(), server_model()["body.weight"].numpy())


def test_one_call_form_loads_by_key_and_leaves_what_the_message_does_not_carry() -> None:
    msg, ctx = message(keys=["body.weight", "body.bias"]), context()  # the body only
    model = Net()
    restore_head(model, ctx)
    seen = first_forward(model.head)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    body_at_start = first_forward(model.body)
    reply = train_erm(msg, ctx, model, loader(), lr=0.1)
    assert np.array_equal(seen[0], personal_head()["head.weight"])
    assert np.array_equal(body_at_start[0], server_model()["body.weight"].numpy())  # loaded
    assert not np.array_equal(body_at_start[0], before["body.weight"].numpy())
    assert list(reply.content["arrays"].keys()) == ["body.weight", "body.bias"]


def test_keys_the_model_lacks_are_named() -> None:
    msg = message()
    msg.content["arrays"]["classifier.weight"] = Array(np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match=r"carry \['classifier.weight'\], which this model"):
        train_erm(msg, context(), Net(), loader(), lr=0.1)
    with pytest.raises(ValueError, match=r"carry \['classifier.weight'\], which this model"):
        train_erm.local(msg, context()).train(Net(), loader(), 1, 0.1)


def test_scaffold_refuses_a_partial_model_saying_why() -> None:
    body = ["body.weight", "body.bias"]
    control = {
        str(2 + i): Array(np.zeros_like(server_model()[k].numpy())) for i, k in enumerate(body)
    }
    msg = message(keys=body, extra=control)
    with pytest.raises(ValueError, match="needs the whole model on the wire"):
        train_scaffold(msg, context(), Net(), loader(), lr=0.1)


def test_legacy_client_keeps_its_personal_head_in_state() -> None:
    """The legacy NumPyClient (positional wire): ``personal`` keys from ``state``."""
    from fedram_flwr.clients.erm import PERSONAL, ERMClient

    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 2, generator=g)
    state = RecordDict({PERSONAL: context().state[HEAD]})  # kept from an earlier round
    common = dict(x=x, y=(x[:, 0] > 0).long(), lr=0.1, local_epochs=1, batch_size=8, seed=0)
    model = Net()
    client = ERMClient(
        partition_id=0, model=model, state=state, personal=("head.weight", "head.bias"), **common
    )
    seen = first_forward(model.head)
    body = first_forward(model.body)
    received = [v.numpy() for v in server_model().values()]
    arrays, _, _ = client.fit(received, {"server-round": 1})
    assert np.array_equal(seen[0], personal_head()["head.weight"])  # its own head trained
    assert np.array_equal(body[0], server_model()["body.weight"].numpy())  # the global body
    assert len(arrays) == 4  # the positional wire: every array
    trained_head = state[PERSONAL]["head.weight"].numpy()
    assert np.array_equal(trained_head, model.head.weight.detach().numpy())  # kept for next
    assert not np.array_equal(trained_head, personal_head()["head.weight"])
    plain = Net()
    seen_plain = first_forward(plain.head)
    ERMClient(partition_id=0, model=plain, **common).fit(received, {"server-round": 1})
    assert np.array_equal(seen_plain[0], server_model()["head.weight"].numpy())  # no personal
    with pytest.raises(ValueError, match=r"personal: \['fc.weight'\] are not keys"):
        ERMClient(partition_id=0, model=Net(), personal=("fc.weight",), **common)
