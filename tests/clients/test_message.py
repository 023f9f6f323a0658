"""The Message-API client blocks (``fedram_flwr.clients.message``): each trains exactly
as the legacy NumPyClient of its objective (same arrays, same metrics, bit for bit, on the
same batches), keeps SCAFFOLD's c_i in ``context.state``, and names what is wrong when the
contract is broken."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from torch.nn import functional as F

from fedram_flwr.clients import (
    CAFedClient,
    CVaRClient,
    ERMClient,
    RCFLClient,
    ScaffoldClient,
    evaluate,
    train_amplified_scaffold,
    train_ca_fed,
    train_cvar,
    train_erm,
    train_focus,
    train_rcfl,
    train_scaffold,
)
from fedram_flwr.clients.batches import ArrayData
from fedram_flwr.clients.models import build_model, get_weights
from fedram_flwr.clients.train_blocks import OBJECTIVES, objective_for, objective_of
from fedram_flwr.protocol import (
    LOCAL_OPTIMUM,
    NUM_EXAMPLES,
    SCAFFOLD_CONTROL,
    SERVER_ROUND,
    TRAIN_SECONDS,
    join_model_control,
    join_theta_t,
)
from fedram_flwr.registry import ALGORITHMS
from tests.helpers import instruction_message, node_with

PID, SEED, LR = 3, 11, 0.05
CVAR = {"cvar-alpha": 0.3, "cvar-gamma": 0.2, "lr-t": 0.1}
RCFL = {"rcfl-alpha": 0.5, "rcfl-p": 0.2, "rcfl-mu": 0.1, "lr-eta": 0.05}


def data(n: int = 23) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    return rng.standard_normal((n, 1, 4, 4)).astype(np.float32), rng.integers(0, 3, n)


def new_model(seed: int = 0) -> torch.nn.Module:
    return build_model("mlp", (1, 4, 4), 3, seed=seed)


class SeededLoader:
    """A user's data loader that yields the legacy client's batches: each pass a fresh
    permutation from the (seed, round, id) stream, as ``ERMClient`` draws them."""

    def __init__(self, batch_size: int, server_round: int) -> None:
        x, y = data()
        self.dataset = y
        self.one_pass = ArrayData(x, y, batch_size=batch_size, seed=SEED, partition_id=PID).passes(
            {SERVER_ROUND: server_round}
        )

    def __iter__(self):
        return iter(self.one_pass())


def legacy(cls: type[ERMClient], state: RecordDict, **training) -> ERMClient:
    x, y = data()
    return cls(
        partition_id=PID, model=new_model(), x=x, y=y, lr=LR, seed=SEED, state=state, **training
    )


def train_content(arrays: list[np.ndarray], config: dict) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord(arrays), "config": ConfigRecord(config)})


def assert_same_fit(reply: Message, fit: tuple) -> None:
    """The reply carries the legacy fit's arrays (bytes, dtype, shape) and metrics."""
    arrays, num_examples, metrics = fit
    got = reply.content["arrays"].to_numpy_ndarrays()
    assert [(a.dtype, a.shape, a.tobytes()) for a in got] == [
        (a.dtype, a.shape, a.tobytes()) for a in arrays
    ]
    sent = dict(reply.content["metrics"])
    assert sent.pop(NUM_EXAMPLES) == num_examples == 23
    assert sent.pop(TRAIN_SECONDS) > 0
    assert sent == {k: v for k, v in metrics.items() if k != TRAIN_SECONDS}


THETA = get_weights(new_model(seed=1))
CASES = {
    "erm": (train_erm, ERMClient, THETA, {}),
    "cvar": (train_cvar, CVaRClient, join_theta_t(THETA, 0.3), CVAR),
    "rcfl": (train_rcfl, RCFLClient, join_theta_t(THETA, 0.5), RCFL),
    "ca-fed": (train_ca_fed, CAFedClient, THETA, {}),
    "scaffold": (
        train_scaffold,
        ScaffoldClient,
        join_model_control(THETA, [np.full_like(a, 0.01) for a in THETA]),
        {},
    ),
}
TRAININGS = {
    "epochs": dict(local_epochs=2, batch_size=4),
    "steps": dict(local_epochs=1, batch_size=4, local_steps=7, weight_decay=0.01),
}


@pytest.mark.parametrize("training", TRAININGS.values(), ids=TRAININGS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
def test_block_returns_the_legacy_clients_fit_bit_for_bit(case, training) -> None:
    block, cls, arrays, extra = case
    config = {SERVER_ROUND: 4, **extra}
    fit = legacy(cls, RecordDict(), **training).fit(arrays, config)
    msg = instruction_message(train_content(arrays, config))
    loader = SeededLoader(training["batch_size"], server_round=4)
    reply = block(
        msg,
        node_with(PID),
        new_model(),
        loader,
        lr=LR,
        epochs=training["local_epochs"],
        steps=training.get("local_steps"),
        weight_decay=training.get("weight_decay", 0.0),
    )
    assert reply.metadata.reply_to_message_id == msg.metadata.message_id
    assert_same_fit(reply, fit)
    assert objective_for(cls) is block


def test_a_node_finds_its_objective_by_the_algorithm_name() -> None:
    """``objective_of`` (what the project's ClientApp reads instead of the registry): an
    objective's ``algorithms`` are registered names, each named once; the rest train
    plain local SGD."""
    named = [name for objective in OBJECTIVES for name in objective.algorithms]
    assert sorted(named) == sorted(set(named)) and set(named) <= set(ALGORITHMS)
    expected = {"fed-cvar-avg": train_cvar, "rfedfair": train_rcfl, "scaffold": train_scaffold}
    expected |= {"amplified-scaffold": train_amplified_scaffold, "focus": train_focus}
    expected |= {"ca-fed": train_ca_fed, "afl": train_ca_fed, "qffl": train_ca_fed}
    for name in ALGORITHMS:
        assert objective_of(name) is expected.get(name, train_erm), name


def test_scaffold_control_variate_lives_in_context_state_across_calls() -> None:
    """Two rounds through one Context give the legacy client's two rounds (c_i carried
    over in ``context.state``); the second round from a fresh Context differs."""
    c = [np.full_like(a, 0.01) for a in THETA]
    config = {SERVER_ROUND: 1}
    state = RecordDict()
    first = legacy(ScaffoldClient, state, local_epochs=1, batch_size=4).fit(
        join_model_control(THETA, c), config
    )
    second_arrays = join_model_control(first[0][: len(THETA)], c)
    second = legacy(ScaffoldClient, state, local_epochs=1, batch_size=4).fit(
        second_arrays, {SERVER_ROUND: 2}
    )

    def block_round(context, arrays, server_round):
        msg = instruction_message(train_content(arrays, {SERVER_ROUND: server_round}))
        loader = SeededLoader(4, server_round)
        return train_scaffold(msg, context, new_model(), loader, lr=LR)

    context = node_with(PID)
    assert_same_fit(block_round(context, join_model_control(THETA, c), 1), first)
    c_after_one = context.state[SCAFFOLD_CONTROL].to_numpy_ndarrays()
    assert any(np.any(a != 0) for a in c_after_one)
    assert_same_fit(block_round(context, second_arrays, 2), second)
    kept = context.state[SCAFFOLD_CONTROL].to_numpy_ndarrays()
    assert all(
        np.array_equal(a, b) for a, b in zip(kept, state[SCAFFOLD_CONTROL].to_numpy_ndarrays())
    )

    fresh = block_round(node_with(PID), second_arrays, 2)
    assert not all(
        np.array_equal(a, b) for a, b in zip(fresh.content["arrays"].to_numpy_ndarrays(), second[0])
    )


def test_ca_fed_local_optimum_is_computed_once_and_kept_in_context_state() -> None:
    config = {SERVER_ROUND: 1, "report-local-optimum": True}
    x, y = data()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=5
    )
    legacy_value = legacy(CAFedClient, RecordDict(), local_epochs=1, batch_size=5).fit(
        THETA, config
    )[2][LOCAL_OPTIMUM]
    context = node_with(PID)
    msg = instruction_message(train_content(THETA, config))
    reply = train_ca_fed(msg, context, new_model(), loader, lr=LR)
    value = reply.content["metrics"][LOCAL_OPTIMUM]
    assert value == pytest.approx(legacy_value, rel=1e-4)  # same data, another order
    assert context.state[LOCAL_OPTIMUM][LOCAL_OPTIMUM] == value
    context.state[LOCAL_OPTIMUM] = ConfigRecord({LOCAL_OPTIMUM: -1.0})
    again = train_ca_fed(msg, context, new_model(), loader, lr=LR)
    assert again.content["metrics"][LOCAL_OPTIMUM] == -1.0


def test_a_torch_data_loader_trains_as_plain_sgd_and_keeps_state_dict_names() -> None:
    """Independent reference: a hand-written SGD loop over the same DataLoader; the lr comes
    from the train config (Flower's quickstart sends "lr"); the reply keeps the received
    record's keys (a torch state_dict's names)."""
    x, y = data()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=6
    )
    reference = new_model(seed=1)
    for _ in range(2):
        for xb, yb in loader:
            reference.zero_grad()
            F.cross_entropy(reference(xb), yb).backward()
            with torch.no_grad():
                for p in reference.parameters():
                    p.add_(p.grad, alpha=-0.2)
    arrays = ArrayRecord(new_model(seed=1).state_dict())
    msg = instruction_message(RecordDict({"arrays": arrays, "config": ConfigRecord({"lr": 0.2})}))
    reply = train_erm(msg, node_with(PID), new_model(), loader, lr=99.0, epochs=2)
    got = reply.content["arrays"]
    assert list(got.keys()) == list(reference.state_dict().keys())
    for a, b in zip(got.to_numpy_ndarrays(), get_weights(reference)):
        assert a.tobytes() == b.tobytes()


def test_dict_batches_through_to_xy() -> None:
    x, y = data()
    batches = [
        {"img": torch.from_numpy(x[i : i + 8]), "label": torch.from_numpy(y[i : i + 8])}
        for i in range(0, 23, 8)
    ]

    class DictLoader(list):
        dataset = y

    msg = instruction_message(train_content(THETA, {SERVER_ROUND: 1}))
    with pytest.raises(ValueError, match=r"to_xy.*dict batches.*\['img', 'label'\]"):
        train_erm(msg, node_with(PID), new_model(), DictLoader(batches), lr=LR)
    reply = train_erm(
        msg,
        node_with(PID),
        new_model(),
        DictLoader(batches),
        lr=LR,
        to_xy=lambda b: (b["img"], b["label"]),
    )
    assert reply.content["metrics"][NUM_EXAMPLES] == 23


def test_evaluate_reports_loss_and_accuracy_of_the_models_arrays() -> None:
    x, y = data()
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=10
    )
    reference = new_model(seed=1)
    with torch.no_grad():
        logits = reference(torch.from_numpy(x))
    loss = float(F.cross_entropy(logits, torch.from_numpy(y)))
    accuracy = float((logits.argmax(1).numpy() == y).mean())
    for arrays in (THETA, join_theta_t(THETA, 5.0), join_model_control(THETA, THETA)):
        msg = instruction_message(train_content(arrays, {}), message_type="evaluate")
        reply = evaluate(msg, node_with(PID), new_model(), loader)
        metrics = dict(reply.content["metrics"])
        assert metrics["eval-loss"] == pytest.approx(loss, rel=1e-6)
        assert metrics["eval-accuracy"] == pytest.approx(accuracy)
        assert (metrics[NUM_EXAMPLES], metrics["partition-id"]) == (23, PID)
    msg = instruction_message(train_content(THETA[:-1], {}), message_type="evaluate")
    with pytest.raises(ValueError, match="sent 5 arrays for a model of 6"):
        evaluate(msg, node_with(PID), new_model(), loader)


# ------------------------------------------------------------------ contract errors
def call(block, arrays, config, *, context=None, **kwargs):
    msg = instruction_message(train_content(arrays, {SERVER_ROUND: 1, **config}))
    return block(
        msg, context or node_with(PID), new_model(), SeededLoader(4, 1), **{"lr": LR, **kwargs}
    )


@pytest.mark.parametrize(
    ("block", "arrays", "config", "pattern"),
    [
        (
            train_cvar,
            THETA,
            CVAR,
            r"train_cvar: the Fed-CVaR-Avg strategy sends .* 7 arrays for this model's 6"
            r".* carries 6.*join_theta_t",
        ),
        (train_scaffold, THETA, {}, r"SCAFFOLD .* 12 arrays .* carries 6.*join_model_control"),
        (train_erm, join_theta_t(THETA, 0.0), {}, r"train_erm: .* 6 arrays .* carries 7"),
        (
            train_erm,
            join_theta_t(THETA, 0.0),
            CVAR,
            r"sent 'cvar-alpha', a key of Fed-CVaR-"
            r"Avg.*call train_cvar",
        ),
        (train_erm, THETA, {"report-local-optimum": True}, r"key of CA-Fed.*call train_ca_fed"),
        (train_cvar, join_theta_t(THETA, 0.0), {**CVAR, **RCFL}, r"'lr-eta'.*call train_rcfl"),
        (
            train_cvar,
            join_theta_t(THETA, 0.0),
            {"cvar-alpha": 0.1, "cvar-gamma": 0.1},
            r"train_cvar: the train config has no 'lr-t'.*the Fed-CVaR-Avg strategy sends it",
        ),
        (
            train_rcfl,
            join_theta_t(THETA, 0.0),
            {**RCFL, "rcfl-p": 0.9},
            r"alpha of client 3: alpha_i must lie in \[p_i, 1\]",
        ),
    ],
)
def test_contract_errors_name_the_key_the_algorithm_and_the_fix(block, arrays, config, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(block, arrays, config)


def test_a_message_without_the_arrays_record_is_named() -> None:
    msg = instruction_message(RecordDict({"config": ConfigRecord({SERVER_ROUND: 1})}))
    with pytest.raises(ValueError, match=r"no ArrayRecord 'arrays' \(records: \['config'\]\)"):
        train_erm(msg, node_with(PID), new_model(), SeededLoader(4, 1), lr=LR)


def test_a_node_without_partition_id_is_told_what_to_add() -> None:
    with pytest.raises(ValueError, match=r"no 'partition-id'.*--node-config \"partition-id="):
        call(train_erm, THETA, {}, context=node_with(None))


def test_no_learning_rate_and_a_batch_size_the_loader_cannot_honour() -> None:
    with pytest.raises(ValueError, match=r"no learning rate.*pass lr=\.\.\. or send 'lr'"):
        call(train_erm, THETA, {}, lr=None)
    with pytest.raises(ValueError, match=r"sent 'batch-size' = 8.*fixes its own batch size"):
        call(train_erm, THETA, {"batch-size": 8})


def test_a_loader_without_a_sized_dataset_needs_num_examples() -> None:
    msg = instruction_message(train_content(THETA, {SERVER_ROUND: 1}))
    with pytest.raises(ValueError, match="num_examples: the data loader has no sized .dataset"):
        train_erm(msg, node_with(PID), new_model(), iter([]), lr=LR)


def test_a_reply_missing_a_metric_the_strategy_reads_is_named() -> None:
    content = RecordDict(
        {
            "arrays": ArrayRecord(join_theta_t(THETA, 0.0)),
            "metrics": MetricRecord({NUM_EXAMPLES: 3, "partition-id": 1, "train-loss": 0.5}),
        }
    )
    with pytest.raises(ValueError, match=r"lack 't', which the Fed-CVaR-Avg strategy reads"):
        train_cvar.check_reply(content, CVAR)
    train_erm.check_reply(content, {})
    with pytest.raises(ValueError, match=r"lack 'received-loss', which the CA-Fed, AFL or q-"):
        train_ca_fed.check_reply(content, {})
    content["metrics"]["received-loss"] = 0.7
    train_ca_fed.check_reply(content, {})
    with pytest.raises(ValueError, match=r"lack 'local-optimum-loss', which the CA-Fed"):
        train_ca_fed.check_reply(content, {"report-local-optimum": True})
