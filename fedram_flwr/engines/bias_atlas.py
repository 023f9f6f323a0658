"""The bias atlas's measurement: every algorithm's core on a least-squares problem whose
optimum is known, under every availability law, driven exactly.

The problem: N clients, each with m examples (A_i, b_i) and the mean squared loss
f_i(w) = |A_i w - b_i|^2 / (2 m). All clients hold m examples, so the data-size weights
and the uniform weights agree and every algorithm's intended objective is the same,
F(w) = (1/N) sum_i f_i(w), least at w* = (sum_i A_i^T A_i)^{-1} sum_i A_i^T b_i
(:func:`optimum`). The clients' own optima spread along one direction in the order of
their ids, the order in which the laws below make them less available, so a rule that
over-weighs the available clients lands visibly away from w*.

The drive: each cell builds the algorithm's core from a scenario through the registry
(its declared hyper-parameters, the run values, the oracle's law when oracle-informed)
and the oracle's ClientManager; each round the oracle's draw is the set of clients that
train; each trains K exact gradient steps of its objective in numpy (:func:`local_reply`:
the block the project's ClientApp would run, written for least squares: plain local
steps, SCAFFOLD's corrected steps and option-II control, FOCUS's tracked steps and push,
Fed-CVaR-Avg's (theta, t) steps, CA-Fed's received loss); the core aggregates exactly as
the round driver hands it the replies (partition-id order, the rounds elapsed since the
last aggregation; a round nobody trains in is skipped, as Flower skips it). This is the
cores' own arithmetic without Flower's transport, which is what makes the atlas take
minutes; one cell is checked against the in-process engine in the tests.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from fedram_flwr.engines.experiment import availability_law, build_oracle, known_availability
from fedram_flwr.objectives import (
    cvar_gradient_weights,
    pooled_control_delta,
    scaffold_control_update,
)
from fedram_flwr.protocol import (
    CVAR_ALPHA,
    CVAR_GAMMA,
    LR,
    LR_T,
    PERIOD,
    RECEIVED_LOSS,
    TRAIN_LOSS,
    ClientReply,
    join_theta_t,
    split_model_control,
    split_theta_t,
)
from fedram_flwr.registry import algorithm_params, algorithm_spec, scenario_from_dict
from fedram_flwr.registry.specs import AsyncAlgorithmSpec
from fedram_flwr.strategies.fedbuff_loop import run_fedbuff

N, D, M = 12, 4, 20


# ------------------------------------------------------------------------ the problem
@dataclass(frozen=True)
class Problem:
    """N least-squares clients: ``a`` shape (N, M, D), ``b`` shape (N, M)."""

    a: np.ndarray
    b: np.ndarray

    def grad(self, i: int, w: np.ndarray) -> np.ndarray:
        """grad f_i(w) = A_i^T (A_i w - b_i) / m."""
        return self.a[i].T @ (self.a[i] @ w - self.b[i]) / self.b.shape[1]

    def loss(self, i: int, w: np.ndarray) -> float:
        """f_i(w)."""
        r = self.a[i] @ w - self.b[i]
        return float(r @ r) / (2 * self.b.shape[1])

    @cached_property
    def optimum(self) -> np.ndarray:
        """w*, the minimiser of (1/N) sum_i f_i, in closed form."""
        h = np.einsum("imd,ime->de", self.a, self.a)
        return np.linalg.solve(h, np.einsum("imd,im->d", self.a, self.b))


def make_problem(seed: int = 0, n: int = N, spread: float = 2.0) -> Problem:
    """Clients whose optima w_i = w_0 + spread (i / (n - 1) - 1/2) u lie along u, with
    a client-specific feature scale (heterogeneous Hessians), plus small noise."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(D)
    u /= np.linalg.norm(u)
    base = rng.standard_normal(D)
    a = rng.standard_normal((n, M, D)) * rng.uniform(0.6, 1.4, size=(n, 1, D))
    w_i = base + spread * (np.arange(n) / max(n - 1, 1) - 0.5)[:, None] * u
    b = np.einsum("imd,id->im", a, w_i) + 0.05 * rng.standard_normal((n, M))
    return Problem(a, b)


# ------------------------------------------------------------------ the clients
def local_reply(
    block: str,
    problem: Problem,
    i: int,
    arrays: list[np.ndarray],
    config: Mapping[str, Any],
    state: dict[str, Any],
    steps: int,
    lr: float,
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """One client's round for the objective ``block`` (the name of its ClientApp block):
    the reply arrays and metrics; ``state`` is the client's ``Context.state``."""
    lr = float(config.get(LR, lr))
    if block in ("train_scaffold", "train_amplified_scaffold"):
        (x,), (c,) = split_model_control(arrays)
        c_i = state.get("c", np.zeros_like(x, dtype=float))
        pending, pooled = None, 0
        if block == "train_amplified_scaffold" and "pending" in state:
            d_old, period, pooled_steps = state["pending"]
            if period == int(config[PERIOD]):
                pending, pooled = d_old, pooled_steps
            else:  # an earlier period ended: adopt its D_i
                c_i = state["c"] = c_i + d_old
        y = x.astype(float)
        for _ in range(steps):
            y = y - lr * (problem.grad(i, y) - c_i + c)
        delta = scaffold_control_update(c_i, c, x, y, steps, lr) - c_i
        if block == "train_scaffold":
            state["c"] = c_i + delta
        else:
            if pending is not None:
                delta = pooled_control_delta(pending, pooled, delta, steps)
            state["pending"] = (delta, int(config[PERIOD]), pooled + steps)
        return [y, delta], {TRAIN_LOSS: problem.loss(i, y)}
    if block == "train_focus":
        (x,) = arrays
        g_prev = state.get("g", np.zeros_like(x, dtype=float))
        w = x.astype(float)
        for k in range(steps):
            g = problem.grad(i, w)
            if k < steps - 1:
                w = w - lr * (g - g_prev)
        state["g"] = g
        return [g - g_prev], {TRAIN_LOSS: problem.loss(i, w)}
    if block == "train_cvar":
        theta, t = split_theta_t(arrays)
        alpha, gamma, lr_t = (float(config[k]) for k in (CVAR_ALPHA, CVAR_GAMMA, LR_T))
        w = theta[0].astype(float)
        for _ in range(steps):
            d_f, d_t = cvar_gradient_weights(problem.loss(i, w), t, alpha, gamma)
            w, t = w - lr * d_f * problem.grad(i, w), t - lr_t * d_t
        return join_theta_t([w], t), {TRAIN_LOSS: problem.loss(i, w)}
    if block not in ("train_erm", "train_ca_fed"):
        raise ValueError(f"bias atlas: no least-squares client for the block {block}")
    (x,) = arrays
    w = x.astype(float)
    for _ in range(steps):
        w = w - lr * problem.grad(i, w)
    return [w], {TRAIN_LOSS: problem.loss(i, w), RECEIVED_LOSS: problem.loss(i, x)}


# ---------------------------------------------------------------------- one cell
def scenario_dict(algorithm: Mapping[str, Any], law: Mapping[str, Any], rounds: int, lr: float):
    """The scenario a cell runs: the registry validates it and builds core and oracle."""
    return {
        "name": "bias-atlas",
        "rounds": rounds,
        "seeds": [0],
        "data": {"dataset": "gaussian2d", "num_clients": N, "num_classes": 2},
        "availability": copy.deepcopy(dict(law)),
        "algorithm": copy.deepcopy(dict(algorithm)),
        "training": {"lr": lr, "local_epochs": 1, "batch_size": M},
        "model": {"name": "logreg"},
    }


@dataclass
class AtlasRun:
    """What the registry reads of a run (:class:`~fedram_flwr.registry.specs.Run`)."""

    scenario: Any
    seed: int

    @property
    def data(self) -> Any:
        return SimpleNamespace(client_y=[np.zeros(M)] * N)

    def availability_law(self) -> np.ndarray:
        return availability_law(self.scenario, self.seed)

    def known_availability(self) -> Any:
        return known_availability(self.scenario, self.seed)

    def client_manager(self) -> Any:
        return build_oracle(self.scenario, self.seed)


def run_cell(
    problem: Problem,
    algorithm: Mapping[str, Any],
    law: Mapping[str, Any],
    seed: int,
    rounds: int,
    steps: int = 2,
    lr: float = 0.05,
) -> np.ndarray:
    """Run one (algorithm, law, seed) cell; return the models w_t, t = 0..rounds, shape
    (rounds + 1, D).

    Raises
    ------
    ValueError
        (a ScenarioError) when the registry refuses the pair, e.g. an oracle-informed
        rule under a law that defines no hidden p.
    """
    scenario = scenario_from_dict(scenario_dict(algorithm, law, rounds, lr))
    spec = algorithm_spec(scenario)
    run = AtlasRun(scenario, seed)
    w0 = np.zeros(D, np.float32)
    if isinstance(spec, AsyncAlgorithmSpec):
        return run_fedbuff_cell(
            problem,
            spec.build_core(algorithm_params(scenario), run),
            scenario,
            seed,
            rounds,
            steps,
            lr,
        )
    core_type = spec.strategy.core_type
    core = core_type(**algorithm_params(scenario).core_kwargs(run)).for_model([w0])
    state = core.init([w0])
    oracle = build_oracle(scenario, seed)
    block = objective_block(spec.name)
    client_state: list[dict[str, Any]] = [{} for _ in range(N)]
    iterates = [w0.astype(float)]
    last = 0
    for t in range(1, rounds + 1):
        ids = sorted(oracle.draw(t))
        if ids and hasattr(core, "select"):
            ids = [ids[k] for k in core.select(len(ids), t)]
        if ids:
            config = core.fit_config(state, t)
            if hasattr(core, "starts"):  # FedAWE: each client its own x_i^t
                keys, models = core.starts(state, ids)
                sent = [models[k] for k in keys]
            else:
                sent = [core.arrays(state)] * len(ids)
            replies = []
            for i, arrays in zip(ids, sent):
                out, metrics = local_reply(
                    block, problem, i, list(arrays), config, client_state[i], steps, lr
                )
                out = [np.asarray(o, dtype=np.asarray(a).dtype) for o, a in zip(out, arrays)]
                replies.append(ClientReply(i, M, metrics, lambda out=out: list(out)))
            outcome = core.aggregate(state, t, replies, t - last)
            state, last = outcome.state, t
        model = core.evaluated(core.arrays(state))[0]
        iterates.append(np.ravel(model[0]).astype(float))
    return np.array(iterates)


def run_fedbuff_cell(
    problem: Problem, core: Any, scenario: Any, seed: int, rounds: int, steps: int, lr: float
) -> np.ndarray:
    """FedBuff on the simulated clock: one second is one round of the oracle's draws
    (client i available at time s when the draw of round floor(s) + 1 holds it), client i
    takes 1 + i / (N - 1) seconds a task (the slowest twice the fastest), ``rounds``
    server steps; the models after each step."""
    oracle = build_oracle(scenario, seed)
    iterates = [np.zeros(D)]

    def train(i: int, model: Any, version: int) -> list[np.ndarray]:
        out, _ = local_reply("train_erm", problem, i, list(model), {}, {}, steps, lr)
        return [np.asarray(out[0], dtype=np.float32)]

    def on_step(record: Any, loop: Any) -> None:
        iterates.append(np.ravel(core.arrays(loop.server)[0]).astype(float))

    run_fedbuff(
        core,
        [np.zeros(D, np.float32)],
        steps=rounds,
        available_at=lambda s: np.array(sorted(oracle.draw(int(s) + 1)), dtype=int),
        durations=lambda ids, s: 1.0 + np.asarray(ids, dtype=float) / (N - 1),
        train=train,
        seed=seed,
        on_step=on_step,
    )
    return np.array(iterates)


def objective_block(name: str) -> str:
    """The ClientApp block that trains for algorithm ``name`` (the client side's lookup)."""
    from fedram_flwr.clients.train_blocks import objective_of

    return objective_of(name).block


def trace_file(rounds: int, seed: int = 7) -> Path:
    """A recorded-style trace (round x client 0/1 CSV) written once to a temporary file:
    diurnal availability, client i's daily window shorter the larger i, with dropouts."""
    rng = np.random.default_rng(seed)
    r = np.arange(rounds)[:, None]
    length = np.linspace(16, 4, N)[None, :]
    start = rng.integers(0, 24, size=N)[None, :]
    on = ((r + start) % 24) < length
    matrix = (on & (rng.random((rounds, N)) > 0.1)).astype(int)
    path = Path(tempfile.mkdtemp(prefix="bias-atlas-")) / "trace.csv"
    np.savetxt(path, matrix, fmt="%d", delimiter=",")
    return path
