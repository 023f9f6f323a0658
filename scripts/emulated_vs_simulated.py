"""One scenario on the simulated clock and on real processes whose ClientApps take their
devices' modelled time (``time.emulate``), compared round by round.

    .venv/bin/python scripts/emulated_vs_simulated.py scenarios/time_emulated_gaussian.yaml \
        --out runs/emulated_vs_simulated

(a) ``simulated``: the in-process engine (legacy API), ``time.emulate=false``: the clock is
computed from the time model, nobody sleeps. (b) ``emulated``: Flower's Deployment Engine
through the Message API (a local SuperLink and one SuperNode process per client, started
and stopped by :func:`fedram_flwr.engines.run_with_flwr`), ``time.emulate=true``: each
ClientApp sleeps until its round took the modelled seconds. The round policy is the
scenario's (``--set`` changes it for both runs; ``--simulated-set`` / ``--emulated-set`` for
one of them, e.g. a wall-clock policy for (b) alone).

Written to ``OUT``: the two run folders, ``comparison.json`` (per round: the clients
started, late and dropped on each side, the simulated round's seconds, the real round's
wall seconds (a wall-clock policy's ``wall-round-seconds``, else the recorder's
``round-seconds``), the slowest started client's modelled seconds and the replies' mean
time spent before sleeping, modelled less slept; accuracy against time for both) and
``comparison.md`` (the same as tables, with the agreement of the late clients and the
mean wall overhead per round).

Under a policy on the simulated clock (any policy of the time model today) the server
waits for every reply and applies the policy to the modelled times afterwards: (b) then
uses and drops exactly (a)'s clients, and what differs is the wall time of a round, the
slowest started client's modelled seconds plus what emulation cannot model (a ClientApp
process's start-up, the SuperNode's polls, the transfers, the server's evaluation).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedram_flwr.clock import SimulatedClock, start_round
from fedram_flwr.engines import DEPLOYMENT_LATENCY_ENV, run_in_process, run_with_flwr
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.engines.timed import time_model
from fedram_flwr.protocol import MODELLED_SECONDS, SLEPT_SECONDS
from fedram_flwr.registry import load_scenario, with_overrides
from fedram_flwr.scenario.run_config import parse_overrides

ACCURACY = "accuracy"


def modelled_seconds(experiment: Experiment) -> dict[int, float]:
    """Each client's modelled round seconds in the server's time model."""
    time = time_model(experiment, experiment.client_manager())
    ids = np.arange(experiment.scenario.data.num_clients)
    seconds = start_round(SimulatedClock(experiment.seed), time.speeds, ids, time.task)
    return dict(enumerate(seconds.cost.total.tolist()))


def late_of(row: Mapping[str, Any]) -> list[int]:
    """The started clients whose update the round did not use (late or dropped)."""
    return sorted(row.get("not-used", []))


def compare(
    simulated: Sequence[Mapping[str, Any]],
    emulated: Sequence[Mapping[str, Any]],
    modelled: Mapping[int, float],
) -> dict[str, Any]:
    """Compare the rows of the two runs, round by round.

    Parameters
    ----------
    simulated, emulated : sequence of mapping
        The runs' metrics rows (round 0, the initial evaluation, included).
    modelled : mapping of int to float
        Each client's modelled round seconds (:func:`modelled_seconds`).

    Returns
    -------
    dict
        ``rounds``: one entry per round of both runs; ``accuracy``: (seconds, accuracy) of
        each evaluated row, simulated seconds for (a) and cumulated wall seconds for (b);
        ``summary``: rounds whose late clients agree, the mean wall overhead per round
        (wall seconds less the slowest started client's modelled seconds).
    """

    def wall_of(row: Mapping[str, Any]) -> float:
        # a wall-clock policy's own wait, else the recorder's seconds since the last row
        return row.get("wall-round-seconds", row["round-seconds"])

    sim = {r["round"]: r for r in simulated if r["round"] > 0}
    real = {r["round"]: r for r in emulated if r["round"] > 0}
    rounds = []
    for t in sorted(sim.keys() & real.keys()):
        a, b = sim[t], real[t]
        started = sorted(b.get("active", []))
        slowest = max((modelled[c] for c in started), default=0.0)
        rounds.append(
            {
                "round": t,
                "started": {"simulated": sorted(a.get("active", [])), "emulated": started},
                "late": {"simulated": late_of(a), "emulated": late_of(b)},
                "agree": late_of(a) == late_of(b),
                "sim-round-seconds": a.get("sim-round-seconds"),
                "wall-round-seconds": wall_of(b),
                "slowest-modelled-seconds": slowest,
                "overhead-seconds": wall_of(b) - slowest,
                # the replies' mean time spent before sleeping (modelled less slept)
                "spent-seconds": b.get(f"fit-{MODELLED_SECONDS}", 0.0)
                - b.get(f"fit-{SLEPT_SECONDS}", 0.0),
            }
        )
    wall, accuracy_emulated = 0.0, []
    for r in emulated:
        wall += wall_of(r) if r["round"] > 0 else 0.0
        if ACCURACY in r:
            accuracy_emulated.append((wall, r[ACCURACY]))
    accuracy_simulated = [
        (r.get("sim-seconds", 0.0), r[ACCURACY]) for r in simulated if ACCURACY in r
    ]
    overheads = [r["overhead-seconds"] for r in rounds]
    return {
        "rounds": rounds,
        "accuracy": {"simulated": accuracy_simulated, "emulated": accuracy_emulated},
        "summary": {
            "rounds": len(rounds),
            "late-agree": sum(r["agree"] for r in rounds),
            "mean-overhead-seconds": float(np.mean(overheads)) if overheads else None,
            "sim-seconds": accuracy_simulated[-1][0] if accuracy_simulated else None,
            "wall-seconds": wall,
        },
    }


def markdown(result: Mapping[str, Any]) -> str:
    """``comparison.md``: the rounds and the accuracy against time as tables."""
    s = result["summary"]
    lines = [
        "# Simulated clock against emulated real processes",
        "",
        f"Late (or dropped) clients agree in {s['late-agree']} of {s['rounds']} rounds; "
        f"wall overhead per round (wall less the slowest started client's modelled "
        f"seconds): {s['mean-overhead-seconds']:.2f} s on average. "
        f"Simulated: {s['sim-seconds']:.1f} s; wall: {s['wall-seconds']:.1f} s.",
        "",
        "| round | late, simulated | late, emulated | sim s | slowest modelled s | wall s "
        "| spent s (mean) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rounds"]:
        lines.append(
            f"| {r['round']} | {r['late']['simulated']} | {r['late']['emulated']} "
            f"| {r['sim-round-seconds']:.2f} | {r['slowest-modelled-seconds']:.2f} "
            f"| {r['wall-round-seconds']:.2f} | {r['spent-seconds']:.2f} |"
        )
    lines += ["", "| run | (seconds, accuracy) |", "|---|---|"]
    for name, points in result["accuracy"].items():
        text = ", ".join(f"({t:.1f}, {a:.3f})" for t, a in points)
        lines.append(f"| {name} | {text} |")
    return "\n".join(lines) + "\n"


def joined(*parts: Sequence[str]) -> str:
    """The ``FIELD=VALUE`` items of every part, as one run-config ``overrides``."""
    return ",".join(item for part in parts for item in part)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", type=Path)
    p.add_argument("--seed", type=int, default=None, help="default: the scenario's first")
    p.add_argument("--out", type=Path, default=Path("runs/emulated_vs_simulated"))
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="both")
    p.add_argument("--simulated-set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--emulated-set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--timeout", type=float, default=None, help="seconds for (b)")
    p.add_argument(
        "--fast-polls",
        action="store_true",
        help="the SuperExecs look for new ClientApp tasks every 0.2 s instead of 1 s",
    )
    args = p.parse_args(argv)
    sim_overrides = joined(args.both, ["time.emulate=false"], args.simulated_set)
    real_overrides = joined(args.both, ["time.emulate=true"], args.emulated_set)
    base = load_scenario(args.scenario)
    if base.sweep:
        raise SystemExit(f"{args.scenario}: has a sweep; pick one variant with --set")
    simulated_scenario = with_overrides(base, parse_overrides(sim_overrides))
    with_overrides(base, parse_overrides(real_overrides))  # a bad field fails before any run
    seed = base.seeds[0] if args.seed is None else args.seed
    args.out.mkdir(parents=True, exist_ok=True)
    simulated = run_in_process(simulated_scenario, seed, args.out / "simulated", resume=False)
    emulated = run_with_flwr(
        args.scenario.resolve(),
        seed,
        args.out / "emulated",
        overrides=real_overrides,
        engine="deployment",
        api="message",
        timeout=args.timeout,
        env=DEPLOYMENT_LATENCY_ENV if args.fast_polls else None,
    )
    result = compare(
        simulated.read_metrics(),
        emulated.read_metrics(),
        modelled_seconds(Experiment(simulated_scenario, seed)),
    )
    (args.out / "comparison.json").write_text(json.dumps(result, indent=2))
    (args.out / "comparison.md").write_text(markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
