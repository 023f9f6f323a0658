"""Server-side time of one CA-Fed selection for N clients.

One selection is what :class:`~fedram_flwr.strategies.ca_fed.CAFed` computes in
``aggregate_fit`` before it touches any model: the availability tracker's update with
the round's active set and its (pi_hat, lambda_hat) (Sec. IV-B), the loss estimates
F_hat / F_hat* (eq. 17), and q with the two greedy ``get`` passes (Alg. 1 lines 5-7,
eq. 20), in estimated mode. Clients follow the paper's Markov population (g=0.4,
nu=0.9, eps=0.01); ``--warmup`` rounds are observed first so the estimates and losses
are not trivial; each timed repeat is a new round (fresh active set and losses). The
median and min over ``--repeats`` rounds are reported per N (wall-clock, with the two
parts, estimators and ``get`` passes, timed separately too), and the median CPU time of
the process (``total_cpu``), which the other jobs on a shared machine inflate less.

    .venv/bin/python bench/ca_fed_selection.py --clients 100 10000 100000 --out DIR
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from fedram_flwr.availability import ca_fed_markov_law, markov_activation
from fedram_flwr.strategies.availability_estimates import AvailabilityTracker, LossEstimates
from fedram_flwr.strategies.ca_fed_math import ca_fed_weights


def selection_times(
    num_clients: int, repeats: int, warmup: int = 10, kappa2: float = 1.0, seed: int = 0
) -> dict:
    """Seconds per selection (median, min) for ``num_clients``, total and by part."""
    rng = np.random.default_rng(seed)
    pi, lam = ca_fed_markov_law(num_clients, 0.4, 0.9, 0.01, rng)
    alpha = rng.uniform(0.5, 1.5, num_clients)
    alpha /= alpha.sum()
    tracker = AvailabilityTracker.start(num_clients)
    losses: LossEstimates | None = None
    state = None
    parts: dict[str, list[float]] = {"estimators": [], "get": [], "total": [], "total_cpu": []}
    for r in range(warmup + repeats):
        state = rng.random(num_clients) < markov_activation(pi, lam, state)
        reported = np.where(state, rng.uniform(0.5, 2.0, num_clients) / (1 + 0.1 * r), np.nan)
        c0, t0 = time.process_time(), time.perf_counter()
        tracker = tracker.observe(state)
        pi_est, lam_est = tracker.estimates()
        losses = (
            LossEstimates.start(state, reported)
            if losses is None
            else losses.observe(state, reported, 1.0)
        )
        gap = losses.gap
        t1 = time.perf_counter()
        q = ca_fed_weights(alpha, pi_est, lam_est, gap, kappa2, 0.0)
        t2, c2 = time.perf_counter(), time.process_time()
        if r >= warmup:
            parts["total_cpu"].append(c2 - c0)
            parts["estimators"].append(t1 - t0)
            parts["get"].append(t2 - t1)
            parts["total"].append(t2 - t0)
    out: dict = {"clients": num_clients, "repeats": repeats, "included": int((q > 0).sum())}
    for name, v in parts.items():
        out[f"{name}_median_s"] = float(np.median(v))
        out[f"{name}_min_s"] = float(np.min(v))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[100, 10_000, 100_000])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True, help="folder for selection.json")
    args = ap.parse_args()
    rows = [selection_times(n, args.repeats, args.warmup) for n in args.clients]
    result = {
        "workload": (
            "one CA-Fed selection in estimated mode: tracker update + (pi_hat, lambda_hat) + "
            "F_hat/F_hat* + two get passes (kappa2=1, tau=0); Markov clients g=0.4, "
            f"nu=0.9, eps=0.01; {args.warmup} warm-up rounds, median over "
            f"{args.repeats} rounds"
        ),
        "machine": f"{platform.machine()}, {platform.python_version()}, numpy {np.__version__}",
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ca_fed_selection.json").write_text(json.dumps(result, indent=2))
    for r in rows:
        print(
            f"N={r['clients']:>7,}: {1e3 * r['total_median_s']:8.2f} ms per selection "
            f"(estimators {1e3 * r['estimators_median_s']:.2f} ms, get "
            f"{1e3 * r['get_median_s']:.2f} ms; CPU {1e3 * r['total_cpu_median_s']:.2f} ms; "
            f"{r['included']} included)"
        )


if __name__ == "__main__":
    main()
