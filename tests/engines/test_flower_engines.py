"""Same scenario, same seed, same run: Flower's Simulation and Deployment Engines, through
the Message API and the legacy API (a legacy Strategy, a ClientManager
oracle, NumPyClients), give the in-process legacy run of every case of
:mod:`tests.engines.cases`: the same clients each round, the same aggregation weights,
the same rows (timings aside) and the same final model bit for bit.

The runs share their federations (:mod:`tests.engines.background`): the Simulation runs
one SuperLink over one private Ray cluster, the Deployment runs one TLS-secured
SuperLink with three SuperNode processes, each run its own ``flwr run`` with its own
Flower ``Context``. The first tier (``scripts/test.sh``) runs ``fed-cvar-avg-m2`` on both
engines (through both APIs on the Simulation Engine) and the timed ``mifa-deadline`` on
the Simulation Engine through the Message API; the breadth tier (marker
``breadth``) the rest: every case on the Simulation Engine, every algorithm on the
Deployment Engine, and the legacy API on both.
"""

from __future__ import annotations

import json
from functools import partial

import pytest

from fedram_flwr.rundir import code_version
from tests.engines.background import BackgroundRuns, RunSpec
from tests.engines.cases import CASES, assert_same_run, write_scenario
from tests.helpers import without_timings

pytestmark = pytest.mark.flwr

CORE = "fed-cvar-avg-m2"
"""The first tier's case: the RAM oracle (a ClientManager) with two clients
relayed a round, so the aggregation order matters too."""
TIMED_CASE = "mifa-deadline"
"""The first tier's timed case, on the Simulation Engine through the Message API: the
simulated clock, a deadline and a late update re-based (:data:`tests.engines.cases.TIMED`)."""
LEGACY = {
    "simulation": ("fed-cvar-avg-m2", "ca-fed", "scaffold", "rfedfair", TIMED_CASE),
    "deployment": ("fed-cvar-avg-m2", TIMED_CASE),
}
"""Cases also run through the legacy API: the RAM ClientManager, client state kept in
``Context.state`` (CA-Fed's F_k*, SCAFFOLD's c_i) and rFedFair's own ``get_properties``
queries. Fewer on the Deployment Engine, where every message starts a ClientApp process
(about 3 s of CPU here, 40-50 s a run): two cores spend most of this tier on those."""
DEPLOYMENT_CASES = (
    "fed-cvar-avg-m2",
    "fed-cvar-avg",
    "ca-fed",
    "fedar",
    "scaffold",
    "amplified-scaffold",
    "fedawe",
    "rfedfair",
    TIMED_CASE,
)
"""Every algorithm on the Deployment Engine through the Message API (the baselines that
differ from them only in server-side weights, ``unbiased``, ``fedar-empty`` and
``debiasing-fedavg``, run on the Simulation Engine)."""
FIRST_TIER = {("simulation", "message"), ("simulation", "legacy"), ("deployment", "message")}


def spec(case: str, engine: str, api: str) -> RunSpec:
    return RunSpec(
        f"{engine}-{api}-{case}", partial(write_scenario, case), case=case, engine=engine, api=api
    )


def param(run: RunSpec) -> object:
    first = run.case == CORE and (run.engine, run.api) in FIRST_TIER
    first |= run.case == TIMED_CASE and (run.engine, run.api) == ("simulation", "message")
    return pytest.param(run, marks=() if first else pytest.mark.breadth)


SPECS = [
    *(spec(case, "simulation", "message") for case in CASES),
    *(spec(case, "deployment", "message") for case in DEPLOYMENT_CASES),
    *(spec(case, engine, "legacy") for engine, cases in LEGACY.items() for case in cases),
]
SIMULATION = spec(CORE, "simulation", "message")
DEPLOYMENT = spec(CORE, "deployment", "message")


@pytest.mark.parametrize("run", [param(s) for s in SPECS], ids=str)
def test_flower_engine_gives_the_in_process_run(
    run: RunSpec, flower_runs: BackgroundRuns, references
) -> None:
    result = flower_runs.result(run)
    assert result.api() == run.api
    # the engines run a staged copy of this checkout: the same code, the same fingerprint
    assert result.fingerprint()["code"]["source"] == code_version()["source"], run.name
    assert_same_run(references[run.case], result, run.name)
    rows = without_timings(result.read_metrics())
    assert rows == without_timings(references[run.case].read_metrics()), run.name


@pytest.mark.flower_runs(SIMULATION)
def test_simulation_runs_on_the_shared_ray_cluster(flower_runs: BackgroundRuns) -> None:
    """Flower's Simulation Engine joined the test session's Ray cluster (``ray_address``): its
    client actors left their logs in the cluster's session folder."""
    run = flower_runs.result(SIMULATION)
    assert flower_runs.cluster is not None
    timing = json.loads((run.path / "flwr-logs" / "timing.json").read_text())
    assert timing["ray-address"] == flower_runs.cluster.address
    actors = [
        log.name
        for log in flower_runs.cluster.logs.glob("worker-*")
        if ":actor_name:ClientAppActor" in log.read_text(errors="replace")
    ]
    assert actors, f"no ClientAppActor ran on the cluster ({flower_runs.cluster.logs})"


@pytest.mark.flower_runs(DEPLOYMENT)
def test_deployment_federation_is_secured_by_tls(flower_runs: BackgroundRuns) -> None:
    """The SuperLink served its APIs over TLS, the three SuperNodes trusted the CA."""
    flower_runs.result(DEPLOYMENT)
    fed = flower_runs.federations["deployment"]
    assert fed.tls is not None
    assert "running on https://127.0.0.1" in fed.superlink_log.read_text()
    record = json.loads((fed.logs / "processes.json").read_text())
    supernodes = [p["cmd"] for p in record["processes"] if "flower-supernode" in p["cmd"]]
    assert len(supernodes) == 3
    assert all(
        f"--root-certificates={fed.tls.ca}" in c and "--insecure" not in c for c in supernodes
    )


MANY = 8
"""Runs started together on one federation by the test below: more than the tiers' usual
three at a time (:data:`tests.engines.background.AT_ONCE`)."""


@pytest.mark.breadth
def test_many_runs_started_at_once_on_one_federation_each_give_the_in_process_run(
    tmp_path, references
) -> None:
    """Eight ``flwr run``s started in the same instant on one Simulation federation (one
    SuperLink, one Ray cluster) stage the app once (under the federation's lock) and each
    complete equal to the in-process run; nothing of theirs outlives the federation."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from fedram_flwr.engines import run_with_flwr
    from fedram_flwr.engines.flwr.federation import Federation
    from fedram_flwr.engines.flwr.ray_cluster import local_cluster
    from tests.engines.background import NUM_CLIENTS, RAY_CPUS
    from tests.helpers import RUN_LIMIT_S, SEED, token_processes

    paths = [write_scenario(CORE, tmp_path / f"scenario-{i}") for i in range(MANY)]
    together = Barrier(MANY)
    with local_cluster(num_cpus=RAY_CPUS) as cluster:
        with Federation(
            "simulation", NUM_CLIENTS, tmp_path / "federation", ray_address=cluster.address
        ) as fed:

            def run(i: int):
                together.wait()
                return run_with_flwr(
                    paths[i], SEED, tmp_path / f"run-{i}", api="message", federation=fed,
                    timeout=RUN_LIMIT_S, echo=False,
                )  # fmt: skip

            with ThreadPoolExecutor(MANY) as pool:
                runs = list(pool.map(run, range(MANY)))
            tokens = {cluster.token, fed.token}
    for i, result in enumerate(runs):
        assert_same_run(references[CORE], result, f"run {i} of {MANY}")
        rows = without_timings(result.read_metrics())
        assert rows == without_timings(references[CORE].read_metrics()), f"run {i}"
    assert not {pid for t in tokens for pid in token_processes(t)}, "processes survived"
