"""Helpers the tests share: tiny scenarios, reading run folders, running both engines.

Imported as ``tests.helpers`` (``tests`` is a package; pytest puts the repository root on
``sys.path``); fixtures that wrap these live in ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from flwr.app import ArrayRecord, Error, Message, Metadata, MetricRecord, RecordDict
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.common import (
    DEFAULT_TTL,
    Context,
    GetPropertiesIns,
)
from flwr.server.client_proxy import ClientProxy
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg as MessageFedAvg
from flwr.supercore.task_identity import TaskIdentity
from scipy.io import savemat

from fedram_flwr.availability import OracleClientManager
from fedram_flwr.engines import InProcessClientProxy, node_context, run_in_process, run_with_flwr
from fedram_flwr.engines.flwr.processes import TOKEN_ENV, has_env, process_table, read_proc
from fedram_flwr.protocol import PARTITION_ID, ClientReply
from fedram_flwr.registry import ALGORITHMS, load_scenario, scenario_from_dict
from fedram_flwr.rundir.outputs import RunDirectory
from fedram_flwr.scenario.config import Scenario, ScenarioError
from fedram_flwr.strategies.hyper import declared

SEED = 0
# A Flower-engine run that takes longer has hung: a safety net, never a speed check (a
# loaded CI machine took up to 5 min for runs that take 1 min on a quiet one).
RUN_LIMIT_S = 1800
CA_FED_PI = (0.9, 0.9, 0.6, 0.6, 0.3, 0.3)  # the ca_fed_run fixture's availability

# Fig. 2a shrunk: K=3 users holding one 2-D Gaussian pattern each, RAM rho=(0.5, 0.4, 0.1).
TINY_GAUSSIAN: dict[str, Any] = {
    "name": "tiny-gaussian",
    "rounds": 6,
    "eval_every": 3,
    "seeds": [0],
    "data": {
        "dataset": "gaussian2d",
        "num_clients": 3,
        "num_classes": 3,
        "client_classes": [[0], [1], [2]],
        "frequent_fraction": 0.6667,
        "samples_per_class": 40,
        "cluster_std": 0.6,
    },
    "availability": {"oracle": "ram", "params": {"rho": [0.5, 0.4, 0.1]}},
    "algorithm": {
        "name": "fed-cvar-avg",
        "params": {"alpha": 0.1, "gamma": 0.1, "lr_t": 0.01},
    },
    "training": {"lr": 0.05, "local_epochs": 2, "batch_size": 16},
    "model": {"name": "logreg"},
}


def tiny_ca_fed_dict(
    *,
    pi: tuple[float, ...] = (0.9, 0.9, 0.5, 0.5, 0.2, 0.2),
    rounds: int = 3,
    eval_every: int = 3,
    local_steps: int = 2,
) -> dict[str, Any]:
    """CA-Fed's setup shrunk: 6 LEAF Synthetic clients (3 classes, 5 features), two-state
    Markov availability with stationary ``pi`` and lambda alternating 0 / 0.8, CA-Fed with
    kappa_bar^2 = 1e-3 (it excludes clients) and eta_bar = 0.5, a ridge logistic model."""
    return {
        "name": "tiny-ca-fed",
        "rounds": rounds,
        "eval_every": eval_every,
        "seeds": [0],
        "data": {
            "dataset": "synthetic",
            "num_clients": 6,
            "num_classes": 3,
            "synthetic_dim": 5,
            "frequent_fraction": 1.0,
        },
        "availability": {
            "oracle": "markov",
            "params": {"pi": list(pi), "lam": [0.0, 0.8, 0.0, 0.8, 0.0, 0.8]},
        },
        "algorithm": {"name": "ca-fed", "params": {"kappa2": 1e-3, "server_lr": 0.5}},
        "training": {
            "lr": 0.1,
            "local_steps": local_steps,
            "batch_size": 16,
            "weight_decay": 0.01,
        },
        "model": {"name": "logreg"},
    }


def final_arrays(run: RunDirectory) -> list[np.ndarray]:
    with np.load(run.path / "final_model.npz") as npz:
        return [npz[f"arr_{i}"] for i in range(len(npz.files))]


def without_timings(value: Any) -> Any:
    """``value`` (metrics rows, a summary) without its wall-clock fields (``*seconds``)."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not k.endswith("seconds")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


FORK_RUNNER = """
import json, os, sys
exec(sys.argv[1])  # what the jobs share: imports (paid once), definitions
ends = []
for job in json.loads(sys.argv[2]):
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            exec(job)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            import traceback; traceback.print_exc()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
    status = os.waitpid(pid, 0)[1]
    ends.append(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
print(json.dumps(ends))
"""


def run_forked(shared: str, jobs: list[str]) -> tuple[list[int], str]:
    """Run Python ``shared`` once in a fresh interpreter, then each of ``jobs`` in a child
    forked from it, one after the other: jobs that need a process of their own (a signal
    ends it) share one interpreter start. Returns each child's exit code (minus the
    signal that ended it) and the interpreter's stderr. The process group is killed if
    anything hangs."""
    proc = subprocess.Popen(
        [sys.executable, "-c", FORK_RUNNER, shared, json.dumps(jobs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its process group: the script and its children
    )
    try:
        out, err = proc.communicate(timeout=RUN_LIMIT_S)
    finally:
        if proc.poll() is None:  # a hang: the script and the child it waits for
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.splitlines()[-1]), err


# Each job's checkpoint writer SIGKILLs its own process right before or after writing
# round ``kill_round``'s checkpoint.
KILL_AT_CHECKPOINT = """
import os, signal
from fedram_flwr.engines import run_in_process
from fedram_flwr.registry import load_scenario
from fedram_flwr.rundir import checkpoint

write = checkpoint.write_checkpoint

def run_and_die(path, run_dir, every, kill_round, when):
    def write_and_die(folder, saved):
        if saved.round == kill_round and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        write(folder, saved)
        if saved.round == kill_round and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
    checkpoint.write_checkpoint = write_and_die
    run_in_process(load_scenario(path), 0, run_dir, checkpoint_every=every)
"""


def run_killed(jobs: list[tuple[Path, Path, int, int, str]]) -> None:
    """Run each (scenario file, run folder, K, r, "before" | "after") in-process with a
    checkpoint every K rounds, SIGKILLed right before or after round r's checkpoint is
    written (:func:`run_forked`: one interpreter start for all); asserts each was
    killed."""
    calls = [
        f"run_and_die({str(path)!r}, {str(folder)!r}, {k}, {r}, {when!r})"
        for path, folder, k, r, when in jobs
    ]
    ends, err = run_forked(KILL_AT_CHECKPOINT, calls)
    assert ends == [-signal.SIGKILL] * len(jobs), err[-3000:]


def relayed(run: RunDirectory) -> list[tuple[int, list[int]]]:
    return [(row["round"], row["relayed"]) for row in run.read_metrics() if row["round"] > 0]


FLOWER_PROCESS_NAMES = (
    "bin/flwr ",
    "flower-superlink",
    "patient_superlink",  # flower-superlink as the project starts it
    "flower-superexec",
    "flower-supernode",
    "flwr-simulation",
    "flwr-serverapp",
    "flwr-clientapp",
    "raylet",
    "gcs_server",
    "ray::",
    "ray/dashboard",
    "ray/_private",
    "ray/autoscaler",
)
"""Command-line fragments of Flower's and Ray's processes (for ``ps`` checks)."""


def flower_processes() -> dict[int, str]:
    """``ps``: pid -> command of every live Flower / Ray process on the machine."""
    out = subprocess.run(
        ["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    found: dict[int, str] = {}
    for line in out.splitlines():
        pid, stat, args = (line.split(None, 2) + ["", ""])[:3]
        if not stat.startswith("Z") and any(name in args for name in FLOWER_PROCESS_NAMES):
            found[int(pid)] = args
    return found


def surviving_processes(run_dir: str | Path) -> dict[int, str]:
    """Processes a finished ``flwr run`` started that are still alive (pid -> command):
    the ones ``flwr-logs/processes.json`` records (same pid and start time) and any
    carrying its token. Empty when the run cleaned up after itself."""
    record = json.loads((Path(run_dir) / "flwr-logs" / "processes.json").read_text())
    alive: dict[int, str] = {}
    for p in record["processes"]:
        info = read_proc(p["pid"])
        if info is not None and info.start == p["start"] and info.state != "Z":
            alive[info.pid] = info.cmd
    return alive | token_processes(record["token"])


def token_processes(token: str) -> dict[int, str]:
    """Live processes (pid -> command) carrying ``token`` in their environment
    (``FEDRAM_FLWR_RUN_TOKEN``: a flwr run's, a local Ray cluster's)."""
    return {
        pid: info.cmd
        for pid, info in process_table().items()
        if info.state != "Z" and has_env(pid, TOKEN_ENV, token)
    }


def started_by(runs: list[RunDirectory]) -> tuple[set[str], dict[int, int]]:
    """Tokens and tracked (pid -> start time) the flwr runs recorded."""
    tokens, tracked = set(), {}
    for run in runs:
        record = json.loads((run.path / "flwr-logs" / "processes.json").read_text())
        tokens.add(record["token"])
        tracked.update({p["pid"]: p["start"] for p in record["processes"]})
    return tokens, tracked


def assert_nothing_left(before: dict[int, str], runs: list[RunDirectory]) -> None:
    """No process the flwr ``runs`` started survives them (by token, tracked pid and a
    diff of the Flower/Ray processes against ``before``)."""
    tokens, tracked = started_by(runs)
    new = {pid: cmd for pid, cmd in flower_processes().items() if pid not in before}
    ours = {
        pid: cmd
        for pid, cmd in new.items()
        if any(has_env(pid, TOKEN_ENV, t) for t in tokens)
        or ((info := read_proc(pid)) is not None and tracked.get(pid) == info.start)
    }
    assert not ours, f"Flower/Ray processes left by the test: {ours}"
    assert tracked, "the flwr runs recorded no processes"
    alive = {
        pid: info.cmd
        for pid, start in tracked.items()
        if (info := read_proc(pid)) is not None and info.start == start and info.state != "Z"
    }
    assert not alive, f"processes started by the flwr runs still alive: {alive}"


def run_both_engines(
    scenarios: dict[str, Path], out: Path, seed: int = SEED
) -> tuple[dict[str, RunDirectory], dict[str, RunDirectory]]:
    """Run each scenario in-process and under ``flwr run`` (those in parallel, each with
    its own SuperLink); check that no process the flwr runs started survives them."""
    before = flower_processes()
    with ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
        futures = {
            name: pool.submit(run_with_flwr, path, seed, out / f"flwr-{name}", timeout=RUN_LIMIT_S)
            for name, path in scenarios.items()
        }
        local = {
            name: run_in_process(load_scenario(path), seed, out / f"local-{name}")
            for name, path in scenarios.items()
        }
        flwr = {name: future.result() for name, future in futures.items()}
    assert_nothing_left(before, list(flwr.values()))
    return local, flwr


# ------------------------------------------------------------------ availability
# Eight Markov chains covering the law's corners: rare/common/even pi, lambda negative,
# zero (Bernoulli) and strongly positive.
MARKOV_PI = np.array([0.1, 0.1, 0.5, 0.5, 0.5, 0.9, 0.9, 0.3])
MARKOV_LAM = np.array([0.0, 0.9, -0.5, 0.0, 0.9, 0.0, 0.9, 0.5])


def scenario_with(scenario_dict: dict, oracle: str, params: dict, **data: Any) -> Scenario:
    """The tiny scenario (K = 3, classes [0], [1], [2]) with this oracle; other data
    sizes use the rare-pattern split unless ``client_classes`` is given."""
    if "num_clients" in data:
        data.setdefault("client_classes", None)
    scenario_dict["availability"] = {"oracle": oracle, "params": params}
    scenario_dict["data"].update(data)
    return scenario_from_dict(scenario_dict)


class PropertiesClient(NumPyClient):
    """A client that only reports its partition id (what an oracle asks)."""

    def __init__(self, partition_id: int) -> None:
        self.partition_id = partition_id

    def get_properties(self, config):
        return {PARTITION_ID: self.partition_id}


def client_fn(context: Context):
    return PropertiesClient(int(context.node_config["partition-id"])).to_client()


def register_clients(manager: OracleClientManager, k: int) -> None:
    """Register partitions 0..k-1 under node ids unrelated to partition ids (Flower's
    engines use random node ids), in reverse order."""
    for pid in reversed(range(k)):
        cid = str(1_000_003 * (pid + 7) % 99_991)
        manager.register(InProcessClientProxy(cid, client_fn, node_context(pid, k, {})))


def partition_of(proxy: ClientProxy) -> int:
    res = proxy.get_properties(GetPropertiesIns(config={}), timeout=None, group_id=None)
    return int(res.properties[PARTITION_ID])


def lag1_autocorrelation(x: np.ndarray) -> np.ndarray:
    """Sample lag-1 autocorrelation of every column (the usual ACF estimator)."""
    d = x.astype(float) - x.mean(axis=0)
    return (d[:-1] * d[1:]).sum(axis=0) / (d**2).sum(axis=0)


def chain_standard_errors(pi: np.ndarray, lam: np.ndarray, t: int) -> tuple[np.ndarray, ...]:
    """Asymptotic standard errors, over t rounds of a stationary two-state chain, of
    (a) the active frequency: var = pi (1 - pi) / t x (1 + lam) / (1 - lam);
    (b) the lag-1 autocorrelation, which equals P_hat(1->1) - P_hat(0->1) up to O(1/t)
    edge terms: two binomial proportions over t pi and t (1 - pi) transitions."""
    p11, p01 = lam + (1 - lam) * pi, (1 - lam) * pi
    se_freq = np.sqrt(pi * (1 - pi) / t * (1 + lam) / (1 - lam))
    se_r1 = np.sqrt(p11 * (1 - p11) / (t * pi) + p01 * (1 - p01) / (t * (1 - pi)))
    return se_freq, se_r1


def assert_matches_chain(x: np.ndarray, pi: np.ndarray, lam: np.ndarray) -> None:
    """Columns of x look like stationary chains (pi, lam): within 5 standard errors
    (a false alarm is below 1e-5 per client for a normal estimate)."""
    t = len(x)
    se_freq, se_r1 = chain_standard_errors(pi, lam, t)
    freq_err = np.abs(x.mean(axis=0) - pi)
    assert np.all(freq_err < 5 * se_freq), (x.mean(axis=0), pi, se_freq)
    r1_err = np.abs(lag1_autocorrelation(x) - lam)
    assert np.all(r1_err < 5 * se_r1 + 2 / t), (lag1_autocorrelation(x), lam, se_r1)


# ------------------------------------------------------------------ scenarios
def scenario_error(raw: dict[str, Any], make: Any = scenario_from_dict) -> str:
    """The ScenarioError message ``make(raw)`` raises (default: the validated loader)."""
    with pytest.raises(ScenarioError) as info:
        make(raw)
    return str(info.value)


def write_run(
    root: Path,
    label: str,
    seed: int,
    rows: list[dict[str, Any]],
    *,
    summary: dict[str, Any] | None = None,
    status: str = "complete",
    variant: dict[str, Any] | None = None,
) -> RunDirectory:
    """A run folder ``root/label/seed<seed>`` written by hand: ``rows`` as metrics (the
    rounds they skip, from 0 on, as rows of their round alone, as a run's rounds without
    an evaluation: a whole run has a row for every round), a summary whose ``final`` and
    ``tail-mean`` are the last row (unless given), a fashion-mnist scenario with the seed,
    a (dummy) final model, and ``variant.json`` when ``variant`` (the swept
    {field: value}) is given."""
    run = RunDirectory(root / label / f"seed{seed}")
    run.path.mkdir(parents=True)
    given = {row["round"]: row for row in rows}
    for r in range(max(given) + 1):
        run.append_metrics(given.get(r, {"round": r}))
    if summary is None:
        summary = {"rounds": rows[-1]["round"], "final": rows[-1], "tail-mean": rows[-1]}
    run.write("summary.json", json.dumps(summary))
    run.write("scenario.yaml", yaml.safe_dump({"data": {"dataset": "fashion-mnist"}, "seed": seed}))
    np.savez(run.path / "final_model.npz", np.zeros(2, np.float32))  # a complete run has one
    run.set_status(status)
    if variant is not None:
        run.write_variant(label, variant)
    return run


def write_cifar10(root: Path, per_batch: int = 20) -> np.ndarray:
    """A tiny CIFAR-10 in its python format under ``root``: five training batches and a
    test batch; returns the first batch's raw data."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    first = None
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [i % 10 for i in range(per_batch)]
        with (folder / name).open("wb") as fh:
            pickle.dump({"data": data, "labels": labels, "batch_label": name}, fh)
        first = data if first is None else first
    with (folder / "batches.meta").open("wb") as fh:
        pickle.dump({"label_names": [f"class{c}" for c in range(10)]}, fh)
    return first


def write_svhn(folder: Path, n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """A tiny SVHN (``train_32x32.mat`` and ``test_32x32.mat``, the same ``n`` images);
    returns the raw ``X`` and ``y``."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
    y = (np.arange(n) % 10 + 1).astype(np.uint8).reshape(-1, 1)  # 10 is the digit 0
    for name in ("train_32x32.mat", "test_32x32.mat"):
        savemat(folder / name, {"X": x, "y": y})
    return x, y


def write_cinic10(folder: Path, per_class: int = 2) -> dict[str, list[np.ndarray]]:
    """A tiny CINIC-10 in its published layout under ``folder``: ``train/``, ``valid/``
    and ``test/``, each with the ten class folders of ``per_class`` 32x32 RGB PNGs (the
    first file of ``test/bird`` greyscale, as some CINIC-10 images are). Returns each
    split's images (H, W, 3 uint8, greyscale repeated) in label, then file-name order."""
    from PIL import Image

    from fedram_flwr.data.cinic10 import CINIC10_CLASSES

    rng = np.random.default_rng(2)
    written: dict[str, list[np.ndarray]] = {}
    for split in ("train", "valid", "test"):
        written[split] = []
        for name in CINIC10_CLASSES:
            (folder / split / name).mkdir(parents=True)
            for k in range(per_class):
                path = folder / split / name / f"n0{k}_{name}.png"  # sorted = written order
                if split == "test" and name == "bird" and k == 0:
                    grey = rng.integers(0, 256, (32, 32), dtype=np.uint8)
                    Image.fromarray(grey, mode="L").save(path)
                    written[split].append(np.repeat(grey[:, :, None], 3, axis=2))
                else:
                    rgb = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                    Image.fromarray(rgb, mode="RGB").save(path)
                    written[split].append(rgb)
    return written


def random_rcfl_instance(rng: np.random.Generator, n: int):
    """Random RC-FL losses, weights p on the simplex and alpha_i in [p_i, 1]."""
    losses = rng.exponential(1.0, n)
    p = rng.dirichlet(np.ones(n))
    alpha = rng.uniform(p, 1.0)  # alpha_i in [p_i, 1]
    return losses, p, alpha


# Quadratic clients f_i(y) = a_i / 2 (y - b_i)^2 per coordinate: grad a_i (y - b_i); the
# optimum of the mean is sum a_i b_i / sum a_i.
QUAD_A = np.array([1.0, 4.0, 0.5])
QUAD_B = np.array([[2.0, -1.0], [-1.0, 3.0], [5.0, 0.0]])


def quad_grad(i: int, y: np.ndarray) -> np.ndarray:
    """grad f_i(y) = a_i (y - b_i) of the quadratic clients ``QUAD_A``, ``QUAD_B``."""
    return QUAD_A[i] * (y - QUAD_B[i])


def scaffold_local_steps(
    i: int, x: np.ndarray, c_i, c, k: int, lr: float
) -> tuple[np.ndarray, list]:
    """SCAFFOLD Alg. 1 line 10, K times, on quadratic client ``i``; returns y_i and the
    gradients met on the way."""
    y, grads = x.copy(), []
    for _ in range(k):
        grads.append(quad_grad(i, y))
        y = y - lr * (grads[-1] - c_i + c)
    return y, grads


# ------------------------------------------------- every algorithm's strategy, tiny
N = 2
MODEL = [np.zeros((2, 2), np.float32), np.zeros(2, np.float32)]
ALPHA = np.array([0.5, 0.5])
VECTOR = dict(num_clients=N, lr=0.1)


TINY_RUN = {"num-clients": N, "training-lr": 0.1, "seed": 0, "data-shares": ALPHA}
"""What a tiny run gives the cores (:data:`fedram_flwr.registry.params.RUN_VALUES`)."""

TINY = {  # only what differs from the declared defaults, to keep the cases small
    "fed-cvar-avg": dict(alpha=0.5, lr_t=0.01),
    "fedstale": dict(beta=0.25),
    "fedstale-active": dict(beta=0.25),
    "fedawe": dict(server_lr=1.5),
    "fedavg-s": dict(max_clients=1),
    "fedau": dict(cutoff=5),
    "amplified-scaffold": dict(period=2, amplification=1.5),
    "f3ast": dict(clients_per_round=1),
    "rfedfair": dict(alpha=0.5),
    "qffl": dict(q_param=1.0, qffl_learning_rate=0.1),
}


def tiny_strategy(name: str) -> partial:
    """Algorithm ``name``'s legacy strategy with tiny hyper-parameters (no model yet): the
    registry's class, the run's values from :data:`TINY_RUN`, then :data:`TINY`."""
    spec = ALGORITHMS[name]
    core = getattr(spec.strategy, "core_type", None)
    given = {}
    for f, h in declared(core) if core is not None else []:
        if (h.run or h.run_default) in TINY_RUN:
            given[f.name] = TINY_RUN[h.run or h.run_default]
    return partial(spec.strategy, **given, **TINY.get(name, {}))


STRATEGIES = {name: tiny_strategy(name) for name in ALGORITHMS}
"""name -> the legacy strategy of every registered algorithm, tiny (no model yet)."""


def vector_reply(pid: int, vector: np.ndarray, num_examples: int = 10) -> ClientReply:
    """A core's view of client ``pid`` returning the one-array model ``vector`` (float32)."""
    model = np.asarray(vector, np.float32)
    return ClientReply(pid, num_examples, {PARTITION_ID: pid}, lambda: [model.copy()])


# ------------------------------------------------------ a Message-API grid, in tests
Handler = Callable[[Message], RecordDict | Error | None]


class StubGrid(Grid):
    """A Flower ``Grid`` for strategy tests: ``nodes`` maps node ids to a handler that
    answers a message in this thread (a reply's content, an ``Error``, or ``None``: no
    reply, as a node that misses the timeout). ``sent`` keeps every message pushed."""

    def __init__(self, nodes: dict[int, Handler]) -> None:
        self.nodes = nodes
        self.sent: list[Message] = []

    def set_run(self, run: Any) -> None:
        raise NotImplementedError

    @property
    def run(self) -> Any:
        raise NotImplementedError

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        raise NotImplementedError

    def get_node_ids(self) -> Iterable[int]:
        return list(self.nodes)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        raise NotImplementedError

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        raise NotImplementedError

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        replies = []
        for message in messages:
            self.sent.append(message)
            answer = self.nodes[message.metadata.dst_node_id](message)
            if answer is not None:
                replies.append(Message(answer, reply_to=message))
        return replies


@contextmanager
def server_identity(run_id: int = 1) -> Iterator[None]:
    """The identity Flower's ServerApp process has (run, node, task ids), which creating
    a ``Message`` reads; restored on exit."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, 0, 1
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


# A Message-API ClientApp with known updates, and Flower's own Message-API FedAvg over it.
EXAMPLES = (1, 1, 2)  # n_p: FedAvg's weights n_p / 4 are exact in binary
STEPS = (1.0, 2.0, 3.0)  # d_p
CALLS = "calls"


def counting_app(fail: tuple[int, int] | None = None) -> ClientApp:
    """Partition p returns x + k d_p (every array x) in its k-th training call (k kept in
    ``context.state``); with ``fail = (p, r)`` partition p raises in server round r, after
    it has counted the call."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])
        calls = context.state.get(CALLS, MetricRecord({CALLS: 0}))
        k = int(calls[CALLS]) + 1
        context.state[CALLS] = MetricRecord({CALLS: k})
        server_round = int(msg.content["config"]["server-round"])
        if fail == (pid, server_round):
            raise RuntimeError(f"partition {pid} fails in round {server_round}")
        arrays = msg.content["arrays"].to_numpy_ndarrays()
        msg.content["arrays"] = ArrayRecord([np.zeros_like(x) for x in arrays])  # a copy
        metrics = MetricRecord({"num-examples": EXAMPLES[pid], "partition-id": pid})
        update = ArrayRecord([x + k * STEPS[pid] for x in arrays])
        return Message(
            RecordDict({"arrays": update, "metrics": metrics}),
            reply_to=msg,
        )

    return app


def message_fedavg(num_nodes: int) -> MessageFedAvg:
    """Flower's unchanged Message-API FedAvg training every node, no federated evaluation."""
    return MessageFedAvg(fraction_evaluate=0.0, min_available_nodes=num_nodes)


def instruction_message(
    content: RecordDict, message_type: str = "train", dst_node_id: int = 7
) -> Message:
    """A server -> node Message as a Grid delivers it (its metadata set by hand: outside
    a running app Flower's own constructor has no run id)."""
    metadata = Metadata(
        run_id=1,
        message_id="instruction-1",
        src_node_id=0,
        dst_node_id=dst_node_id,
        reply_to_message_id="",
        group_id="1",
        created_at=time.time(),
        ttl=DEFAULT_TTL,
        message_type=message_type,
    )
    return Message(content, metadata=metadata)


def node_with(partition_id: int | None, run_config: dict | None = None) -> Context:
    """A node's Context with ``partition-id`` in its node_config (none when None)."""
    node_config = {} if partition_id is None else {PARTITION_ID: partition_id}
    return Context(
        run_id=1,
        node_id=7,
        node_config=node_config,
        state=RecordDict(),
        run_config=run_config or {},
    )
