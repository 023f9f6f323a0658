"""Per-group test accuracy at one evaluated round of a sweep's runs (mean ± std over seeds).

For runs whose clients hold disjoint blocks of classes (Amplified SCAFFOLD's cyclic
scenario: group g holds classes 2g and 2g+1), the accuracy on each block's classes shows
which groups a model has drifted away from. Reads only each run's ``metrics.jsonl``:

    python scripts/class_groups_table.py runs/amplified_scaffold_claim_fashion_mnist \
        --round 200 --groups 5 > docs/results/amplified_scaffold_claim/period_end_groups.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def evaluation(run: Path, rnd: int) -> dict:
    """The evaluated metrics line of round ``rnd`` in ``run``'s metrics.jsonl."""
    with open(run / "metrics.jsonl") as f:
        for line in f:
            m = json.loads(line)
            if m.get("round") == rnd and "accuracy" in m:
                return m
    raise SystemExit(f"{run}: round {rnd} was not evaluated")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", type=Path, help="a scenario's folder of variants")
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--groups", type=int, required=True, help="blocks of consecutive classes")
    args = ap.parse_args()
    variants = sorted(p for p in args.sweep.iterdir() if p.is_dir())
    seeds = sorted(variants[0].glob("seed*"))
    classes = sum(k.startswith("accuracy-class-") for k in evaluation(seeds[0], args.round))
    size = classes // args.groups
    blocks = [range(g * size, (g + 1) * size) for g in range(args.groups)]
    names = [f"group {g} (classes {b[0]}-{b[-1]})" for g, b in enumerate(blocks)]
    print(
        f"Round {args.round} of `{args.sweep}`: test accuracy (%) on each group's classes, "
        "the worst group, and the test loss; mean ± std over seeds.\n"
    )
    print("| variant | seeds | " + " | ".join(names) + " | worst group | test loss |")
    print("|---" * (len(names) + 4) + "|")
    for v in variants:
        rows = []
        for seed in sorted(v.glob("seed*")):
            m = evaluation(seed, args.round)
            acc = [100 * np.mean([m[f"accuracy-class-{c}"] for c in b]) for b in blocks]
            rows.append([*acc, min(acc), m["loss"]])
        a = np.array(rows)
        sd = a.std(axis=0, ddof=1) if len(a) > 1 else np.zeros(a.shape[1])
        cells = [f"{a[:, j].mean():.1f} ± {sd[j]:.1f}" for j in range(a.shape[1] - 1)]
        cells.append(f"{a[:, -1].mean():.3f} ± {sd[-1]:.3f}")
        print(f"| {v.name} | {len(a)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
