"""Local SGD of one round's clients: the per-client loop against the stacked core.

Times :func:`~fedram_flwr.clients.training.sgd_passes` run client after client on one
shared model (the in-process engine's loop) against
:func:`~fedram_flwr.clients.batched.stacked_sgd` on the same clients (the same batches
from the same streams), alternating, and checks that they agree (max abs difference of
the trained weights). SGD alone: no engine, no Flower, no client objects. Two shapes:

* ``ca-fed-synthetic``: 100 clients, 2 steps of batch 32, 60 features, 10 classes;
* ``fedar-logreg``: 52 clients, 5 steps of batch 64, 784 features, 10 classes.

    OMP_NUM_THREADS=1 .venv/bin/python bench/stacked_sgd.py --repeats 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from fedram_flwr.clients.batched import SGDJob, stacked_sgd
from fedram_flwr.clients.batches import ArrayData
from fedram_flwr.clients.models import build_model, fix_tensors, get_weights, set_weights
from fedram_flwr.clients.training import sgd_passes
from fedram_flwr.protocol import SERVER_ROUND

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "bench_many_clients_batched"
SHAPES = {  # clients, steps, batch size, features
    "ca-fed-synthetic": (100, 2, 32, 60),
    "fedar-logreg": (52, 5, 64, 784),
}
EXAMPLES = 300  # per client
CONFIG = {SERVER_ROUND: 1}


def clients(num: int, batch: int, features: int) -> list[ArrayData]:
    rng = np.random.default_rng(0)
    return [
        ArrayData(
            rng.standard_normal((EXAMPLES, features)).astype(np.float32),
            rng.integers(0, 10, EXAMPLES),
            batch_size=batch,
            seed=0,
            partition_id=k,
        )
        for k in range(num)
    ]


def measure(name: str, repeats: int) -> dict:
    num, steps, batch, features = SHAPES[name]
    data = clients(num, batch, features)
    model = build_model("logreg", (features,), 10, seed=0)
    fix_tensors(model)
    theta = get_weights(model)
    settings = dict(epochs=1, lr=0.05, steps=steps, weight_decay=0.01)

    def loop() -> list[list[np.ndarray]]:
        out = []
        for d in data:
            set_weights(model, theta)
            sgd_passes(model, d.passes(CONFIG), **settings)
            out.append(get_weights(model))
        return out

    def stacked() -> list[list[np.ndarray]]:
        start = [torch.from_numpy(a) for a in theta]
        jobs = [SGDJob(start, d.passes(CONFIG), **settings) for d in data]
        return [[p.numpy() for p in r.params] for r in stacked_sgd(model, jobs)]

    times: dict[str, list[float]] = {"loop": [], "stacked": []}
    results = {}
    for _ in range(repeats + 1):  # the first pair warms up
        for fn in (loop, stacked):
            begin = time.perf_counter()
            results[fn.__name__] = fn()
            times[fn.__name__].append(time.perf_counter() - begin)
    diff = max(
        float(np.abs(a - b).max())
        for ws, wl in zip(results["stacked"], results["loop"])
        for a, b in zip(ws, wl)
    )
    loop_s, stacked_s = (statistics.median(times[k][1:]) for k in ("loop", "stacked"))
    return {
        "shape": name,
        "clients": num,
        "steps": steps,
        "batch": batch,
        "features": features,
        "loop_ms": round(1e3 * loop_s, 2),
        "stacked_ms": round(1e3 * stacked_s, 2),
        "speed-up": round(loop_s / stacked_s, 2),
        "max_abs_diff": diff,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    rows = [measure(name, args.repeats) for name in SHAPES]
    for row in rows:
        row["load_average"] = {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)}
        print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "stacked_sgd.json").write_text(json.dumps({"results": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
