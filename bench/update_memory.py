"""Server memory of FedAR's update memory G (N x d float32), and what a round adds.

For each (model, N) it builds the FedAR strategy for the model's d, then feeds it
``--rounds`` rounds in which a fraction ``--active`` of the clients answer with random
models (no training: only the server's memory is measured). tracemalloc reports the
memory's size, the peak during the rounds above what was held before them, and what
the clients' answers themselves (Flower ``Parameters``) occupy. The update memory is
written in place, so a round's extra peak stays near the size of its inputs, not N x d.

    .venv/bin/python bench/update_memory.py --clients 100 1000 --models lenet5 logreg
"""

from __future__ import annotations

import argparse
import json
import tracemalloc

import numpy as np
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

from fedram_flwr.clients.models import build_model, get_weights
from fedram_flwr.protocol import PARTITION_ID
from fedram_flwr.strategies import FedAR
from fedram_flwr.strategies.vector import unflatten

SHAPES = {"logreg": (1, 28, 28), "cnn": (1, 28, 28), "lenet5": (3, 32, 32), "resnet18": (3, 32, 32)}
MB = 2**20


def measure(model: str, num_clients: int, rounds: int, active: float) -> dict:
    theta = get_weights(build_model(model, SHAPES[model], 10, seed=0))
    d = sum(a.size for a in theta)
    rng = np.random.default_rng(0)
    tracemalloc.start()
    strategy = FedAR(initial_arrays=theta, num_clients=num_clients, lr=0.1, rho=0.1, g=lambda t: 50)
    held = tracemalloc.get_traced_memory()[0]
    extra_peak, inputs = 0, 0
    for t in range(1, rounds + 1):
        ids = np.flatnonzero(rng.random(num_clients) < active)
        results = [
            (
                None,
                FitRes(
                    Status(Code.OK, ""),
                    ndarrays_to_parameters(unflatten(rng.standard_normal(d, np.float32), theta)),
                    1,
                    {PARTITION_ID: int(i)},
                ),
            )
            for i in ids
        ]
        before = tracemalloc.get_traced_memory()[0]
        inputs = max(inputs, before - held)
        tracemalloc.reset_peak()
        strategy.aggregate_fit(t, results, [])
        extra_peak = max(extra_peak, tracemalloc.get_traced_memory()[1] - before)
        del results
    tracemalloc.stop()
    return {
        "model": model,
        "N": num_clients,
        "d": d,
        "memory-MB": strategy.state.memory.updates.nbytes / MB,
        "strategy-held-MB": held / MB,
        "round-inputs-MB": inputs / MB,
        "round-extra-peak-MB": extra_peak / MB,
        "N x d x 4 bytes (MB)": num_clients * d * 4 / MB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--models", nargs="+", default=["lenet5", "logreg"], choices=SHAPES)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--active", type=float, default=0.5)
    args = parser.parse_args()
    for model in args.models:
        for n in args.clients:
            print(json.dumps(measure(model, n, args.rounds, args.active)), flush=True)


if __name__ == "__main__":
    main()
