"""The engines' server loop hands a round in which nobody is available to the strategy.

FedAR (eq. 7, Alg. 1 line 15) and MIFA (Alg. 1) step along their stored updates in such
a round; FedVARP keeps the model (its authors' code skips the round). Checked in the
in-process engine over a ``trace`` oracle with empty rounds, against eq. (4)-(7) and
MIFA's rule computed here by hand: a float64 numpy loop that calls the scenario's own
clients for their local models and nothing of the strategies.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.common import Code, FitRes, Parameters, Status

from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines import run_in_process
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.server import fit_clients_in_turn
from fedram_flwr.protocol import LR, SERVER_ROUND
from fedram_flwr.registry import scenario_from_dict
from fedram_flwr.scenario.config import Scenario
from tests.helpers import SEED, TINY_GAUSSIAN, final_arrays

# Active partition ids per round: empty rounds first (nothing stored yet), between
# participations, and at the end (the model must still move for FedAR and MIFA).
TRACE = [[], [0, 1], [2], [], [], [1], [], [], [0, 2], [], [], []]
LR_0, RHO, T0, B = 0.05, 0.5, 1.0, 4.0  # g(t) = 1 + t / 4 cuts stale updates
ALGORITHMS: dict[str, dict[str, Any]] = {
    "fedar": {"name": "fedar", "params": {"rho": RHO, "t0": T0, "b": B}},
    "mifa": {"name": "mifa", "params": {}},
    "fedvarp": {"name": "fedvarp", "params": {}},
}


def trace_scenario(tmp_path: Path, algorithm: str, rounds: int = len(TRACE)) -> Scenario:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(TRACE))
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(
        name=f"empty-rounds-{algorithm}",
        rounds=rounds,
        eval_every=rounds,
        availability={"oracle": "trace", "params": {"path": str(trace)}},
        algorithm=ALGORITHMS[algorithm],
        training={"lr": LR_0, "local_steps": 3, "batch_size": 16},
    )
    return scenario_from_dict(raw)


def reference(scenario: Scenario, algorithm: str, skip_empty: bool = False) -> list[np.ndarray]:
    """The final model by hand: G_i = (w_t - w_{t,K}^i) / eta (eq. 4), tau (eq. 5);
    FedAR: psi = min((tau + 1)^rho, 2), 0 if tau >= g(t) (eq. 6), w -= eta / N_t sum
    psi_i G_i over the seen clients with psi_i > 0 (eq. 7); MIFA: w -= eta / N sum G_i.
    ``skip_empty``: what the server did before (no step in an empty round)."""
    exp = Experiment(scenario, SEED)
    like = get_weights(exp.new_model())
    n = scenario.data.num_clients
    w = np.concatenate([a.ravel() for a in like]).astype(np.float64)
    memory = np.zeros((n, w.size))
    tau = np.zeros(n)
    seen = np.zeros(n, dtype=bool)
    for t, active in enumerate(TRACE[: scenario.rounds], start=1):
        for i in active:
            arrays = np.split(w, np.cumsum([a.size for a in like])[:-1])
            sent = [p.reshape(a.shape).astype(np.float32) for p, a in zip(arrays, like)]
            local, _, _ = exp.client(i).fit(sent, {SERVER_ROUND: t, LR: LR_0})
            memory[i] = (w - np.concatenate([a.ravel() for a in local])) / LR_0
            seen[i] = True
        tau = np.array([0.0 if i in active else tau[i] + 1 for i in range(n)])
        if skip_empty and not active:
            continue
        if algorithm == "mifa":
            w = w - LR_0 * memory.sum(axis=0) / n
            continue
        g_t = T0 + t / B
        psi = np.array(
            [min((tau[i] + 1) ** RHO, 2.0) if seen[i] and tau[i] < g_t else 0.0 for i in range(n)]
        )
        n_t = np.count_nonzero(psi)
        if n_t:
            w = w - LR_0 / n_t * (psi @ memory)
    return [np.asarray(a, np.float64) for a in np.split(w, np.cumsum([a.size for a in like])[:-1])]


def flat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.ravel(a) for a in arrays]).astype(np.float64)


@pytest.mark.parametrize("algorithm", ["fedar", "mifa"])
def test_fedar_and_mifa_step_from_memory_in_empty_rounds(tmp_path: Path, algorithm: str) -> None:
    scenario = trace_scenario(tmp_path, algorithm)
    run = run_in_process(scenario, SEED, tmp_path / "run")
    rows = [r for r in run.read_metrics() if r["round"] > 0]
    assert [r.get("relayed") for r in rows] == TRACE  # every round reached aggregate_fit
    got = flat(final_arrays(run))
    want = flat(reference(scenario, algorithm))
    skipped = flat(reference(scenario, algorithm, skip_empty=True))
    scale = np.linalg.norm(want - skipped)
    assert scale > 1e-2 * np.linalg.norm(want), "the trace's empty rounds change nothing"
    # float32 in the strategy, float64 here: agreement far inside the skipped-round gap
    assert np.linalg.norm(got - want) < 1e-4 * scale
    if algorithm == "fedar":
        cut = [r["fit-contributing"] < r["fit-seen"] for r in rows]
        assert any(cut), "g(t) never cut a stale update"


def test_fedvarp_keeps_the_model_in_empty_rounds(tmp_path: Path) -> None:
    """The last three rounds of the trace are empty: a FedVARP run of 12 rounds ends
    with the model of one of 9 rounds (FedAR's and MIFA's move)."""
    last = max(t for t, active in enumerate(TRACE, start=1) if active)
    assert not any(TRACE[last:]) and last < len(TRACE)
    finals = {}
    for algorithm in ("fedvarp", "mifa"):
        for rounds in (last, len(TRACE)):
            scenario = trace_scenario(tmp_path, algorithm, rounds)
            run = run_in_process(scenario, SEED, tmp_path / f"{algorithm}-{rounds}")
            finals[algorithm, rounds] = final_arrays(run)
    for a, b in zip(finals["fedvarp", last], finals["fedvarp", len(TRACE)], strict=True):
        np.testing.assert_array_equal(a, b)
    moved = flat(finals["mifa", len(TRACE)]) - flat(finals["mifa", last])
    assert math.isfinite(np.linalg.norm(moved)) and np.linalg.norm(moved) > 0


class FakeProxy:
    """A client proxy whose ``fit`` replies with ``code`` or raises."""

    def __init__(self, cid: str, code: Any = None, error: BaseException | None = None) -> None:
        self.cid, self.code, self.error, self.calls = cid, code, error, []

    def fit(self, ins: Any, timeout: float | None, group_id: int) -> Any:
        self.calls.append((ins, timeout, group_id))
        if self.error is not None:
            raise self.error
        return FitRes(Status(self.code, ""), Parameters([], ""), 1, {})


def test_clients_in_turn_sort_results_and_failures_as_flowers_pool() -> None:
    # OK replies are results in instruction order; another status or an exception is
    # a failure (Flower's _handle_finished_future_after_fit); an interrupt is not caught.
    err = RuntimeError("client broke")
    proxies = [
        FakeProxy("0", Code.OK),
        FakeProxy("1", error=err),
        FakeProxy("2", Code.FIT_NOT_IMPLEMENTED),
        FakeProxy("3", Code.OK),
    ]
    results, failures = fit_clients_in_turn([(p, f"ins{p.cid}") for p in proxies], 5.0, 7)
    assert [p.cid for p, _ in results] == ["0", "3"]
    assert failures[0] is err and failures[1][0] is proxies[2] and len(failures) == 2
    assert all(p.calls == [(f"ins{p.cid}", 5.0, 7)] for p in proxies)
    with pytest.raises(KeyboardInterrupt):
        fit_clients_in_turn([(FakeProxy("4", error=KeyboardInterrupt()), None)], None, 1)
