"""``fedram`` command line: run scenarios, write reports.

    fedram run scenarios/demo.yaml                       # every variant x seed, in-process
    fedram run scenarios/demo.yaml --engine flwr         # on Flower's Simulation Engine
    fedram run scenarios/demo.yaml --engine deployment --tls  # SuperLink + K SuperNodes
    fedram run scenarios/demo.yaml --ray                 # runs as tasks on a private local Ray
    fedram run scenarios/demo.yaml --ray HEAD:6379       # ... on a running Ray cluster
    fedram run scenarios/demo.yaml --engine flwr --ray-address HEAD:6379  # clients on it
    fedram run scenarios/table1.yaml --seeds 0 1 2 --set rounds=300 --set training.local_epochs=2
    fedram report runs/demo                              # report.md + figures
    fedram report runs/demo --strict                     # ... exit 1 unless every run is whole
    fedram show scenarios/table1.yaml                    # resolved scenario and its variants

Relative paths in a scenario (``data.root``, a trace file) and in ``$FEDRAM_DATA`` are
relative to the working directory ``fedram`` runs in, in every engine. ``--set FIELD=VALUE``
takes any YAML value (one field each); a ``--set`` of a swept field replaces the sweep's
values by the one given. Bad input ends in ``fedram: error: ...`` (exit 2).

``--api message`` runs a run through Flower's Message API (the algorithm's
``flwr.serverapp`` strategy under ``with_availability``, the Message-API ClientApp; the
default of ``--engine flwr`` and ``deployment``, as of ``flwr run .``); ``--api legacy``
through the legacy Strategy / ClientManager / NumPyClient (the in-process default: only
that loop checkpoints and resumes). Both give the same model
(tests/engines/test_message_api_engines.py, tests/engines/test_flower_engines.py).

Runs go to ``<out>/<scenario name>/<variant>/seed<k>``. A run whose status is already
``complete`` is skipped (rerunning a sweep resumes it) when its files are whole and its
fingerprint says it ran the same resolved scenario and seed through the same API (other
code: skipped with a note; the other API: run again, as the API is not in the path). A
complete run of another scenario is never skipped: ``fedram run`` refuses before running
anything and names ``--force``, which reruns everything. A damaged complete run,
and a run left ``failed``, ``interrupted`` (its process died) or ``missing``, runs again.
A folder another run is writing is left alone. A run that fails does not stop the sweep:
the others run, the report lists it, and ``fedram run`` exits 1 naming it.

In-process runs save their state every ``--checkpoint-every`` rounds (default rounds / 20)
in their folder; rerunning a run that was interrupted or failed continues after its last
checkpoint (saying so) when that was made for the same resolved scenario, seed and code,
and ends with the files a run never interrupted writes; ``--force`` starts it over.
``--engine flwr`` / ``deployment`` cannot resume (the clients' state lives in Flower's
processes): on a run the in-process engine would resume they refuse, naming ``--force``.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import yaml

from fedram_flwr.cli.args import parse_kills, parser
from fedram_flwr.cli.extras import MissingExtraError, is_missing_extra, missing_extra
from fedram_flwr.cli.interrupt import RunInterrupted, record_interrupted
from fedram_flwr.cli.run_checks import refuse_changed, refuse_resumable, skip
from fedram_flwr.data import DatasetNotFoundError
from fedram_flwr.registry import (
    algorithm_params,
    is_asynchronous,
    load_scenario,
    with_overrides,
)
from fedram_flwr.registry.app_config import parse_override
from fedram_flwr.registry.parameters_doc import show_lines
from fedram_flwr.report import RunSet, write_report
from fedram_flwr.report.run_plots import plot_run
from fedram_flwr.rundir import run_folder
from fedram_flwr.rundir.nofollow import write_atomic
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.scenario.sweep import swept_values
from fedram_flwr.tracking import requested, tracked

try:  # what runs need: torch, torchvision (the `experiments` extra); --help, show: not
    from fedram_flwr.engines import (
        DEPLOYMENT_LATENCY_ENV,
        FlwrRunError,
        generate_tls_files,
        run_fedbuff_in_process,
        run_in_process,
        run_message_in_process,
        run_with_flwr,
    )
    from fedram_flwr.engines.fanout import LOCAL, fan_out
    from fedram_flwr.engines.flwr.ray_cluster import check_reachable
    from fedram_flwr.engines.plot_inputs import complete_plot_inputs

    MISSING: ImportError | None = None
except ModuleNotFoundError as err:
    if not is_missing_extra(err):
        raise
    MISSING = err
    FlwrRunError = MissingExtraError  # never raised: no run starts without the extra


def need_extra(what: str) -> None:
    """Raise :class:`MissingExtraError` (exit 2, naming the extra) when the
    ``experiments`` extra that ``what`` needs is not installed."""
    if MISSING is not None:
        raise missing_extra(what, MISSING)


def cmd_run(args: argparse.Namespace) -> int:
    need_extra("fedram run")
    kills = parse_kills(args.kill_supernode)
    if (args.tls or kills) and args.engine != "deployment":
        raise ScenarioError("--tls and --kill-supernode need --engine deployment")
    if args.time_limit is not None and not 0 < args.time_limit < math.inf:
        raise ScenarioError(f"--time-limit: {args.time_limit!r}: a positive number of seconds")
    if args.checkpoint_every is not None and (
        args.engine != "in-process" or args.checkpoint_every < 0
    ):
        raise ScenarioError(
            "--checkpoint-every: a number of rounds >= 0 (0: never), with the in-process engine"
        )
    if args.ray_address is not None and args.engine != "flwr":
        raise ScenarioError("--ray-address needs --engine flwr (the Simulation Engine)")
    if args.ray is not None and args.engine != "in-process":
        raise ScenarioError("--ray fans out in-process runs: leave out --engine")
    if args.ray not in (None, LOCAL):
        check_reachable(args.ray, "--ray")
    if args.api is None:  # in-process: the loop that checkpoints; Flower's engines: as flwr run
        args.api = "legacy" if args.engine == "in-process" else "message"
    if args.checkpoint_every is not None and args.api != "legacy":
        raise ScenarioError("--checkpoint-every: only --api legacy runs checkpoint and resume")
    scenario = load_scenario(args.scenario)
    overrides = dict(parse_override(item) for item in args.overrides)
    if args.seeds:
        overrides["seeds"] = args.seeds  # checked as the scenario's seeds are
    if overrides:
        scenario = with_overrides(scenario, overrides)
    refuse_what_the_engine_cannot_run(scenario, args)
    args.track = requested(args.track)
    if args.ray is not None:  # the tasks run in other processes, maybe other machines
        args.out = args.out.absolute()
    existing = next(p for p in (args.out, *args.out.parents) if p.exists())
    if not existing.is_dir():  # --out itself, or a folder above it, is a file
        raise ScenarioError(f"--out {args.out}: {existing} is a file, not a folder")
    seeds = list(scenario.seeds)
    variants = scenario.variants()
    swept = {label: values for (label, _), values in zip(variants, swept_values(scenario.sweep))}
    if args.variant:
        unknown = set(args.variant) - {label for label, _ in variants}
        if unknown:
            allowed = ", ".join(label for label, _ in variants)
            raise ScenarioError(f"--variant: unknown {sorted(unknown)}; allowed: {allowed}")
        variants = [(label, v) for label, v in variants if label in args.variant]
    jobs = [
        (label, v, seed, run_folder(args.out, scenario.name, label, seed))
        for label, v in variants
        for seed in seeds
    ]
    in_process_other = args.api == "message" or any(is_asynchronous(v) for _, v in variants)
    if args.time_limit is not None and args.engine == "in-process" and in_process_other:
        raise ScenarioError(
            "--time-limit: in-process runs stop at a round's end through the legacy API "
            "(--api legacy, a synchronous algorithm); on --engine flwr or deployment, any"
        )
    root = args.out / scenario.name
    if not args.force:
        refuse_changed(jobs)
        if args.engine != "in-process":
            refuse_resumable(jobs, args.engine)
    print(f"fedram: {len(jobs)} run(s) of {scenario.name} -> {root}", file=sys.stderr)
    t0 = time.monotonic()
    calls = [
        (args, kills, job, swept[job[0]], f"[{i}/{len(jobs)}] {job[0]} seed {job[2]}")
        for i, job in enumerate(jobs, 1)
    ]
    if args.ray is None:
        results = [run_job(*call) for call in calls]
    else:
        results = fan_out(run_job, calls, args.ray)
    failed = [result for result in results if result is not None]
    complete_plot_inputs(root)
    report = write_report(root)
    print(f"fedram: done in {time.monotonic() - t0:.0f} s; report: {report}", file=sys.stderr)
    print(report.read_text())
    if failed:
        print(
            f"fedram: error: {len(failed)} of {len(jobs)} run(s) failed: " + ", ".join(failed),
            file=sys.stderr,
        )
        return 1
    return 0


def refuse_what_the_engine_cannot_run(scenario: Scenario, args: argparse.Namespace) -> None:
    """Refuse, naming why, before any run starts: the wall clock through the legacy API (a
    server loop calling its clients one after another: FedBuff's ``algorithm.params.clock:
    wall`` and the rounds of ``time.clock: wall``), and ``training.batched: on`` on Flower's
    engines (one ClientApp per node: there is no round of clients in one process to
    stack)."""
    for _, variant in scenario.variants():
        if variant.training.batched == "on" and args.engine != "in-process":
            raise ScenarioError(
                f"training.batched: on stacks a round's clients in one process, which only "
                f"the in-process engine does; --engine {args.engine} runs one ClientApp per "
                "node: use auto (the per-client loop there) or off"
            )
        if args.api != "legacy":
            continue
        if variant.time is not None and variant.time.clock == "wall":
            raise ScenarioError(
                "time.clock: wall waits for real replies, which needs Flower's Message API: "
                "add --api message (the legacy API's rounds are on the simulated clock)"
            )
        if not is_asynchronous(variant):
            continue
        if getattr(algorithm_params(variant), "clock", None) == "wall":
            raise ScenarioError(
                "algorithm.params.clock: wall takes updates as replies arrive, which needs "
                "Flower's Message API: add --api message (FedBuff's legacy face runs the "
                "simulated clock)"
            )


def run_job(
    args: argparse.Namespace,
    kills: dict[int, int],
    job: tuple[str, Scenario, int, Path],
    swept: dict,
    tag: str,
) -> str | None:
    """One (variant, seed) of a sweep in its run folder (locked; skipped when complete),
    plotted; None, or what failed. Bad input (every run would fail alike) raises."""
    from fedram_flwr.engines.flwr.flower_line import LINE  # engines load torch: on use

    label, variant, seed, run_dir = job
    try:
        with RunDirectory(run_dir).lock():
            if not args.force and skip(RunDirectory(run_dir), tag, args.api):
                return None
            RunDirectory(run_dir).write_variant(label, swept)
            with tracked(
                args.track,
                run_dir,
                out=args.out,
                scenario=variant.to_dict(),
                label=label,
                seed=seed,
                engine=args.engine,
                api=args.api,
                flwr=LINE.version,
            ):
                try:
                    run_one(args, kills, variant, seed, run_dir, tag)
                except KeyboardInterrupt:  # Ctrl-C: recorded while we hold the lock
                    if threading.current_thread() is threading.main_thread():
                        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second one waits
                    raise record_interrupted(run_dir, variant.rounds, args.engine) from None
                plot_run(run_dir)
    except (ScenarioError, DatasetNotFoundError):
        raise
    except Exception as err:  # RunDirectoryBusy too: another run writes that folder
        print(f"{tag}: failed: {type(err).__name__}: {err}", file=sys.stderr)
        return f"{run_dir} ({type(err).__name__})"
    return None


def run_one(
    args: argparse.Namespace,
    kills: dict[int, int],
    variant: Scenario,
    seed: int,
    run_dir: Path,
    tag: str,
) -> None:
    """One (variant, seed) on the chosen engine."""
    if args.engine in ("flwr", "deployment"):
        resolved = run_dir / "requested-scenario.yaml"
        run_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(resolved, yaml.safe_dump({**variant.to_dict(), "seeds": [seed]}).encode())
        deployment = args.engine == "deployment"
        run_with_flwr(
            resolved.resolve(),
            seed,
            run_dir.resolve(),
            engine="deployment" if deployment else "simulation",
            tls=generate_tls_files(run_dir.resolve() / "tls") if args.tls else None,
            kill_after=kills,
            env=DEPLOYMENT_LATENCY_ENV if deployment else None,
            timeout=args.time_limit,
            api=args.api,
            ray_address=args.ray_address,
        )
    elif is_asynchronous(variant) and args.api == "legacy":  # its event loop, in-process
        run_fedbuff_in_process(variant, seed, run_dir, label=tag)
    elif args.api == "message":
        run_message_in_process(variant, seed, run_dir, label=tag)
    else:
        run_in_process(
            variant,
            seed,
            run_dir,
            label=tag,
            checkpoint_every=args.checkpoint_every,
            resume=not args.force,
            time_limit=args.time_limit,
        )


def cmd_report(args: argparse.Namespace) -> int:
    need_extra("fedram report")
    if not args.runs.is_dir():
        raise ScenarioError(f"{args.runs}: no such folder of runs")
    target = args.target_accuracy
    if target is not None and not 0.0 <= target <= 1.0:
        raise ScenarioError(f"--target-accuracy: {target!r} is not an accuracy in [0, 1]")
    budget = args.time_budget
    if budget is not None and (target is None or not 0.0 < budget < math.inf):
        raise ScenarioError(
            f"--time-budget: {budget!r}: give a finite number of simulated hours > 0, with "
            "--target-accuracy"
        )
    complete_plot_inputs(args.runs)
    report = write_report(args.runs, target_accuracy=target, time_budget=budget, select=args.select)
    print(report.read_text())
    print(f"fedram: wrote {report}", file=sys.stderr)
    return report_problems(RunSet.load(args.runs), strict=args.strict)


def report_problems(runs: RunSet, *, strict: bool) -> int:
    """Say on stderr which runs are damaged (and, with ``strict``, which did not
    complete); the exit status: 1 with ``strict`` when any is, else 0."""
    if not runs.runs:
        print(f"fedram: {runs.root} holds no run folders", file=sys.stderr)
        if strict:
            print("fedram: error: --strict: there is no run to report", file=sys.stderr)
            return 1
        return 0
    damaged, incomplete = runs.damaged(), runs.incomplete()
    for what, listed in (("damaged", damaged), ("incomplete", incomplete if strict else [])):
        if listed:
            print(f"fedram: {len(listed)} {what} run(s), left out of the report:", file=sys.stderr)
            print("\n".join(f"  {path}: {why}" for path, why in listed), file=sys.stderr)
    if strict and (damaged or incomplete):
        print("fedram: error: --strict: not every run is complete and whole", file=sys.stderr)
        return 1
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    print(yaml.safe_dump(scenario.to_dict(), sort_keys=False))
    print("\n".join(show_lines(scenario.algorithm.name, algorithm_params(scenario))))
    for label, _ in scenario.variants():
        print(f"variant: {label}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.split("\n")[0]).parse_args(argv)
    if os.environ.get("FEDRAM_DATA"):  # Flower's processes run in other folders
        os.environ["FEDRAM_DATA"] = os.path.abspath(os.path.expanduser(os.environ["FEDRAM_DATA"]))
    try:
        return {"run": cmd_run, "report": cmd_report, "show": cmd_show}[args.command](args)
    except (ScenarioError, DatasetNotFoundError, FlwrRunError) as err:
        print(f"fedram: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C: one line, no traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        line = err.message() if isinstance(err, RunInterrupted) else "fedram: interrupted"
        print(line, file=sys.stderr)
        return 128 + signal.SIGINT
