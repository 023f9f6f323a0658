"""The benchmark scripts under bench/ on tiny inputs: CA-Fed's (Fig. 4a estimator
errors, selection time) and the many-clients plain loop."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fedram_flwr.clients.models import get_weights
from fedram_flwr.engines.experiment import Experiment
from fedram_flwr.protocol import SERVER_ROUND
from fedram_flwr.registry import scenario_from_dict
from tests.helpers import TINY_GAUSSIAN

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_estimator_error_bench_decreases_with_observations() -> None:
    bench = load_bench("ca_fed_estimators")
    rows = bench.estimator_errors([100, 3000], seeds=2, num_clients=20)
    by = {(r["observations"], r["group"]): r for r in rows}
    for key in ("pi_error_mean", "lambda_error_mean"):
        assert by[(3000, "all")][key] < by[(100, "all")][key]
    assert "| 3,000 | all |" in bench.markdown(rows)


def test_selection_bench_times_one_selection() -> None:
    """The row's shape and order only: how long a selection takes is the bench's to
    report (bench/results), not a test's to bound on a loaded machine."""
    bench = load_bench("ca_fed_selection")
    row = bench.selection_times(200, repeats=2, warmup=3)
    assert row["clients"] == 200 and row["repeats"] == 2 and 0 < row["included"] <= 200
    for part in ("estimators", "get", "total", "total_cpu"):
        assert 0 <= row[f"{part}_min_s"] <= row[f"{part}_median_s"]


def test_many_clients_plain_round_is_the_engines_sgd() -> None:
    """Every workload resolves; one full-batch step of the plain loop is local_sgd's step
    (up to the order of the batch's sum), then the example-weighted average."""
    bench = load_bench("many_clients")
    for name in bench.WORKLOADS:
        s = bench.workload(name, 3, "cpu")
        assert s.rounds == 3 and s.eval_every > 3 and not s.client_metrics
    training = {"lr": 0.1, "local_steps": 1, "batch_size": 1000, "weight_decay": 0.01}
    s = scenario_from_dict({**TINY_GAUSSIAN, "algorithm": {"name": "fedavg"}, "training": training})
    exp = Experiment(s, 0)
    xs = [torch.from_numpy(x) for x in exp.data.client_x]
    ys = [torch.from_numpy(y) for y in exp.data.client_y]
    initial = get_weights(exp.new_model())
    theta = {"weight": torch.from_numpy(initial[0]), "bias": torch.from_numpy(initial[1])}
    plain = bench.plain_round(s, xs, ys, [0, 2], theta, torch.Generator().manual_seed(0), 3)
    expected = 0
    for k in (0, 2):
        arrays, n, _ = exp.client(k).fit(initial, {SERVER_ROUND: 1})
        expected = expected + np.array(arrays[0]) * n / (len(ys[0]) + len(ys[2]))
    np.testing.assert_allclose(plain["weight"].numpy(), expected, rtol=0, atol=1e-6)
    assert not np.allclose(expected, initial[0])


def test_minimal_torch_loop_times_each_round_of_the_engines_clients() -> None:
    bench = load_bench("minimal_torch_loop")
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(20, 784, generator=gen) for _ in range(3)]
    ys = [torch.randint(10, (20,), generator=gen) for _ in range(3)]
    rows = bench.minimal_loop(xs, ys, [[0, 1], [2], []])
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert all(r["round-seconds"] >= 0 for r in rows)


def test_clientapp_cpu_bench_reads_a_process_cpu_and_finds_it_by_name() -> None:
    """What the Deployment bench reads of each ``flwr-clientapp``: a process's CPU
    seconds from /proc (this one's, which has used some), and the processes whose
    command line holds a name (a child waiting on its stdin, by a marker), among the
    descendants of a given process only (other runs' clientapps never count)."""
    bench = load_bench("clientapp_cpu")
    assert 0 < bench.process_cpu(os.getpid()) <= time.process_time() + 1
    marker = "sys.stdin.read()  # clientapp-cpu-bench"
    code = f"import sys; print('ready', flush=True); {marker}"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline() == "ready\n"
        assert bench.clientapp_pids(marker.encode()) == [child.pid]
        assert bench.clientapp_pids(marker.encode(), root=os.getpid()) == [child.pid]
        assert bench.clientapp_pids(marker.encode(), root=child.pid) == [child.pid]
        assert bench.clientapp_pids(marker.encode(), root=1 << 22) == []  # no such ancestor
    finally:
        child.communicate()
    spent = bench.measure([sys.executable, "-c", "pass"])
    assert spent["returncode"] == 0 and spent["clientapp_processes"] == 0


def test_many_clients_table_shows_the_batched_column_and_its_memory() -> None:
    """The batched column, its ratio, its peak memory and what ``auto`` does; rows of an
    earlier run without a batched column print '-'."""
    bench = load_bench("many_clients")
    peaks = {"batched": 0.0}
    with bench.peak_memory(torch.device("cpu"), peaks, "batched", rss=True):
        held = np.ones(16 * 2**20 // 8)  # 16 MB the process did not hold before
    assert held.sum() > 0 and peaks["batched"] >= 0
    row = {
        "workload": "ca-fed-synthetic",
        "clients_per_round": 48.0,
        "plain_s": 0.04,
        "in_process_s": 0.05,
        "batched_s": 0.02,
        "flwr_s": None,
        "in_process_over_plain": 1.25,
        "batched_over_plain": 0.5,
        "flwr_over_plain": None,
        "batched_peak_mb": 12.5,
        "auto": "stacked",
    }
    older = {k: v for k, v in row.items() if not k.startswith("batched") and k != "auto"}
    lines = bench.table([row, {**older, "workload": "fedar-logreg"}]).splitlines()
    assert "| 0.020 | - | 1.25 | 0.50 | - | 12.5 | stacked |" in lines[2]
    assert lines[3].endswith("| 0.050 | - | - | 1.25 | - | - | - | - |")


def test_stacked_sgd_bench_times_both_and_they_agree() -> None:
    bench = load_bench("stacked_sgd")
    row = bench.measure("ca-fed-synthetic", repeats=1)
    assert (row["clients"], row["steps"], row["batch"]) == (100, 2, 32)
    assert row["loop_ms"] > 0 and row["stacked_ms"] > 0
    assert row["max_abs_diff"] < 1e-5  # float32 rounding, the same batches
