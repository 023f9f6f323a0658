"""Wall time per round of one small scenario in every engine, as ratios from one run.

The same rounds of Fed-CVaR-Avg on Fig. 2a's scenario (K=3 clients, one relayed per
round by the RAM, logistic regression, one local epoch; seed 0), run by

* ``in-process``: ``fedram run`` 's engine (Flower's Server loop, no network);
* ``simulation``: ``flwr run .`` on Flower's Simulation Engine (Ray, 3 virtual nodes);
* ``deployment``: ``flwr run .`` against a SuperLink and 3 SuperNode processes on
  loopback, with Flower's defaults, then with :data:`DEPLOYMENT_LATENCY_ENV`
  (SuperExec task poll 0.2 s instead of 1 s), then that plus TLS;

each through Flower's legacy API (Strategy, ClientManager, NumPyClient), then in-process,
Simulation and Deployment (poll 0.2 s) again through the Message API (the Message-API
strategy under ``with_availability``, the Message-API ClientApp; ``fedram run``'s
default), all in the same run of this script.

Per round: the server's wall time from one round's end to the next (``round-seconds``),
median over rounds 2..R+1 (round 1 starts actors / resolves partition ids; the last
round evaluates and is not timed), beside the client's own local-SGD seconds of the
same rounds. ``start`` is the time from the call to the first recorded round (start-up
of the SuperLink, SuperNodes, ServerApp). Every engine relays the same clients, so each
round does the same work. Results: ``<out>/engines.json`` and ``<out>/engines.md``.

    OMP_NUM_THREADS=1 .venv/bin/python bench/engines.py --rounds 6 --out docs/results/engines

``--subset lines`` runs only what the Flower lines' table of docs/engines.md compares
(in-process, Simulation, Deployment with Flower's defaults, plain and TLS, Message API),
once per line, in that line's virtualenv:

    OMP_NUM_THREADS=1 .venv/bin/python bench/engines.py --subset lines --out DIR
    OMP_NUM_THREADS=1 .venv-flwr1.39/bin/python bench/engines.py --subset lines --out DIR
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from fedram_flwr.engines import (
    DEPLOYMENT_LATENCY_ENV,
    generate_tls_files,
    run_in_process,
    run_message_in_process,
    run_with_flwr,
)
from fedram_flwr.engines.flwr.flower_line import LINE
from fedram_flwr.registry import load_scenario, with_overrides
from fedram_flwr.rundir.outputs import RunDirectory

ROOT = Path(__file__).resolve().parent.parent


def timed_rounds(run: RunDirectory) -> list[dict[str, Any]]:
    """Rows of rounds 2..R-1 (see the module docstring)."""
    rows = [r for r in run.read_metrics() if r["round"] > 0]
    return rows[1:-1]


def measure(name: str, api: str, run: Any) -> dict[str, Any]:
    """Run ``run() -> RunDirectory`` and summarise its rounds."""
    t0 = time.monotonic()
    out = run()
    total = time.monotonic() - t0
    rows = timed_rounds(out)
    rounds = [r["round-seconds"] for r in rows]
    timing = out.path / "flwr-logs" / "timing.json"
    start = json.loads(timing.read_text())["first-round"] if timing.is_file() else None
    return {
        "engine": name,
        "api": api,
        "s_per_round": statistics.median(rounds),
        "min_s_per_round": min(rounds),
        "max_s_per_round": max(rounds),
        "local_sgd_s_per_round": statistics.median(r["fit-train-seconds"] for r in rows),
        "start_s": start,
        "total_s": total,
        "relayed": [r["relayed"] for r in out.read_metrics() if r["round"] > 0],
    }


def transport(engine: str) -> str:
    """How the clients' messages travel in ``engine`` on the installed Flower line."""
    if engine.startswith("Deployment"):
        return f"Fleet over {LINE.fleet}" + (" + TLS" if "TLS" in engine else "")
    return "Ray actors" if engine.startswith("Simulation") else "function calls"


def table(results: list[dict[str, Any]]) -> str:
    base = results[0]["s_per_round"]
    lines = [
        "| flwr | engine | transport | API | s / round (median) | min - max "
        "| x in-process (legacy) | local SGD s / round | start-up s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        start = "-" if r["start_s"] is None else f"{r['start_s']:.0f}"
        lines.append(
            f"| {r['flwr']} | {r['engine']} | {r['transport']} | {r['api']} "
            f"| {r['s_per_round']:.3f} | {r['min_s_per_round']:.3f} - "
            f"{r['max_s_per_round']:.3f} | {r['s_per_round'] / base:.0f} | "
            f"{r['local_sgd_s_per_round']:.3f} | {start} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios/fig2a_gaussian_3users.yaml"))
    ap.add_argument("--rounds", type=int, default=6, help="timed rounds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument(
        "--subset",
        choices=("all", "lines"),
        default="all",
        help="lines: only the runs the Flower lines' table compares",
    )
    args = ap.parse_args()

    s = with_overrides(
        load_scenario(args.scenario),
        {"rounds": args.rounds + 2, "eval_every": args.rounds + 2, "sweep": {}},
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scen = tmp / "bench.yaml"
        scen.write_text(yaml.safe_dump({**s.to_dict(), "name": "bench", "seeds": [args.seed]}))
        tls = generate_tls_files(tmp / "tls")

        def flwr(name: str, api: str, **kwargs: Any) -> Any:
            folder = tmp / f"{name}-{api}"
            return lambda: run_with_flwr(scen, args.seed, folder, timeout=1800, api=api, **kwargs)

        def in_process(api: str) -> Any:
            engine = run_message_in_process if api == "message" else run_in_process

            def run() -> RunDirectory:
                with contextlib.redirect_stderr(io.StringIO()):
                    return engine(s, args.seed, tmp / f"in-process-{api}")

            return run

        tuned = dict(engine="deployment", env=DEPLOYMENT_LATENCY_ENV)
        poll = "Deployment Engine, SuperExec poll 0.2 s"
        runs = [
            ("in-process", "legacy", in_process("legacy")),
            ("Simulation Engine", "legacy", flwr("simulation", "legacy")),
            (
                "Deployment Engine, Flower defaults",
                "legacy",
                flwr("dep-default", "legacy", engine="deployment"),
            ),
            (poll, "legacy", flwr("dep-tuned", "legacy", **tuned)),
            (f"{poll}, TLS", "legacy", flwr("dep-tls", "legacy", tls=tls, **tuned)),
            ("in-process", "message", in_process("message")),
            ("Simulation Engine", "message", flwr("simulation", "message")),
            (poll, "message", flwr("dep-tuned", "message", **tuned)),
        ]
        if args.subset == "lines":
            runs = [
                runs[0],
                ("Simulation Engine", "message", flwr("simulation", "message")),
                (
                    "Deployment Engine, Flower defaults",
                    "message",
                    flwr("dep-default", "message", engine="deployment"),
                ),
                (
                    "Deployment Engine, Flower defaults, TLS",
                    "message",
                    flwr("dep-tls", "message", engine="deployment", tls=tls),
                ),
            ]
        results = []
        for name, api, run in runs:
            results.append(measure(name, api, run))
            results[-1]["flwr"] = LINE.version
            results[-1]["transport"] = transport(name)
            print(json.dumps(results[-1]), flush=True)
    relayed = {json.dumps(r.pop("relayed")) for r in results}
    if len(relayed) != 1:
        raise SystemExit(f"the engines relayed different clients: {relayed}")
    report = {
        "workload": f"{s.name}: K={s.data.num_clients}, {s.model.name}, "
        f"H={s.training.local_epochs}, {args.rounds} timed rounds, seed {args.seed}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f} at the end",
        "latency_env": DEPLOYMENT_LATENCY_ENV,
        "results": results,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engines.json").write_text(json.dumps(report, indent=2))
    (args.out / "engines.md").write_text(
        f"{report['workload']}; {report['machine']}.\n\n{table(results)}"
    )
    print(table(results))


if __name__ == "__main__":
    main()
