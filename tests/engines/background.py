"""Flower-engine runs shared by the tests that check them, started together in the
background once per test session.

Starting Flower is what the engine tests pay for (a SuperLink, SuperNodes or a Ray
cluster, ServerApp and ClientApp processes), not what they check. So a test names the
runs it needs (:class:`RunSpec`: a ``@pytest.mark.parametrize`` value, or the
``flower_runs`` marker); when the first of them starts, the ``flower_runs`` fixture
starts every run that the *selected* tests name, at once: the Simulation runs on one
SuperLink over one private Ray cluster, the Deployment runs on one TLS-secured SuperLink
with K SuperNodes, a few at a time on each (a deployment mostly waits on Flower's 3 s
polls); runs that need a federation of their own (a SuperNode killed mid-run) get one.
Each test then waits for its own runs and checks them while the others go on.

Every process started here is stopped by pid when the test session ends, also on failure;
:meth:`BackgroundRuns.close` checks that none survived.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fedram_flwr.engines import generate_tls_files, run_with_flwr
from fedram_flwr.engines.flwr.federation import Federation
from fedram_flwr.engines.flwr.ray_cluster import LocalCluster, local_cluster
from fedram_flwr.rundir.outputs import RunDirectory
from tests.helpers import RUN_LIMIT_S, SEED, token_processes

NUM_CLIENTS = 3
AT_ONCE = {"simulation": 3, "deployment": 3, "own": 2}
"""Runs in flight at once per federation. Two shared cores do the work either way (a
Deployment run is mostly ClientApp processes starting, one per message); more at once
only adds memory. Simulation runs beyond the Ray cluster's one actor slot wait for it.
The Deployment federations keep Flower's default 1 s task polls (not
``DEPLOYMENT_LATENCY_ENV``'s 0.2 s): with runs side by side latency is hidden, and the
faster polls cost an idle federation twice the CPU (0.09 against 0.046 CPU-s a second)."""
RAY_CPUS = 2  # one client actor at a time (each Flower run asks for 2 CPUs per actor)


@dataclass(frozen=True)
class RunSpec:
    """One Flower-engine run a test needs: the scenario ``write(folder) -> path``, the
    engine, the API, and for a federation of its own (``own``) the SuperNodes to kill
    ``{partition: after round}``."""

    name: str
    write: Callable[[Path], Path] = field(compare=False)
    case: str = ""  # what the run is compared with, if anything
    engine: str = "simulation"
    api: str = "message"
    own: bool = False
    kill_after: tuple[tuple[int, int], ...] = ()

    def __str__(self) -> str:  # the test id
        return self.name


def selected_specs(items: Iterable[pytest.Item]) -> dict[str, RunSpec]:
    """The RunSpecs the selected test items name (parameters and ``flower_runs`` marks)."""
    specs: dict[str, RunSpec] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        found = [
            v for v in (callspec.params.values() if callspec else []) if isinstance(v, RunSpec)
        ]
        for mark in item.iter_markers("flower_runs"):
            found += list(mark.args)
        for spec in found:
            if specs.setdefault(spec.name, spec) is not spec and specs[spec.name] != spec:
                raise ValueError(f"two different runs are named {spec.name!r}")
    return specs


class BackgroundRuns:
    """The test session's Flower runs (see the module docstring): started by
    :meth:`start`, waited for by :meth:`result`, everything stopped by :meth:`close`."""

    def __init__(self, root: Path, specs: dict[str, RunSpec]) -> None:
        self.root = root
        self.specs = specs
        self.futures: dict[str, Future[RunDirectory]] = {}
        self.stack = ExitStack()
        self.cluster: LocalCluster | None = None
        self.federations: dict[str, Federation] = {}
        self.tokens: set[str] = set()

    def start(self) -> None:
        """Start the federations the runs need, then every run. The pools are entered
        first so that they are left last: on an early end (a failure with ``-x``,
        Ctrl-C) the federations stop first and the runs still on them end at once."""
        pools = {
            key: self.stack.enter_context(ThreadPoolExecutor(n, thread_name_prefix=key))
            for key, n in AT_ONCE.items()
        }
        engines = {s.engine for s in self.specs.values() if not s.own}
        if "simulation" in engines:
            self.cluster = self.stack.enter_context(local_cluster(num_cpus=RAY_CPUS))
            self.tokens.add(self.cluster.token)
            self.federations["simulation"] = self._federation(
                "simulation", ray_address=self.cluster.address
            )
        if "deployment" in engines:
            tls = generate_tls_files(self.root / "tls")
            self.federations["deployment"] = self._federation("deployment", tls=tls)
        for spec in self.specs.values():
            pool = pools["own" if spec.own else spec.engine]
            self.futures[spec.name] = pool.submit(self._run, spec)

    def _federation(self, engine: str, **options: Any) -> Federation:
        fed = self.stack.enter_context(
            Federation(engine, NUM_CLIENTS, self.root / f"federation-{engine}", **options)
        )
        self.tokens.add(fed.token)
        return fed

    def _run(self, spec: RunSpec) -> RunDirectory:
        folder = self.root / spec.name
        path = spec.write(folder / "scenario")
        if spec.own:
            return run_with_flwr(
                path,
                SEED,
                folder / "run",
                engine=spec.engine,
                api=spec.api,
                kill_after=dict(spec.kill_after),
                timeout=RUN_LIMIT_S,
                echo=False,  # not into the output of whichever test runs meanwhile
            )
        fed = self.federations[spec.engine]
        return run_with_flwr(
            path,
            SEED,
            folder / "run",
            api=spec.api,
            federation=fed,
            timeout=RUN_LIMIT_S,
            echo=False,
        )

    def result(self, spec: RunSpec) -> RunDirectory:
        """The finished run of ``spec`` (its error, if it failed)."""
        if spec.name not in self.futures:
            raise KeyError(f"run {spec.name!r} was not started: name it in the test")
        return self.futures[spec.name].result()

    def close(self) -> None:
        """Wait for the runs, stop every federation and the Ray cluster; fail if a
        process of theirs survived."""
        for future in self.futures.values():
            future.cancel()
        self.stack.close()  # federations, cluster, then the pools (waiting for their runs)
        left = {pid: cmd for t in self.tokens for pid, cmd in token_processes(t).items()}
        assert not left, f"processes of the shared federations survived them: {left}"
