"""Flower's Simulation and Deployment Engines: a scenario run through ``flwr run .``.

``run_with_flwr`` starts its own ``flower-superlink`` on free loopback ports, writes
a private ``FLWR_HOME/config.toml`` whose only connection points at it, runs ``flwr run
. <connection> --run-config <toml> [--federation-config num-supernodes=K] --stream``
(in a staged copy of the app that yields the same FAB, or in the app root itself),
relays its output line by line and waits until the run directory's status is
``complete``. By default each run starts a federation of its own
(:class:`~.federation.Federation`: SuperLink, SuperNodes) and stops it; given a running
``federation``, the run is submitted to it and the federation stays up for the next.
Two engines:

* ``simulation``: ``flower-superlink --simulation`` runs K virtual SuperNodes on Ray;
* ``deployment``: ``flower-superlink`` (Fleet API on its own port) and K real
  ``flower-supernode`` processes, SuperNode i with ``--node-config "partition-id=i
  num-partitions=K"`` and its own ClientAppIo port; insecure, or TLS with
  :class:`TlsFiles` (the SuperLink serves its certificate, SuperNodes and ``flwr`` trust
  the CA). ``kill_after`` SIGKILLs chosen SuperNodes (their process groups) once a
  round is recorded: a device dying mid-run.

A run has a time limit (``timeout``, ``fedram run --time-limit``), by default
:func:`default_time_limit`: a start-up allowance plus an allowance per round. Whatever
happens (failure, time limit, Ctrl-C, SIGTERM, even SIGKILL: :mod:`.watchdog`) every
process it started is stopped (:mod:`.processes`): the SuperLink, the SuperNodes, the
``flower-superexec`` processes they spawn, ``flwr-serverapp`` / ``flwr-clientapp``,
``flwr-simulation`` and Ray's processes; nothing else on the machine is touched. Logs go
to ``<run_dir>/flwr-logs/``: superlink.log, supernode-<i>.log, flwr-run.log,
run-config.toml, processes.json (what was started, kept current during the run),
supernodes.json (partition id -> pid), faults.json, timing.json and, when the driving
process died, watchdog.json.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from fedram_flwr.engines.flwr.errors import FlwrRunError, TimeLimitError
from fedram_flwr.engines.flwr.federation import (
    APP_DIR,
    DEPLOYMENT_LATENCY_ENV,
    ENGINES,
    Engine,
    Federation,
    check_options,
)
from fedram_flwr.engines.flwr.ray_cluster import check_reachable
from fedram_flwr.engines.flwr.session import FlwrRun
from fedram_flwr.engines.flwr.signals import signals_ignored, signals_raise
from fedram_flwr.engines.flwr.staging import check_app
from fedram_flwr.engines.flwr.tls import TlsFiles
from fedram_flwr.registry.app_config import run_api, scenario_from_run_config
from fedram_flwr.rundir.nofollow import write_atomic
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.config import Scenario
from fedram_flwr.scenario.schema import ScenarioError

__all__ = [
    "APP_DIR",
    "DEPLOYMENT_LATENCY_ENV",
    "ENGINES",
    "Engine",
    "Federation",
    "TimeLimit",
    "default_time_limit",
    "run_with_flwr",
]


RAY_STARTUP_TIMEOUT = "The current node timed out during startup"
"""Ray's own error when its node does not register within its fixed 30 s (seen on a
loaded 2-core machine with several simulations starting at once): nothing of the run
has been computed yet, so the run is started again."""
RAY_STARTUP_RETRIES = 2

START_UP_S = 600.0
"""Default time limit's allowance for starting the SuperLink, SuperNodes / Ray and the
apps (minutes on a loaded machine)."""
ROUND_S: dict[str, float] = {"simulation": 30.0, "deployment": 60.0}
"""Default time limit's allowance per round (Deployment rounds take 6-9 s, Simulation
rounds of the shipped scenarios well under 5 s), plus the scenario's ``round_timeout``."""


@dataclass(frozen=True)
class TimeLimit:
    """A run's time limit in seconds and where it comes from."""

    seconds: float
    origin: str

    def exceeded(self) -> str:
        """What to say when the run has used it up."""
        return (
            f"the Flower run used up its time limit of {self.seconds:.0f} s ({self.origin}); "
            "raise it with `fedram run --time-limit SECONDS` (Python: "
            "run_with_flwr(timeout=SECONDS))"
        )


def default_time_limit(scenario: Scenario, engine: Engine) -> TimeLimit:
    """:data:`START_UP_S` + rounds x (:data:`ROUND_S` of the engine + the availability's
    ``round_timeout``, if any)."""
    round_timeout = scenario.availability.params.get("round_timeout")
    waits = float(round_timeout) if isinstance(round_timeout, (int, float)) else 0.0
    per_round = ROUND_S[engine] + waits
    return TimeLimit(
        START_UP_S + scenario.rounds * per_round,
        f"the default for {scenario.rounds} rounds on the {engine} engine: "
        f"{START_UP_S:.0f} s start-up + {scenario.rounds} x {per_round:.0f} s",
    )


def run_with_flwr(
    scenario_path: str | Path,
    seed: int,
    run_dir: Path,
    *,
    overrides: str = "",
    timeout: float | None = None,
    stage: bool = True,
    engine: Engine = "simulation",
    tls: TlsFiles | None = None,
    kill_after: Mapping[int, int] | None = None,
    env: Mapping[str, str] | None = None,
    api: str = "message",
    ray_address: str | None = None,
    federation: Federation | None = None,
    echo: bool = True,
) -> RunDirectory:
    """Run (scenario, seed) on Flower's Simulation or Deployment Engine (``engine``)
    with ``flwr run .``; one SuperNode per client (``data.num_clients``), through
    Flower's ``api``: ``message`` (the Message-API strategy) or ``legacy``
    (the run config's ``api``, :mod:`fedram_flwr.server_app`).

    ``scenario_path``: absolute, relative to the working directory, or relative to
    the app; ``overrides`` as in the run config (``"rounds=6,eval_every=3"``).
    Returns the run directory once its status is ``complete``; raises
    :class:`FlwrRunError` (root cause first, then the logs' tails) otherwise, with
    the status set to ``failed``; :class:`TimeLimitError` after ``timeout`` s (None:
    :func:`default_time_limit`), saying how to raise it. Every process started here is
    stopped before returning or raising. ``stage``: run ``flwr run .`` in a copy of the
    app's FAB files (:func:`stage_app`: the same FAB, 8 s faster) rather than in the
    project root itself. Deployment only: ``tls`` secures the SuperLink's APIs;
    ``kill_after`` {partition id: round} SIGKILLs that SuperNode once the round is
    recorded. ``env``: extra environment of every process started (e.g.
    :data:`DEPLOYMENT_LATENCY_ENV`). ``ray_address`` (Simulation only): ``HOST:PORT`` of a
    running Ray cluster's head node that the Simulation Engine's Ray backend joins
    (``RAY_ADDRESS`` in its environment: Flower 1.39 passes no ``address`` to ``ray.init``)
    instead of starting a Ray of its own; recorded in ``flwr-logs/timing.json``.
    ``federation``: a started :class:`~.federation.Federation` to submit the run to
    (its engine, SuperNodes, TLS, environment and Ray cluster; ``engine``, ``tls``,
    ``env`` and ``ray_address`` must then be left out): it is left running afterwards,
    and a run that fails there is stopped with ``flwr stop``. ``echo``: relay the run's
    output to this process's stdout (it always goes to ``flwr-logs/flwr-run.log``; leave
    it out for runs going on in threads side by side).
    A Simulation run whose Ray node times out during start-up (:data:`RAY_STARTUP_TIMEOUT`)
    is started again, up to :data:`RAY_STARTUP_RETRIES` times within ``timeout``; the
    failed attempt's logs are kept in ``flwr-logs-attempt<k>``.
    This process holds the run folder's lock throughout (``RunDirectoryBusy`` at once if
    another run writes it) and gives the ServerApp its token.
    """
    start = time.monotonic()
    path = Path(scenario_path).expanduser()
    if not path.is_absolute() and not path.exists():
        path = APP_DIR / path
    path = path.resolve()  # absolute: the ServerApp runs on this machine
    # Validate early, bypassing the cache: the file may have changed since.
    scenario = scenario_from_run_config.__wrapped__(str(path), overrides)
    if federation is not None:
        engine = check_federation(federation, scenario.data.num_clients, engine, tls, env,
                                  ray_address)  # fmt: skip
    check_options(engine, scenario.data.num_clients, tls, kill_after or {}, ray_address)
    if ray_address is not None:
        check_reachable(ray_address, "ray_address (--ray-address)")
    api = run_api(api)
    if timeout is None:
        limit = default_time_limit(scenario, engine)
    else:
        limit = TimeLimit(float(timeout), "set by the caller")
    deadline = start + limit.seconds
    with RunDirectory(Path(run_dir).expanduser()).lock():  # this driver: the one writer
        for attempt in range(1, RAY_STARTUP_RETRIES + 2):
            try:
                return _run_once(
                    path,
                    scenario,
                    seed,
                    Path(run_dir),
                    overrides=overrides,
                    timeout=deadline - time.monotonic(),
                    stage=stage,
                    engine=engine,
                    tls=tls,
                    kill_after=kill_after,
                    env=env,
                    api=api,
                    ray_address=ray_address,
                    federation=federation,
                    echo=echo,
                )
            except TimeLimitError as err:
                message = limit.exceeded()
                out = RunDirectory(Path(run_dir).expanduser().resolve())
                out.set_status("failed", engine="flwr", error=f"TimeLimitError: {message}")
                raise TimeLimitError(f"{message}\n{err}") from None
            except FlwrRunError as err:
                retry = engine == "simulation" and RAY_STARTUP_TIMEOUT in str(err)
                retry = retry and federation is None  # a shared Ray is up already
                if not retry or attempt > RAY_STARTUP_RETRIES or time.monotonic() > deadline:
                    raise
                logs = Path(run_dir).expanduser().resolve() / "flwr-logs"
                logs.rename(logs.with_name(f"flwr-logs-attempt{attempt}"))
                print(
                    f"fedram: Ray's node timed out during start-up (attempt {attempt}); "
                    "starting the run again",
                    file=sys.stderr,
                )
    raise AssertionError("unreachable")


def check_federation(
    federation: Federation,
    num_clients: int,
    engine: Engine,
    tls: TlsFiles | None,
    env: Mapping[str, str] | None,
    ray_address: str | None,
) -> Engine:
    """The federation's engine, once the run's other options agree with it (they belong
    to the federation: leave them out) and it has one SuperNode per client."""
    given = {"tls": tls, "env": env, "ray_address": ray_address}
    if named := [name for name, value in given.items() if value is not None]:
        raise ValueError(f"{', '.join(named)}: set on the federation, not on a run submitted to it")
    if engine != federation.engine and engine != "simulation":  # simulation: the default
        raise ValueError(f"engine {engine!r}: the federation runs the {federation.engine} engine")
    if federation.num_supernodes != num_clients:
        raise ScenarioError(
            f"data.num_clients = {num_clients}, but the federation has "
            f"{federation.num_supernodes} SuperNodes: submit it to a federation of "
            f"{num_clients}"
        )
    return federation.engine


def _run_once(
    path: Path,
    scenario: Scenario,
    seed: int,
    run_dir: Path,
    *,
    overrides: str,
    timeout: float,
    stage: bool,
    engine: Engine,
    tls: TlsFiles | None,
    kill_after: Mapping[int, int] | None,
    env: Mapping[str, str] | None,
    api: str,
    ray_address: str | None = None,
    federation: Federation | None = None,
    echo: bool = True,
) -> RunDirectory:
    """One attempt of :func:`run_with_flwr` (``path``: the scenario file, resolved), on
    ``federation`` or on one of its own."""
    t0 = time.monotonic()
    check_app(APP_DIR)
    out = RunDirectory(Path(run_dir).expanduser().resolve())
    (out.path / "flwr-logs").mkdir(parents=True, exist_ok=True)
    for stale in ("metrics.jsonl", "summary.json", "final_model.npz"):
        (out.path / stale).unlink(missing_ok=True)  # never mistake an older run's files
    out.set_status("starting", engine="flwr")
    run_config = out.path / "flwr-logs" / "run-config.toml"
    write_atomic(
        run_config,
        tomli_w.dumps(
            {
                "scenario": str(path),
                "seed": int(seed),
                "overrides": overrides,
                "run-dir": str(out.path),
                "run-token": out.held_token(),  # the ServerApp writes only under our lock
                "api": api,
                # the SuperNodes are watched here (check_supernodes): the oracle's wait
                # for them needs no bound tighter than the run's (a loaded machine can
                # take minutes to start K ClientApps)
                "wait-timeout": max(float(timeout), 1.0),
            }
        ).encode(),
    )
    shared = federation is not None
    fed = federation or Federation(
        engine,
        scenario.data.num_clients,
        out.path / "flwr-logs",
        tls=tls,
        env=env,
        ray_address=ray_address,
        run_dir=out.path,
    )
    run = FlwrRun(fed, out, timeout - (time.monotonic() - t0), kill_after=kill_after, echo=echo)
    run.timing["engine"] = fed.engine
    run.timing["flower"] = fed.describe()
    if echo:
        print(f"fedram: {fed.describe()}", file=sys.stderr, flush=True)
    if fed.ray_address is not None:
        run.timing["ray-address"] = fed.ray_address
    if shared:
        run.timing["federation"] = str(fed.logs)
    error: BaseException | None = None
    leftovers: list = []
    try:
        with signals_raise(signal.SIGTERM, signal.SIGHUP):
            if not shared:
                fed.start(run.deadline)
                run.timing.update(fed.timing)
            run.run(fed.staged_app() if stage else APP_DIR, run_config)
    except BaseException as err:
        error = err
        raise
    finally:
        with signals_ignored(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            if not shared:
                leftovers = fed.stop()  # bounded (~15 s at worst): not interruptible
            run.end(shared=shared)
        if out.status() != "complete":
            first = (str(error).splitlines() or [""])[0]
            out.set_status(
                "failed", engine="flwr", error=f"{type(error).__name__}: {first}".rstrip(": ")
            )
        if leftovers:
            msg = "processes of this flwr run survived SIGKILL: " + ", ".join(
                f"{p.pid} ({p.cmd[:60]})" for p in leftovers
            )
            if error is None:
                raise FlwrRunError(msg)
            print(f"warning: {msg}", file=sys.stderr)
    return out
