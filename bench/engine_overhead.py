"""Engine overhead per round on the Table 1 workload, as ratios measured in one run.

Three ways to do the same rounds of Fed-CVaR-Avg (same RAM draws, same client, same
batches, same local epochs of the Table 1 CNN on Fashion-MNIST):

* ``plain``: a bare PyTorch loop (draw the client, load theta, local SGD, keep theta);
* ``in-process``: ``fedram run`` 's engine (Flower's Server loop, strategy, oracle,
  NumPyClient re-created per call, metrics recording);
* ``flwr``: ``flwr run .`` on Flower's Simulation Engine (optional, ``--flwr``).

On a shared machine whole-loop timings drift with the load of other processes, so the
main figure is paired within each round: the engine's wall time for the round (from one
round's end to the next) against the local SGD time the client measured inside that same
round (``train-seconds``), i.e. exactly the plain loop's work. The overhead is the median
over rounds of ``round / train - 1``. The plain loop's own time per round is reported
beside it (plain and in-process alternate ``--repeats`` times). Evaluation is off
(``eval_every`` > rounds) and the last round, which evaluates, is not timed.

    .venv/bin/python bench/engine_overhead.py --rounds 10 --local-epochs 20 --repeats 3 --flwr
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import yaml

from fedram_flwr.availability import ram_relay
from fedram_flwr.clients.batches import client_rng
from fedram_flwr.clients.models import get_weights, set_weights
from fedram_flwr.clients.training import local_sgd
from fedram_flwr.engines import run_in_process, run_with_flwr
from fedram_flwr.engines.experiment import Experiment, availability_law
from fedram_flwr.registry import algorithm_params, load_scenario, with_overrides
from fedram_flwr.scenario.config import Scenario
from fedram_flwr.strategies.fed_cvar_avg import cvar_gradient_weights

ROOT = Path(__file__).resolve().parent.parent


def plain_loop(s: Scenario, seed: int) -> list[float]:
    """Seconds per round of a bare PyTorch loop doing the engine's local training."""
    exp = Experiment(s, seed)
    rho, p, t = availability_law(s, seed), algorithm_params(s), s.training
    model = exp.new_model()
    theta, tau = get_weights(model), 0.0
    times = []
    for r in range(1, s.rounds):
        start = time.perf_counter()
        (pid,) = ram_relay(rho, 1, seed, r)
        set_weights(model, theta)
        tk = tau

        def step(loss: float) -> float:
            nonlocal tk
            d_theta, d_t = cvar_gradient_weights(loss, tk, p.alpha, p.gamma)
            tk -= p.lr_t * d_t
            return d_theta

        local_sgd(
            model,
            exp.data.client_x[pid],
            exp.data.client_y[pid],
            epochs=t.local_epochs,
            batch_size=t.batch_size,
            lr=t.lr,
            rng=client_rng(seed, r, pid),
            batch_weight=step,
        )
        theta, tau = get_weights(model), tk
        times.append(time.perf_counter() - start)
    return times


def engine_rounds(run_dir: Path) -> list[tuple[float, float]]:
    """(round wall seconds, the client's local-SGD seconds) of each timed round."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in rows if "round-seconds" in r][:-1]
    return [(r["round-seconds"], r["fit-train-seconds"]) for r in timed]


def summarise(name: str, rounds: list[tuple[float, float]]) -> dict[str, float]:
    return {
        f"{name}_s_per_round": statistics.median(r for r, _ in rounds),
        f"{name}_local_sgd_s_per_round": statistics.median(t for _, t in rounds),
        f"{name}_overhead_paired": statistics.median(r / t - 1 for r, t in rounds),
        f"{name}_overhead_ms_per_round": 1000 * statistics.median(r - t for r, t in rounds),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default=str(ROOT / "scenarios/table1_fashion_mnist.yaml"))
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--local-epochs", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flwr", action="store_true", help="also time flwr run (about 1 min more)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()

    s = with_overrides(
        load_scenario(args.scenario),
        {
            "rounds": args.rounds + 1,
            "eval_every": 10 * args.rounds + 10,
            "training.local_epochs": args.local_epochs,
            "sweep": {},
        },
    )
    Experiment(s, args.seed).data  # load once, outside the timings
    plain, inproc = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            plain += plain_loop(s, args.seed)
            with contextlib.redirect_stderr(io.StringIO()):
                out = run_in_process(s, args.seed, Path(tmp) / f"inproc{i}")
            inproc += engine_rounds(out.path)
        result = {
            "workload": f"{s.name}: {s.model.name}, H={args.local_epochs}, batch "
            f"{s.training.batch_size}, {args.rounds} timed rounds x {args.repeats} repeats",
            "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, "
            f"torch {torch.__version__}",
            "plain_s_per_round": statistics.median(plain),
            **summarise("in_process", inproc),
        }
        if args.flwr:
            scen = Path(tmp) / "bench.yaml"
            scen.write_text(yaml.safe_dump({**s.to_dict(), "name": "bench"}))
            t0 = time.perf_counter()
            out = run_with_flwr(scen, args.seed, Path(tmp) / "flwr")
            total = time.perf_counter() - t0
            rounds = engine_rounds(out.path)
            result.update(summarise("flwr", rounds))
            result["flwr_total_s"] = total
            result["flwr_startup_and_last_round_s"] = total - sum(r for r, _ in rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "engine_overhead.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
