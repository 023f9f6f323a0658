"""``fedram``'s command line: its arguments (:func:`parser`), and the values that need
more than argparse checks (``--out``, ``--kill-supernode``). What the commands do is
:mod:`fedram_flwr.cli.commands`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fedram_flwr.registry.app_config import APIS
from fedram_flwr.rundir.directory import PATH_MAX, PATH_ROOM
from fedram_flwr.scenario.config import ScenarioError
from fedram_flwr.tracking import TRACK_ENV, TRACKERS


def parser(description: str) -> argparse.ArgumentParser:
    """``fedram``'s arguments: ``run``, ``report`` and ``show`` (``description``: the
    first line of its help)."""
    p = argparse.ArgumentParser(prog="fedram", description=description)
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a scenario (all variants x seeds)")
    run.add_argument("scenario", type=Path)
    run.add_argument(
        "--engine",
        choices=("in-process", "flwr", "deployment"),
        default="in-process",
        help="flwr: Flower's Simulation Engine; deployment: a local SuperLink and one "
        "SuperNode process per client, on loopback",
    )
    run.add_argument(
        "--api",
        choices=APIS,
        default=None,
        help="Flower's API the run goes through: message (the algorithm's flwr.serverapp "
        "strategy, with_availability, the Message-API ClientApp; the default of the Flower "
        "engines) or legacy (Strategy, ClientManager, NumPyClient; the in-process default, "
        "since only its runs checkpoint and resume); both give the same model",
    )
    run.add_argument(
        "--tls",
        action="store_true",
        help="deployment: secure the SuperLink with TLS (a throwaway CA and certificate "
        "are generated in the run directory)",
    )
    run.add_argument(
        "--kill-supernode",
        action="append",
        default=[],
        metavar="PARTITION@ROUND",
        help="deployment: SIGKILL the SuperNode of this partition once ROUND is recorded "
        "(fault injection), e.g. --kill-supernode 2@3",
    )
    run.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="stop a run (and fail it) after this many seconds; flwr / deployment default: "
        "600 s start-up + rounds x 30 s (simulation) or 60 s (deployment), plus the "
        "availability's round_timeout per round; in-process (legacy API): at the end of the "
        "first round past it, after its checkpoint (a rerun continues), no default",
    )
    run.add_argument(
        "--checkpoint-every",
        type=int,
        metavar="ROUNDS",
        help="in-process: save a run's state in its folder every ROUNDS rounds, so that "
        "rerunning an interrupted run resumes it there (0: never); default: rounds / 20",
    )
    run.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="flwr: run the Simulation Engine's clients on this running Ray cluster "
        "(its head node's address, as `ray start --head` prints it)",
    )
    run.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="HOST:PORT",
        help="in-process: run the (variant, seed) runs as tasks on this Ray cluster (one "
        "CPU each; the run folders must be on a filesystem its nodes share), or, without "
        "an address (or `local`), on a private Ray started on this machine for the sweep",
    )
    run.add_argument("--seeds", type=int, nargs="+", help="override the scenario's seeds")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field with any YAML value, e.g. --set rounds=100 --set "
        "'hcvar_alpha=[0.1, 0.2]'; a swept field takes the one value given (leaves the sweep)",
    )
    run.add_argument("--variant", action="append", help="run only these sweep variants")
    run.add_argument("--out", type=out_folder, default=Path("runs"))
    run.add_argument("--force", action="store_true", help="rerun complete runs too")
    run.add_argument(
        "--track",
        action="append",
        choices=TRACKERS,
        metavar="TRACKER",
        help=f"also log each run to this tracker ({', '.join(TRACKERS)}; repeatable; the "
        f"'tracking' extra): its parameters, every round's row, its summary and plots, in "
        f"<out>/tracking unless the tracker is configured; default: ${TRACK_ENV} "
        "(comma-separated)",
    )
    rep = sub.add_parser("report", help="tables and figures from a folder of runs")
    rep.add_argument("runs", type=Path)
    rep.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a run is damaged (complete, its files missing or garbled), "
        "failed or interrupted; the report is written all the same",
    )
    rep.add_argument(
        "--target-accuracy",
        type=float,
        metavar="ACC",
        help="add a table of the rounds and simulated hours each variant takes to reach "
        "this test accuracy (in [0, 1], e.g. 0.7); runs that never do show 'not reached'",
    )
    rep.add_argument(
        "--time-budget",
        type=float,
        metavar="HOURS",
        help="with --target-accuracy: add a table of the runs on a clock cut at this many "
        "simulated hours: time and client updates to the target, accuracy and updates "
        "computed and dropped at the budget (every run must reach it)",
    )
    rep.add_argument(
        "--select",
        choices=SELECT_METRICS,
        default="train-loss",
        help="the metric a sweep of algorithms x learning rates is tuned on: the lowest "
        "train-loss (the default), the highest train-accuracy or (test) accuracy, each the "
        "tail mean over the evaluations of the last 20%% of rounds, averaged over seeds",
    )
    show = sub.add_parser("show", help="print the resolved scenario and its variants")
    show.add_argument("scenario", type=Path)
    return p


SELECT_METRICS = ("train-loss", "train-accuracy", "accuracy")
"""``fedram report --select``'s values: :data:`fedram_flwr.report.rate_grid.CRITERIA`'s
keys (not imported here: the report package loads matplotlib)."""


def out_folder(text: str) -> Path:
    """``--out``'s value as a path; an empty one (``--out ""``: the working directory, by
    mistake) is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} names no folder; give one, e.g. --out runs (or --out . on purpose)"
        )
    size = len(os.fsencode(os.path.abspath(text)))
    if size > PATH_MAX - PATH_ROOM:
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r}... is a path of {size} bytes; a path is at most {PATH_MAX} bytes, "
            f"and a run folder needs {PATH_ROOM} more for its files"
        )
    return Path(text)


def parse_kills(items: list[str]) -> dict[int, int]:
    """``["2@3"]`` -> {2: 3}: partition id -> round after which its SuperNode dies."""
    kills = {}
    for item in items:
        partition, sep, after = item.partition("@")
        if not (sep and partition.isdigit() and after.isdigit()):
            raise ScenarioError(f"--kill-supernode {item!r}: expected PARTITION@ROUND, e.g. 2@3")
        kills[int(partition)] = int(after)
    return kills
