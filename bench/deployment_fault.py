"""A SuperNode dies mid-run on the Deployment Engine: what each round records.

Runs ``scenarios/deployment_fault.yaml`` (K=3 SuperNodes on loopback, FedAvg over the
``connected`` oracle) with ``fedram``'s Deployment Engine, SIGKILLs SuperNode
``--partition`` once round ``--after`` is recorded, and writes the per-round table
(drawn / relayed / failed / connected clients, round seconds, test accuracy) as
``<out>/fault.md`` beside the run's ``metrics.jsonl``, ``faults.json`` and ``timing.json``.

    OMP_NUM_THREADS=1 .venv/bin/python bench/deployment_fault.py --out docs/results/engines
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from fedram_flwr.engines import DEPLOYMENT_LATENCY_ENV, run_with_flwr
from fedram_flwr.registry import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def fault_table(rows: list[dict], faults: list[dict]) -> str:
    killed = {f["after-round"]: f["partition"] for f in faults}
    lines = [
        "| round | connected at its start | drawn | relayed | failed | s | accuracy (%) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["round"] == 0:
            continue
        note = f" (SuperNode {killed[r['round']]} killed after it)" if r["round"] in killed else ""
        acc = f"{100 * r['accuracy']:.2f}" if "accuracy" in r else "-"
        lines.append(
            f"| {r['round']}{note} | {r['connected']} | {r['active']} | {r['relayed']} | "
            f"{r['failed']} | {r['round-seconds']:.1f} | {acc} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios/deployment_fault.yaml"))
    ap.add_argument("--partition", type=int, default=2)
    ap.add_argument("--after", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()

    s = load_scenario(args.scenario)
    with tempfile.TemporaryDirectory() as tmp:
        run = run_with_flwr(
            args.scenario,
            args.seed,
            Path(tmp) / "run",
            engine="deployment",
            kill_after={args.partition: args.after},
            env=DEPLOYMENT_LATENCY_ENV,
            timeout=1800,
        )
        rows = run.read_metrics()
        faults = json.loads((run.path / "flwr-logs" / "faults.json").read_text())
        args.out.mkdir(parents=True, exist_ok=True)
        shutil.copy(run.path / "metrics.jsonl", args.out / "fault_metrics.jsonl")
        shutil.copy(run.path / "flwr-logs" / "faults.json", args.out / "fault_faults.json")
        shutil.copy(run.path / "flwr-logs" / "timing.json", args.out / "fault_timing.json")
        shutil.copy(run.path / "accuracy.png", args.out / "fault_accuracy.png")
    params = s.availability.params
    head = (
        f"{s.name}: K={s.data.num_clients} SuperNodes, {s.algorithm.name}, oracle "
        f"`connected` (round_timeout {params.get('round_timeout')} s), seed {args.seed}; "
        f"SuperNode {args.partition} SIGKILLed after round {args.after}.\n\n"
    )
    (args.out / "fault.md").write_text(head + fault_table(rows, faults))
    print(head + fault_table(rows, faults))


if __name__ == "__main__":
    main()
