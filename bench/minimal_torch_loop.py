"""FedAR logreg: the in-process engine against a minimal PyTorch loop, in one run.

The minimal loop is what a quick hand-written benchmark does for each of the round's
clients (~52): a fresh 784x10 linear layer, 5 steps of 64 examples drawn with replacement,
cross-entropy and a hand-written SGD step, nothing averaged. It does less than the engine:
``bench/many_clients.py`` times the engine against its own plain loop, which does the
engine's exact work (the global weights loaded, batches drawn without replacement, weight
decay, the weighted average). This script times, alternating ``--repeats`` times in one
process on the clients of the engine's rounds: the minimal loop (``minimal_loop_s``), that
plain loop (``plain_s``) and the engine (``in_process_s``), medians of rounds 2..R-1
(docs/performance.md).

    OMP_NUM_THREADS=1 .venv/bin/python bench/minimal_torch_loop.py --rounds 12 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from many_clients import OUT, full_length_checkpoints, in_process, plain_loop, timed, workload  # noqa: E402

from fedram_flwr.engines.experiment import Experiment  # noqa: E402


def minimal_loop(
    xs: list[torch.Tensor], ys: list[torch.Tensor], relayed: list[list[int]]
) -> list[dict]:
    """The minimal loop on each round's clients: a fresh linear layer, 5 steps of 64
    examples drawn with replacement, cross-entropy, p -= 0.1 grad (nothing averaged)."""
    gen = torch.Generator().manual_seed(0)
    rows = []
    for r, clients in enumerate(relayed, start=1):
        start = time.perf_counter()
        for k in clients:
            model = torch.nn.Linear(xs[k].shape[1], 10)
            for _ in range(5):
                idx = torch.randint(len(ys[k]), (64,), generator=gen)
                loss = F.cross_entropy(model(xs[k][idx]), ys[k][idx])
                model.zero_grad()
                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= 0.1 * p.grad
        rows.append({"round": r, "round-seconds": time.perf_counter() - start})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=12, help="rounds per run (>= 3)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds: at least 3 (round 1 and the last are not timed)")
    torch.set_num_threads(1)  # as the in-process engine runs
    s = workload("fedar-logreg", args.rounds, "cpu")
    d = Experiment(s, 0).data
    xs = [torch.from_numpy(x).flatten(1) for x in d.client_x]
    ys = [torch.from_numpy(y) for y in d.client_y]
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {"minimal_loop": [], "plain": [], "in_process": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            rows = in_process(s, Path(tmp) / f"run-{rep}", full_length_checkpoints("fedar-logreg"))
            relayed = [r.get("relayed", []) for r in rows if r["round"] > 0]
            times["in_process"] += [r["round-seconds"] for r in timed(rows)]
            times["plain"] += [
                r["round-seconds"] for r in timed(plain_loop(s, relayed, torch.device("cpu")))
            ]
            times["minimal_loop"] += [
                r["round-seconds"] for r in timed(minimal_loop(xs, ys, relayed))
            ]
    result = {f"{k}_s": statistics.median(v) for k, v in times.items()}
    result["in_process_over_minimal_loop"] = result["in_process_s"] / result["minimal_loop_s"]
    result["in_process_over_plain"] = result["in_process_s"] / result["plain_s"]
    result["load_average"] = {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)}
    result["cores"], result["rounds"], result["repeats"] = os.cpu_count(), args.rounds, args.repeats
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "minimal_torch_loop.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
