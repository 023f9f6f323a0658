"""``training.lr_schedule``: FedAWE's eta_l = eta_0 / sqrt(t / 10 + 1), t = round - 1
(App. J, Table 6), applied where every client trains, the same in both Flower APIs."""

from __future__ import annotations

import copy
import math
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from torch.nn import functional as F

from fedram_flwr.clients.batches import ArrayData
from fedram_flwr.clients.lr_schedule import LR_SCHEDULES, scheduled_lr
from fedram_flwr.clients.models import build_model, get_weights
from fedram_flwr.clients.training import LocalTrainer, sgd_passes
from fedram_flwr.engines import run_in_process, run_message_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import LR, SERVER_ROUND
from fedram_flwr.registry import load_scenario, scenario_from_dict
from fedram_flwr.scenario.config import TrainingConfig
from tests.helpers import SEED, TINY_GAUSSIAN, final_arrays

ETA_0 = 0.1


def test_the_schedule_values_at_rounds_1_11_21() -> None:
    """t = 0, 10, 20: 1 / sqrt(1), 1 / sqrt(2), 1 / sqrt(3)."""
    got = [scheduled_lr(ETA_0, "inv-sqrt", {SERVER_ROUND: r}) for r in (1, 11, 21)]
    assert got == [ETA_0, ETA_0 / math.sqrt(2), ETA_0 / math.sqrt(3)]
    assert scheduled_lr(ETA_0, "inv-sqrt", {SERVER_ROUND: 6}) == ETA_0 / math.sqrt(1.5)
    assert scheduled_lr(ETA_0, "constant", {SERVER_ROUND: 21}) is ETA_0  # untouched


def test_the_config_literal_is_the_modules_list() -> None:
    hint = typing.get_type_hints(TrainingConfig)["lr_schedule"]
    assert typing.get_args(hint) == LR_SCHEDULES


def test_inv_sqrt_needs_the_round() -> None:
    with pytest.raises(ValueError, match="inv-sqrt: the train config has no 'server-round'"):
        scheduled_lr(ETA_0, "inv-sqrt", {})
    with pytest.raises(ValueError, match="server round 0 is not >= 1"):
        scheduled_lr(ETA_0, "inv-sqrt", {SERVER_ROUND: 0})
    with pytest.raises(ValueError, match="allowed values"):
        scheduled_lr(ETA_0, "cosine", {SERVER_ROUND: 1})


def problem() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 2)).astype(np.float32), (np.arange(8) % 3).astype(np.int64)


def one_full_batch_step(schedule: str, config: dict) -> tuple[list[np.ndarray], float]:
    """One SGD step of logistic regression on all 8 examples under ``schedule``."""
    x, y = problem()
    data = ArrayData(x, y, batch_size=8, seed=0, partition_id=0)
    model = build_model("logreg", (2,), 3, seed=0)
    trainer = LocalTrainer(model, data, 0, ETA_0, local_steps=1, lr_schedule=schedule)
    run = trainer.train(get_weights(build_model("logreg", (2,), 3, seed=1)), config)
    return get_weights(model), run.lr


@pytest.mark.parametrize(("server_round", "factor"), [(1, 1.0), (11, 2.0**-0.5), (21, 3.0**-0.5)])
def test_one_step_moves_by_the_scheduled_step_size(server_round: int, factor: float) -> None:
    """theta - eta_0 / sqrt(t/10 + 1) * grad, the gradient of the mean loss by hand."""
    x, y = problem()
    theta = get_weights(build_model("logreg", (2,), 3, seed=1))
    w = torch.tensor(theta[0], requires_grad=True)
    b = torch.tensor(theta[1], requires_grad=True)
    loss = F.cross_entropy(torch.from_numpy(x) @ w.T + b, torch.from_numpy(y))
    g_w, g_b = (g.numpy() for g in torch.autograd.grad(loss, (w, b)))
    got, lr = one_full_batch_step("inv-sqrt", {SERVER_ROUND: server_round})
    assert lr == pytest.approx(ETA_0 * factor, rel=1e-15)
    np.testing.assert_allclose(got[0], theta[0] - ETA_0 * factor * g_w, atol=1e-7)
    np.testing.assert_allclose(got[1], theta[1] - ETA_0 * factor * g_b, atol=1e-7)
    # a strategy's own eta_t (the config's lr) is what the schedule scales
    _, sent = one_full_batch_step("inv-sqrt", {SERVER_ROUND: server_round, LR: 0.5})
    assert sent == pytest.approx(0.5 * factor, rel=1e-15)


def test_constant_is_the_unscheduled_loop_bit_for_bit() -> None:
    """The default trains as before the schedule existed: sgd_passes at training.lr."""
    x, y = problem()
    config = {SERVER_ROUND: 21}
    got, lr = one_full_batch_step("constant", config)
    reference = build_model("logreg", (2,), 3, seed=1)
    data = ArrayData(x, y, batch_size=8, seed=0, partition_id=0)
    sgd_passes(reference, data.passes(config), epochs=1, lr=ETA_0, steps=1)
    assert lr == ETA_0
    assert all(np.array_equal(a, b) for a, b in zip(got, get_weights(reference), strict=True))


def test_the_scenarios_schedule_reaches_every_client(scenario_dict) -> None:
    assert Experiment(scenario_from_dict(scenario_dict), 0).client(0).lr_schedule == "constant"
    scenario_dict["training"]["lr_schedule"] = "inv-sqrt"
    client = Experiment(scenario_from_dict(scenario_dict), 0).client(1)
    assert client.trainer.lr_schedule == "inv-sqrt"


def test_both_apis_train_the_same_model_under_inv_sqrt(tmp_path: Path) -> None:
    """12 rounds of FedAvg (rounds 11 and 12 at eta_0 / sqrt(2) and below): the legacy and
    the Message-API in-process runs end at the same model bit for bit, another than the
    constant schedule's."""
    paths = {}
    for schedule in LR_SCHEDULES:
        raw = copy.deepcopy(TINY_GAUSSIAN)
        raw.update(rounds=12, eval_every=6, algorithm={"name": "fedavg", "params": {}})
        raw["availability"] = {"oracle": "bernoulli", "params": {"p": [1.0, 0.6, 0.3]}}
        raw["training"] = {"lr": 0.05, "local_steps": 3, "batch_size": 16}
        raw["training"]["lr_schedule"] = schedule
        paths[schedule] = tmp_path / f"{schedule}.yaml"
        paths[schedule].write_text(yaml.safe_dump(raw, sort_keys=False))
    legacy = run_in_process(load_scenario(paths["inv-sqrt"]), SEED, tmp_path / "legacy")
    message = run_message_in_process(load_scenario(paths["inv-sqrt"]), SEED, tmp_path / "msg")
    constant = run_in_process(load_scenario(paths["constant"]), SEED, tmp_path / "constant")
    for a, b, c in zip(*map(final_arrays, (legacy, message, constant)), strict=True):
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, c)
