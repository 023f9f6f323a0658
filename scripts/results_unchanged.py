"""Record, then compare, the results of a representative set of runs (bit for bit).

A structural change must not change a single float. Before the change:

    .venv/bin/python scripts/results_unchanged.py record /tmp/reference

after it (same machine or not: the in-process engine pins one torch thread):

    .venv/bin/python scripts/results_unchanged.py compare /tmp/reference

``compare`` reruns the same set into a fresh folder and checks, per run, that every
final model array is ``np.array_equal`` to the reference and that the final and
last-20% (tail-mean) summary numbers, timings aside, are equal. It prints one line per
run and exits 1 on any difference. It drives only the ``fedram`` command line and reads
only the run folder's files (``final_model.npz``, ``summary.json``), so it works across refactors.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# (scenario file, overrides, variant labels or None for every variant); seed 0 each.
CASES: list[tuple[str, list[str], list[str] | None]] = [
    ("scenarios/demo.yaml", [], None),
    ("scenarios/fig2a_gaussian_3users.yaml", [], None),
    (
        "scenarios/fedar_fashion_mnist.yaml",
        ["rounds=20"],
        [f"p_min=0.1,name={n}" for n in ("fedar", "mifa", "scaffold", "fedau")],
    ),
    ("scenarios/ca_fed_synthetic.yaml", ["rounds=30"], ["name=ca-fed", "name=adafed"]),
    (
        "scenarios/rcfl_fashion_mnist_3clients.yaml",
        ["rounds=20"],
        ["name=rfedfair", "name=afl"],
    ),
]


def fedram(*args: str) -> str:
    cmd = [sys.executable, "-m", "fedram_flwr.cli", *args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out.stdout


def variant_labels(scenario: str) -> list[str]:
    shown = fedram("show", scenario)
    return [line.split(": ", 1)[1] for line in shown.splitlines() if line.startswith("variant: ")]


def pick(labels: list[str], wanted: list[str] | None, scenario: str) -> list[str]:
    """Variant labels of ``scenario`` matching ``wanted`` (substring, all parts)."""
    if wanted is None:
        return labels
    chosen = []
    for w in wanted:
        hits = [lab for lab in labels if all(part in lab for part in w.split(","))]
        if len(hits) != 1:
            sys.exit(f"{scenario}: {w!r} matches {hits} of {labels}")
        chosen.append(hits[0])
    return chosen


def run_all(out: Path) -> dict[str, dict]:
    """Run every case into ``out`` and read what the runs left."""
    for scenario, overrides, wanted in CASES:
        labels = pick(variant_labels(scenario), wanted, scenario)
        args = ["run", scenario, "--seeds", "0", "--out", str(out), "--force"]
        for o in overrides:
            args += ["--set", o]
        for lab in labels:
            args += ["--variant", lab]
        print(f"running {scenario} {overrides} {labels}", file=sys.stderr, flush=True)
        fedram(*args)
    return read_runs(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("record", "compare"))
    p.add_argument("reference", type=Path)
    args = p.parse_args()
    if args.mode == "record":
        if args.reference.exists():
            shutil.rmtree(args.reference)
        run_all(args.reference)
        print(f"recorded {args.reference}")
        return 0
    if not args.reference.is_dir():
        sys.exit(f"{args.reference}: no reference; record one first")
    ref = read_runs(args.reference)
    with tempfile.TemporaryDirectory() as tmp:
        new = run_all(Path(tmp))
    bad = 0
    for run in sorted(set(ref) | set(new)):
        if run not in ref or run not in new:
            print(f"MISSING  {run} ({'new' if run not in new else 'reference'} lacks it)")
            bad += 1
            continue
        a, b = ref[run], new[run]
        same_arrays = len(a["arrays"]) == len(b["arrays"]) and all(
            x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a["arrays"], b["arrays"])
        )
        same_summary = a["summary"] == b["summary"]
        ok = same_arrays and same_summary
        bad += not ok
        final = b["summary"].get("final", {})
        acc = final.get("accuracy")
        print(
            f"{'SAME' if ok else 'DIFFERENT'}  {run}: arrays "
            f"{'bit-identical' if same_arrays else 'differ'}, summary "
            f"{'equal' if same_summary else 'differs'}"
            + (f" (final accuracy {acc:.4f})" if isinstance(acc, float) else "")
        )
    print(f"{len(new) - bad} of {len(set(ref) | set(new))} runs unchanged")
    return 1 if bad else 0


def untimed(numbers: dict) -> dict:
    """``numbers`` without wall-clock fields (they differ on every run)."""
    return {k: v for k, v in numbers.items() if "seconds" not in k}


def read_runs(folder: Path) -> dict[str, dict]:
    """{run path relative to ``folder``: its summary numbers and final model arrays}."""
    results = {}
    for model in sorted(folder.rglob("final_model.npz")):
        run = model.parent
        summary = json.loads((run / "summary.json").read_text())
        with np.load(model) as z:
            arrays = [z[k] for k in sorted(z.files, key=lambda k: int(k.split("_")[-1]))]
        results[str(run.relative_to(folder))] = {
            "summary": {k: untimed(summary[k]) for k in ("final", "tail-mean") if k in summary},
            "arrays": arrays,
        }
    return results


if __name__ == "__main__":
    sys.exit(main())
