"""The SCAFFOLD client (clients/scaffold.py): one step by hand and its control variate
c_i kept in ``Context.state``, also through the in-process engine."""

from __future__ import annotations

import numpy as np
import torch
from flwr.common import (
    FitIns,
    parameters_to_ndarrays,
)
from torch.nn import functional as F

from fedram_flwr.clients import AmplifiedScaffoldClient, ScaffoldClient
from fedram_flwr.clients.models import build_model, get_weights
from fedram_flwr.engines import InProcessClientProxy, node_context
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import PARTITION_ID, PERIOD, SCAFFOLD_CONTROL
from fedram_flwr.registry import with_overrides
from fedram_flwr.scenario.config import Scenario


def problem(n: int = 12):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 2)).astype(np.float32), (np.arange(n) % 3).astype(np.int64)


def full_batch_grad(theta: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    w = torch.tensor(theta[0], requires_grad=True)
    b = torch.tensor(theta[1], requires_grad=True)
    loss = F.cross_entropy(torch.from_numpy(x) @ w.T + b, torch.from_numpy(y))
    return [g.numpy() for g in torch.autograd.grad(loss, (w, b))]


def test_client_one_step_and_control_kept_in_state() -> None:
    """K = 1 full-batch step: y = x - lr (g(x) - c_i + c) and, by option II,
    c_i^+ = g(x). The control variate survives in the state between client objects."""
    x_data, y_data = problem()
    lr = 0.3
    theta = get_weights(build_model("logreg", (2,), 3, seed=1))
    c = [np.full_like(a, 0.05) for a in theta]
    state = None
    c_i = [np.zeros_like(a) for a in theta]
    for server_round in (1, 2):
        client = ScaffoldClient(
            partition_id=2,
            model=build_model("logreg", (2,), 3, seed=0),
            x=x_data,
            y=y_data,
            lr=lr,
            local_epochs=1,
            batch_size=len(y_data),
            seed=0,
            local_steps=1,
            state=state,
        )
        state = client.state
        arrays, n, metrics = client.fit([*theta, *c], {"server-round": server_round})
        g = full_batch_grad(theta, x_data, y_data)
        assert n == 12 and metrics[PARTITION_ID] == 2 and len(arrays) == 4
        for got, t, gi, ci, cc in zip(arrays[:2], theta, g, c_i, c):
            np.testing.assert_allclose(got, t - lr * (gi - ci + cc), atol=1e-6)
        for dc, gi, ci in zip(arrays[2:], g, c_i):
            np.testing.assert_allclose(dc, gi - ci, atol=1e-6)
        for kept, gi in zip(state[SCAFFOLD_CONTROL].to_numpy_ndarrays(), g):
            np.testing.assert_allclose(kept, gi, atol=1e-6)
        c_i = g  # the next round starts from c_i = g(x)


def test_in_process_engine_keeps_the_control_in_context_state(tiny_gaussian: Scenario) -> None:
    scenario = with_overrides(
        tiny_gaussian,
        {
            "algorithm": {"name": "scaffold", "params": {}},
            "availability": {"oracle": "bernoulli", "params": {"p": [1.0, 1.0, 1.0]}},
        },
    )
    exp = Experiment(scenario, 0)
    context = node_context(1, 3, {})
    proxy = InProcessClientProxy("1", lambda ctx: exp.client(1, ctx.state).to_client(), context)
    strategy = exp.strategy()
    params = strategy.initialize_parameters(None)
    ins = FitIns(params, {"server-round": 1, "lr": 0.05})
    first = parameters_to_ndarrays(proxy.fit(ins, None, None).parameters)
    kept = context.state[SCAFFOLD_CONTROL].to_numpy_ndarrays()
    for dc, c_i in zip(first[2:], kept):  # from c_i = 0: Delta c_i = c_i^+
        np.testing.assert_array_equal(dc, c_i)
    second = parameters_to_ndarrays(proxy.fit(ins, None, None).parameters)
    # Same (x, c, batches), but c_i is now the kept one: a different local path.
    assert not np.allclose(second[0], first[0])


# ---------------------------------------------------------- Amplified SCAFFOLD's client
def client_of(cls: type[ScaffoldClient] | type[AmplifiedScaffoldClient], state):
    """Client 2 on :func:`problem`, K = 1 full-batch step of 0.3, over ``state``."""
    x_data, y_data = problem()
    return cls(
        partition_id=2,
        model=build_model("logreg", (2,), 3, seed=0),
        x=x_data,
        y=y_data,
        lr=0.3,
        local_epochs=1,
        batch_size=len(y_data),
        seed=0,
        local_steps=1,
        state=state,
    )


def test_amplified_client_pools_the_period_then_adopts_c_i() -> None:
    """K = 1 full-batch step. Period 0, two rounds from x1 then x2, c_i = 0: D_i is the
    mean of g(x1) - 0 and g(x2) - 0 (equal K). Period 1: the client first adopts
    c_i = D_i, so y3 = x3 - lr (g(x3) - D_i + c), and D_i restarts from g(x3) - c_i."""
    x_data, y_data = problem()
    lr = 0.3
    xs = [get_weights(build_model("logreg", (2,), 3, seed=s)) for s in (1, 2, 3)]
    c = [np.full_like(a, 0.05) for a in xs[0]]
    client = client_of(AmplifiedScaffoldClient, None)
    state = client.state
    client.fit([*xs[0], *c], {"server-round": 1, PERIOD: 0})
    arrays, _, _ = client_of(AmplifiedScaffoldClient, state).fit(
        [*xs[1], *c], {"server-round": 2, PERIOD: 0}
    )
    g1, g2 = (full_batch_grad(x, x_data, y_data) for x in xs[:2])
    for d, a, b in zip(arrays[2:], g1, g2):
        np.testing.assert_allclose(d, (a + b) / 2, atol=1e-6)
    assert SCAFFOLD_CONTROL not in state  # c_i untouched within the period
    arrays, _, _ = client_of(AmplifiedScaffoldClient, state).fit(
        [*xs[2], *c], {"server-round": 3, PERIOD: 1}
    )
    g3 = full_batch_grad(xs[2], x_data, y_data)
    c_i = [(a + b) / 2 for a, b in zip(g1, g2)]
    for got, t, gi, ci, cc in zip(arrays[:2], xs[2], g3, c_i, c):
        np.testing.assert_allclose(got, t - lr * (gi - ci + cc), atol=1e-6)
    for d, gi, ci in zip(arrays[2:], g3, c_i):
        np.testing.assert_allclose(d, gi - ci, atol=1e-6)


def test_amplified_client_with_a_period_per_round_is_scaffolds() -> None:
    """Period = round - 1: adopting D_i at the next round is SCAFFOLD's c_i <- c_i^+."""
    xs = [get_weights(build_model("logreg", (2,), 3, seed=s)) for s in (1, 2, 3)]
    c = [np.full_like(a, 0.05) for a in xs[0]]
    amplified = client_of(AmplifiedScaffoldClient, None).state
    plain = client_of(ScaffoldClient, None).state
    for r, x in enumerate(xs, start=1):
        config = {"server-round": r, PERIOD: r - 1}
        got = client_of(AmplifiedScaffoldClient, amplified).fit([*x, *c], config)[0]
        want = client_of(ScaffoldClient, plain).fit([*x, *c], config)[0]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
