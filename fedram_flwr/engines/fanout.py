"""A sweep's runs as Ray tasks: ``fedram run SCENARIO --ray [HOST:PORT]``.

Each call of the sweep's own per-run function (``fedram_flwr.cli.commands.run_job``: lock,
skip-if-complete, run, plot) becomes one Ray task of one CPU, on a running cluster or on
a private local one started for the sweep (:func:`local_cluster`, stopped by pid
afterwards). The tasks write the same run folders as a sequential sweep, so the run
folders must be on a filesystem every node of the cluster sees (and the package installed
on each node); the results are those of the runs made one by one, since an in-process run
depends only on its scenario and seed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from fedram_flwr.engines.flwr.ray_cluster import check_reachable, local_cluster
from fedram_flwr.engines.flwr.signals import signals_raise

T = TypeVar("T")

LOCAL = "local"
"""``--ray`` without an address: a private Ray on this machine for the sweep."""
FORWARDED_ENV = ("FEDRAM_DATA",)
"""Environment the tasks get from the driver (the data root, made absolute by the CLI)."""


def fan_out(fn: Callable[..., T], calls: Sequence[tuple[Any, ...]], address: str) -> list[T]:
    """``[fn(*call) for call in calls]``, each call a Ray task (one CPU) on the cluster at
    ``address`` (``HOST:PORT``, or :data:`LOCAL`); results in the order of ``calls``.
    An exception raised by a call is raised here as itself, the other tasks cancelled."""
    with signals_raise(signal.SIGTERM, signal.SIGHUP):  # a plain kill still cleans up
        if address == LOCAL:
            with local_cluster() as started:
                return _run_tasks(fn, calls, started.address)
        check_reachable(address, "--ray")
        return _run_tasks(fn, calls, address)


def _run_tasks(fn: Callable[..., T], calls: Sequence[tuple[Any, ...]], address: str) -> list[T]:
    """Connect to ``address`` as a driver, run the tasks, disconnect."""
    import ray  # only here: the in-process engine never needs Ray
    from ray.exceptions import RayTaskError

    env = {key: os.environ[key] for key in FORWARDED_ENV if key in os.environ}
    ray.init(address=address, runtime_env={"env_vars": env} if env else None)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = [task.remote(*call) for call in calls]
        try:
            return [ray.get(ref) for ref in refs]
        except BaseException as err:
            for ref in refs:
                ray.cancel(ref, force=True)
            if isinstance(err, RayTaskError) and isinstance(err.cause, Exception):
                raise err.cause from None
            raise
    finally:
        ray.shutdown()
