"""Seconds per round with many light clients: the engines against a plain PyTorch loop.

Four workloads (evaluation off; seed 0):

* ``fedar-logreg``: FedAR on Fashion-MNIST (``scenarios/fedar_fashion_mnist.yaml``, p_min
  0.1): 100 logistic-regression clients, ~52 available a round, K=5 steps of batch 64;
* ``ca-fed-synthetic``: CA-Fed on LEAF Synthetic, N=100 (``scenarios/ca_fed_synthetic.yaml``);
* ``cnn-100``: the same FedAR setting with the LeNet-5 CNN (``model.name: cnn``), 10 local
  steps of batch 128, Dirichlet(0.1) labels;
* ``table1-cnn``: Fed-CVaR-Avg's Table 1 (``scenarios/table1_fashion_mnist.yaml``, alpha
  = gamma = 0.1): the CNN, H=20 local epochs, one relayed client a round.

Per workload, alternating ``--repeats`` times in one process: ``in_process_s`` (``fedram
run`` 's engine), ``batched_s`` (the same engine with ``training.batched: on``: each
round's clients' SGD stacked, :mod:`fedram_flwr.clients.batched`; FedAR's and CA-Fed's
rounds with no client call, :mod:`fedram_flwr.clients.stacked_round`), ``plain_s`` (the
reference: for each client that trained in that
round of the engine's run, a fresh torch model loaded with the global weights, the same
number of mini-batch steps of the same batch size with cross-entropy and a hand-written
SGD step with weight decay, the client's data already tensors, then the example-weighted
average of the models) and ``flwr_s`` (Flower's Simulation Engine, ``--skip-flwr`` to
leave it out). ``batched_peak_mb``: on a GPU the peak of ``torch.cuda.max_memory_allocated``
over the batched runs (``in_process_peak_mb`` beside it); on the CPU the growth of the
process's peak resident set (``ru_maxrss``) during the first batched run, which runs after
the per-client one (0: it stayed under the peak before). ``auto`` names what
``training.batched: auto`` does with the workload (``stacked`` or ``loop``). Each figure is
the median of the per-round wall times of rounds
2..R-1 (round 1 warms up, the last evaluates) over all repeats; ``flwr_s`` excludes the
engine's start-up; the in-process runs checkpoint as often as a run of the scenario's own
length would (:func:`full_length_checkpoints`), not after every one of the R rounds.
The plain loop trains the clients the engine's round trained (its ``relayed`` list), so
both do the same arithmetic (the plain loop leaves out what is not SGD on the model:
Fed-CVaR-Avg's scalar t, CA-Fed's estimators).

    OMP_NUM_THREADS=1 .venv/bin/python bench/many_clients.py --rounds 5 --repeats 2
    .venv/bin/python bench/many_clients.py --device cuda --rounds 12 --repeats 3  # a GPU
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn
from torch.nn import functional as F

from fedram_flwr.clients.batches import batches_per_pass
from fedram_flwr.clients.models import LeNetCNN, get_weights, resolve_device
from fedram_flwr.engines import run_in_process, run_with_flwr
from fedram_flwr.engines.batching import batching_mode
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.registry import load_scenario, with_overrides
from fedram_flwr.rundir import default_checkpoint_every
from fedram_flwr.scenario.config import Scenario

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "results" / "bench_many_clients"
FEDAR = {"algorithm.name": "fedar", "availability.p_min": 0.1}
WORKLOADS: dict[str, tuple[str, dict[str, Any]]] = {
    "fedar-logreg": ("scenarios/fedar_fashion_mnist.yaml", FEDAR),
    "ca-fed-synthetic": ("scenarios/ca_fed_synthetic.yaml", {"algorithm.name": "ca-fed"}),
    "cnn-100": (
        "scenarios/fedar_fashion_mnist.yaml",
        {
            **FEDAR,
            "model.name": "cnn",
            "data.partition": "dirichlet",
            "data.dirichlet_concentration": 0.1,
            "training.local_steps": 10,
            "training.batch_size": 128,
        },
    ),
    "table1-cnn": (
        "scenarios/table1_fashion_mnist.yaml",
        {"algorithm.alpha": 0.1, "algorithm.gamma": 0.1},
    ),
}


def workload(name: str, rounds: int, device: str) -> Scenario:
    path, overrides = WORKLOADS[name]
    return with_overrides(
        load_scenario(ROOT / path),
        {
            **overrides,
            "rounds": rounds,
            "eval_every": 10 * rounds,
            "client_metrics": False,
            "training.device": device,
        },
    )


def timed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of rounds 2..R-1 (see the module docstring)."""
    rows = [r for r in rows if r["round"] > 0]
    return rows[1:-1]


def plain_model(name: str, in_features: int, num_classes: int) -> nn.Module:
    """A fresh torch model, as a plain script builds one (unseeded)."""
    if name == "logreg":
        return nn.Linear(in_features, num_classes)
    return LeNetCNN(num_classes)


def plain_round(
    s: Scenario,
    xs: list[torch.Tensor],
    ys: list[torch.Tensor],
    clients: list[int],
    theta: dict[str, torch.Tensor],
    gen: torch.Generator,
    num_classes: int,
) -> dict[str, torch.Tensor]:
    """One round of the plain loop: local SGD on each client, the weighted average."""
    t = s.training
    total = {k: torch.zeros_like(v) for k, v in theta.items()}
    weight = sum(len(ys[k]) for k in clients)
    for k in clients:
        x, y = xs[k], ys[k]
        model = plain_model(s.model.name, x[0].numel(), num_classes)
        model.to(x.device).load_state_dict(theta)
        params = list(model.parameters())
        per_pass = batches_per_pass(len(y), t.batch_size, t.drop_last)
        steps = t.local_steps or t.local_epochs * per_pass
        batches = [
            idx
            for _ in range(math.ceil(steps / per_pass))
            for idx in torch.randperm(len(y), generator=gen)
            .to(x.device)
            .split(t.batch_size)[:per_pass]
        ][:steps]
        for idx in batches:
            loss = F.cross_entropy(model(x[idx]), y[idx])
            for p in params:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p.add_(p.grad.add(p, alpha=t.weight_decay), alpha=-t.lr)
        with torch.no_grad():
            for key, v in model.state_dict().items():
                total[key].add_(v, alpha=len(y) / weight)
    return total


def plain_loop(s: Scenario, relayed: list[list[int]], device: torch.device) -> list[dict[str, Any]]:
    """Seconds per round of the plain loop over the engine's rounds (rows like the
    engine's: ``round``, ``round-seconds``)."""
    exp = Experiment(s, 0)
    d = exp.data
    flat = s.model.name == "logreg"
    xs = [torch.from_numpy(x).flatten(1) if flat else torch.from_numpy(x) for x in d.client_x]
    xs = [x.to(device) for x in xs]
    ys = [torch.from_numpy(y).to(device) for y in d.client_y]
    model = plain_model(s.model.name, xs[0][0].numel(), d.num_classes).to(device)
    initial = get_weights(exp.new_model())
    theta = {k: torch.from_numpy(w).to(device) for k, w in zip(model.state_dict(), initial)}
    gen = torch.Generator().manual_seed(0)
    rows = []
    for r, clients in enumerate(relayed, start=1):
        start = time.perf_counter()
        if clients:
            theta = plain_round(s, xs, ys, clients, theta, gen, d.num_classes)
        if device.type == "cuda":
            torch.cuda.synchronize()
        rows.append({"round": r, "round-seconds": time.perf_counter() - start})
    return rows


def full_length_checkpoints(name: str) -> int:
    """The checkpoint cadence of the workload's scenario at its own length (rounds / 20:
    every 10 rounds for CA-Fed's 200, 15 for FedAR's 300), which the timed runs keep:
    at ``--rounds`` 12 the engine's default would checkpoint (two fsyncs) after every
    round, a cost a full-length run pays once in K rounds (measured on the shared
    machine: ~25 ms a round of CA-Fed Synthetic's ~75 ms under other processes' disk
    writes)."""
    return default_checkpoint_every(load_scenario(ROOT / WORKLOADS[name][0]).rounds)


def in_process(s: Scenario, folder: Path, checkpoint_every: int | None = None) -> list[dict]:
    with contextlib.redirect_stderr(io.StringIO()):
        return run_in_process(s, 0, folder, checkpoint_every=checkpoint_every).read_metrics()


def simulation(s: Scenario, folder: Path) -> list[dict[str, Any]]:
    scenario_file = folder.with_suffix(".yaml")
    scenario_file.write_text(yaml.safe_dump({**s.to_dict(), "name": "bench", "seeds": [0]}))
    return run_with_flwr(scenario_file, 0, folder, timeout=3600).read_metrics()


def measure(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One workload: the engines and the plain loop alternating ``args.repeats`` times."""
    s = workload(name, args.rounds, args.device)
    device = resolve_device(args.device)
    Experiment(s, 0).data  # load (and cache) the data outside the timings
    batched = with_overrides(s, {"training.batched": "on"})
    times: dict[str, list[float]] = {"plain": [], "in_process": [], "batched": [], "flwr": []}
    peaks: dict[str, float] = {"in_process": 0.0, "batched": 0.0}
    relayed: list[list[int]] = []
    for rep in range(args.repeats):
        every = full_length_checkpoints(name)
        with peak_memory(device, peaks, "in_process"):
            rows = in_process(s, tmp / f"{name}-in-process-{rep}", every)
        relayed = [r.get("relayed", []) for r in rows if r["round"] > 0]
        times["in_process"] += [r["round-seconds"] for r in timed(rows)]
        with peak_memory(device, peaks, "batched", rss=rep == 0):
            rows = in_process(batched, tmp / f"{name}-batched-{rep}", every)
        if [r.get("relayed", []) for r in rows if r["round"] > 0] != relayed:
            raise RuntimeError(f"{name}: the batched run trained other clients")
        times["batched"] += [r["round-seconds"] for r in timed(rows)]
        times["plain"] += [r["round-seconds"] for r in timed(plain_loop(s, relayed, device))]
        if not args.skip_flwr:
            rows = simulation(s, tmp / f"{name}-flwr-{rep}")
            times["flwr"] += [r["round-seconds"] for r in timed(rows)]
    auto = batching_mode(Experiment(with_overrides(s, {"training.batched": "auto"}), 0))
    result: dict[str, Any] = {
        "workload": name,
        "clients_per_round": statistics.mean(len(c) for c in relayed[1:-1]),
        "timed_rounds": len(times["plain"]),
        "auto": "loop" if auto is None else "stacked",
        "batched_peak_mb": round(peaks["batched"], 1),
    }
    if device.type == "cuda":
        result["in_process_peak_mb"] = round(peaks["in_process"], 1)
    for key, values in times.items():
        result[f"{key}_s"] = statistics.median(values) if values else None
    for key in ("in_process", "batched", "flwr"):
        value = result[f"{key}_s"]
        result[f"{key}_over_plain"] = None if value is None else value / result["plain_s"]
    print(json.dumps(result), flush=True)
    return result


@contextlib.contextmanager
def peak_memory(device: torch.device, peaks: dict[str, float], key: str, rss: bool = False):
    """Raise ``peaks[key]`` (MB) to the peak memory of the block: the GPU's allocated
    peak, or with ``rss`` on the CPU the growth of the process's peak resident set."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    yield
    if device.type == "cuda":
        peaks[key] = max(peaks[key], torch.cuda.max_memory_allocated() / 2**20)
    elif rss:
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        peaks[key] = max(peaks[key], grown / 1024)


def table(results: list[dict[str, Any]]) -> str:
    def cell(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    lines = [
        "| workload | clients / round | plain s | in-process s | batched s | Simulation s "
        "| in-process / plain | batched / plain | Simulation / plain | batched peak MB "
        "| auto |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['workload']} | {r['clients_per_round']:.1f} | {r['plain_s']:.3f} | "
            f"{r['in_process_s']:.3f} | {cell(r.get('batched_s'), '.3f')} | "
            f"{cell(r['flwr_s'], '.3f')} | {r['in_process_over_plain']:.2f} | "
            f"{cell(r.get('batched_over_plain'), '.2f')} | "
            f"{cell(r['flwr_over_plain'], '.2f')} | {cell(r.get('batched_peak_mb'), '.1f')} | "
            f"{r.get('auto', '-')} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--rounds", type=int, default=5, help="rounds per run (>= 3)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    ap.add_argument("--skip-flwr", action="store_true", help="leave out the Simulation Engine")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.rounds < 3:
        ap.error("--rounds: at least 3 (round 1 and the last are not timed)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the in-process engine runs
    load = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results = [measure(name, args, Path(tmp)) for name in args.workloads]
    finally:
        torch.set_num_threads(threads)
    conditions = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, device {args.device}"
        + (f" ({torch.cuda.get_device_name()})" if torch.cuda.is_available() else ""),
        "load_average": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)},
        "rounds": args.rounds,
        "repeats": args.repeats,
    }
    path = args.out / "many_clients.json"
    # Workloads measured by earlier invocations stay, each with its own conditions.
    kept = json.loads(path.read_text())["results"] if path.is_file() else []
    kept = [r for r in kept if r["workload"] not in args.workloads]
    results = sorted(
        kept + [{**r, **conditions} for r in results],
        key=lambda r: list(WORKLOADS).index(r["workload"]),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"results": results}, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
