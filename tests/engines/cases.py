"""The tiny scenarios every engine and API must run alike, and how two runs are compared.

K=3 Gaussian clients of Fig. 2a, logistic regression, 3 rounds of 5 local steps; one case
per algorithm family under the availability its paper uses, each exercising what an
engine could break:

- ``fed-cvar-avg``: the RAM relays one client per round; ``fed-cvar-avg-m2`` two (the
  server averages them in partition order);
- ``ca-fed``: two-state Markov chains, F_k* from each client's ``Context.state``
  (``loss_floor: local-optimum``), excluding clients (kappa_bar^2 = 1e-3);
  ``unbiased``: its oracle-informed baseline;
- ``fedar``, ``scaffold`` and ``focus`` under Bernoulli p = (1, 0.6, 0.3): client 0 trains
  every round, so SCAFFOLD's c_i and FOCUS's g_prev in ``Context.state`` are read back;
  FedAR's cut-off drops stale updates; ``fedar-empty``: a trace with empty rounds, where
  FedAR steps from memory;
- ``fedawe``: each node gets its own model (the server's copy from its last round);
- ``amplified-scaffold`` under the same Bernoulli law with period 2: client 0 pools its
  D_i over rounds 1-2 in ``Context.state`` and adopts it in round 3 (the period's key);
  ``debiasing-fedavg``: minimum-separation participation (R = 1), weights 1 / pi_hat;
- ``rfedfair``: K=2 draws by p_i among the available nodes (only the drawn train), with
  per-client alpha and the fairness metrics on every client's test set;
- ``mifa-deadline``: on the simulated clock (:data:`TIMED`): client 2's update misses
  round 1's deadline and arrives in round 2, re-based on round 2's model; the clock,
  the clients used, late and dropped are in the rows every engine must give.

Tolerance: none. Every client's draws come from (seed, round, id), both APIs' clients
run the same local fit on the same arrays, and both APIs' strategies fold the replies in
partition order through the same core with the same float operations, so the final
models must be equal bit for bit, also where several clients train per round.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedram_flwr.rundir.outputs import RunDirectory
from tests.helpers import SEED, TINY_GAUSSIAN, final_arrays, relayed

ROUNDS = 3
BERNOULLI = {"oracle": "bernoulli", "params": {"p": [1.0, 0.6, 0.3]}}
MARKOV = {"oracle": "markov", "params": {"pi": [0.9, 0.6, 0.5], "lam": [0.0, 0.8, 0.0]}}
RAM = {"oracle": "ram", "params": {"rho": [0.5, 0.4, 0.1]}}
EMPTY_TRACE = [[], [0, 1], []]  # active ids per round: rounds 1 and 3 are empty
FEDAR = {"name": "fedar", "params": {"t0": 1.0, "b": 4.0}}
TRACE = "trace"  # availability: the file EMPTY_TRACE is written to
DEVICES = {
    str(k): {"computation": ms, "communication": 1000.0} for k, ms in enumerate([10, 20, 40])
}
"""FedScale device records: 2.4, 4.8 and 9.6 s of computation a round (5 steps of 16)."""
TIMED = {
    "mifa-deadline": {
        "speeds": {"law": "fedscale", "path": "devices"},  # the file DEVICES is written to
        "policy": {"kind": "deadline", "deadline_s": 6.0, "late": "keep"},
    }
}
"""The cases on the simulated clock: their ``time:`` sections."""

CASES: dict[str, tuple[dict[str, Any], dict[str, Any] | str]] = {
    "fed-cvar-avg": (
        {"name": "fed-cvar-avg", "params": {"alpha": 0.1, "gamma": 0.1, "lr_t": 0.01}},
        RAM,
    ),
    "fed-cvar-avg-m2": (
        {"name": "fed-cvar-avg", "params": {"alpha": 0.1, "gamma": 0.1, "lr_t": 0.01}},
        {"oracle": "ram", "params": {"rho": [0.5, 0.4, 0.1], "clients_per_round": 2}},
    ),
    "ca-fed": (
        {
            "name": "ca-fed",
            "params": {"kappa2": 1e-3, "server_lr": 0.5, "loss_floor": "local-optimum"},
        },
        MARKOV,
    ),
    "unbiased": (
        {"name": "unbiased", "params": {"availability": "oracle", "server_lr": 0.5}},
        MARKOV,
    ),
    "fedar": (FEDAR, BERNOULLI),
    "fedar-empty": (FEDAR, TRACE),
    "scaffold": ({"name": "scaffold", "params": {}}, BERNOULLI),
    "focus": ({"name": "focus", "params": {}}, BERNOULLI),
    "fedawe": ({"name": "fedawe", "params": {"server_lr": 1.5}}, BERNOULLI),
    "amplified-scaffold": ({"name": "amplified-scaffold", "params": {"period": 2}}, BERNOULLI),
    "debiasing-fedavg": (
        {"name": "debiasing-fedavg", "params": {}},
        {"oracle": "min-separation", "params": {"separation": 1}},
    ),
    "rfedfair": (
        {
            "name": "rfedfair",
            "params": {"alpha": [0.6, 0.5, 0.4], "mu": 0.05, "clients_per_round": 2},
        },
        BERNOULLI,
    ),
    "mifa-deadline": (
        {"name": "mifa", "params": {}},
        {"oracle": "bernoulli", "params": {"p": [1.0] * 3}},
    ),
}
CLIENT_METRICS = {"rfedfair"}  # cases whose summary has every client's test metrics


def scenario_dict(name: str, folder: Path) -> dict[str, Any]:
    """Case ``name`` as a scenario mapping (its trace, if any, written to ``folder``)."""
    algorithm, availability = CASES[name]
    if availability == TRACE:
        trace = folder / "empty-rounds-trace.json"
        trace.write_text(json.dumps(EMPTY_TRACE))
        availability = {"oracle": "trace", "params": {"path": str(trace.resolve())}}
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw.update(
        name=f"engines-{name}",
        rounds=ROUNDS,
        eval_every=2,
        seeds=[SEED],
        algorithm=copy.deepcopy(algorithm),
        availability=copy.deepcopy(availability),
        training={"lr": 0.05, "local_steps": 5, "batch_size": 16, "weight_decay": 1e-3},
        client_metrics=name in CLIENT_METRICS,
    )
    if name in TIMED:
        devices = folder / "devices.json"
        devices.write_text(json.dumps(DEVICES))
        raw["time"] = copy.deepcopy(TIMED[name])
        raw["time"]["speeds"]["path"] = str(devices.resolve())
    return raw


def write_scenario(name: str, folder: Path) -> Path:
    """Case ``name`` as a YAML file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario_dict(name, folder), sort_keys=False))
    return path


def write_scenarios(folder: Path, names: list[str] | None = None) -> dict[str, Path]:
    """The scenarios of the cases ``names`` (default: all) as YAML files in ``folder``."""
    return {name: write_scenario(name, folder) for name in names or list(CASES)}


def assert_same_run(reference: RunDirectory, run: RunDirectory, name: str) -> None:
    """Same clients relayed each round, same weights per round, same final model (and,
    with client metrics, the same per-client test metrics)."""
    assert reference.status() == run.status() == "complete", name
    assert relayed(reference) == relayed(run), f"{name}: relayed clients differ"
    assert len(relayed(run)) == ROUNDS
    clocks = [[r.get("sim-seconds") for r in x.read_metrics()] for x in (reference, run)]
    assert clocks[0] == clocks[1], f"{name}: simulated clocks differ"
    weights = reference.read_weights()
    if weights is not None:
        np.testing.assert_array_equal(weights, run.read_weights(), err_msg=f"{name}: weights")
    for x, y in zip(final_arrays(reference), final_arrays(run), strict=True):
        assert (x.dtype, x.shape) == (y.dtype, y.shape), name
        np.testing.assert_array_equal(x, y, err_msg=f"{name}: final models differ")
    final_a, final_b = reference.read_summary()["final"], run.read_summary()["final"]
    for key in ("client-test-accuracy", "client-test-hcvar"):
        assert final_a.get(key) == final_b.get(key), f"{name}: {key} differs"
