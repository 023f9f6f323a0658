"""Run directories and the strategy wrapper that records every round.

A run directory holds ``scenario.yaml`` (resolved, with the seed), ``status.json``
(``running`` until the last round is recorded, then ``complete``; ``failed`` with the
error when the engine saw one), ``metrics.jsonl`` (one row per round), ``summary.json``,
``availability.csv`` (the oracle's round x client 0/1 matrix, replayable with the
``trace`` oracle), ``variant.json`` (the variant's label and swept fields, written by the
CLI), ``plot_inputs.npz`` (what one run's figures need beyond its metrics: the oracle's
hidden law and, for 2-D data, the decision-boundary grid), ``weights.npy`` for strategies
that weigh clients individually (rounds x clients float32: the aggregation weight q_k^(t)
each participant's update received, 0 for the others; one binary array instead of per-row
lists, so N = 100,000 clients cost 400 kB a round on disk and nothing in
``metrics.jsonl``) and PNG plots (drawn by the CLI from these files). A directory
whose status is not ``complete`` is an incomplete run and the report says so instead of using it.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from flwr.common import EvaluateRes, FitRes, Parameters, Scalar, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from fedram_flwr.availability import (
    PARTITION_ID,
    ConnectedClientManager,
    OracleClientManager,
    write_trace,
)

WEIGHTS_FILE = "weights.npy"
VARIANT_FILE = "variant.json"
PLOT_INPUTS_FILE = "plot_inputs.npz"
BOUNDARY_GRID = 300  # points per axis of the decision-boundary grid


class RunDirectory:
    """Files of one (scenario variant, seed) run."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    def status(self) -> str:
        try:
            return json.loads((self.path / "status.json").read_text())["status"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return "missing"

    def start(self, scenario: dict[str, Any], seed: int, engine: str) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        stale_files = (
            "metrics.jsonl",
            "summary.json",
            "final_model.npz",
            "availability.csv",
            WEIGHTS_FILE,
            PLOT_INPUTS_FILE,
        )
        for stale in stale_files:
            (self.path / stale).unlink(missing_ok=True)
        self.write("scenario.yaml", yaml.safe_dump({**scenario, "seed": seed}, sort_keys=False))
        self.set_status("running", engine=engine, started=time.time())

    def set_status(self, status: str, **extra: Any) -> None:
        self.write("status.json", json.dumps({"status": status, **extra}, indent=2))

    def append_metrics(self, row: dict[str, Any]) -> None:
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.is_file():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line]

    def read_weights(self) -> np.ndarray | None:
        """Rounds x clients aggregation weights (``weights.npy``), if the run has them."""
        f = self.path / WEIGHTS_FILE
        return np.load(f) if f.is_file() else None

    def read_final_model(self) -> list[np.ndarray] | None:
        """The global parameter arrays saved after the last round."""
        f = self.path / "final_model.npz"
        if not f.is_file():
            return None
        with np.load(f) as z:
            return [z[k] for k in sorted(z.files, key=lambda s: int(s.split("_")[1]))]

    def write_variant(self, label: str, swept: Mapping[str, Any]) -> None:
        """``variant.json``: the variant's label and swept ``{field: value}`` mapping, so
        a report groups runs by data rather than by parsing folder names."""
        self.path.mkdir(parents=True, exist_ok=True)
        record = {"label": label, "sweep": dict(swept), "fields": label_fields(swept)}
        self.write(VARIANT_FILE, json.dumps(record, indent=2))

    def read_variant(self) -> dict[str, Any] | None:
        """The record of :meth:`write_variant`; None in run folders made without it."""
        f = self.path / VARIANT_FILE
        return json.loads(f.read_text()) if f.is_file() else None

    def read_plot_inputs(self) -> dict[str, np.ndarray] | None:
        """The arrays of :func:`write_plot_inputs`; None when the run has none."""
        f = self.path / PLOT_INPUTS_FILE
        if not f.is_file():
            return None
        with np.load(f) as z:
            return {k: z[k] for k in z.files}

    def read_summary(self) -> dict[str, Any]:
        return json.loads((self.path / "summary.json").read_text())

    def scenario(self) -> dict[str, Any]:
        return yaml.safe_load((self.path / "scenario.yaml").read_text())

    def write(self, name: str, text: str) -> None:
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(self.path / name)  # atomic: never a half-written file


def label_fields(swept: Mapping[str, Any]) -> dict[str, str]:
    """The label's ``key=value`` parts of a variant's swept fields, as strings:
    ``{"availability.p_min": 0.1}`` -> ``{"p_min": "0.1"}``; a whole section given as a
    mapping with a ``name`` is named by it (``{"algorithm": {"name": "afl"}}`` ->
    ``{"name": "afl"}``), as ``Scenario.variants()`` labels it."""
    out = {}
    for key, value in swept.items():
        if isinstance(value, Mapping) and "name" in value:
            out["name"] = f"{value['name']}"
        else:
            out[key.split(".")[-1]] = f"{value}"
    return out


def swept_values(sweep: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """One ``{field: value}`` per variant of a scenario's ``sweep``, in the order of
    ``Scenario.variants()`` (the product of the value lists; ``[{}]`` without a sweep)."""
    return [dict(zip(sweep, values)) for values in itertools.product(*sweep.values())]


def boundary_grid(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) meshgrid of the decision-boundary figure between corners lo, hi."""
    return np.meshgrid(
        np.linspace(lo[0], hi[0], BOUNDARY_GRID), np.linspace(lo[1], hi[1], BOUNDARY_GRID)
    )


def availability_from_rows(
    rows: list[dict[str, Any]], num_clients: int, key: str = "active"
) -> np.ndarray:
    """Rounds 1..R x clients bool matrix of the partition ids each round's row lists
    under ``key`` (``active``: the oracle's draw; ``relayed``: who returned an update)."""
    rounds = max((r["round"] for r in rows), default=0)
    out = np.zeros((rounds, num_clients), dtype=bool)
    for r in rows:
        if r["round"] > 0:
            out[r["round"] - 1, r.get(key, [])] = True
    return out


def summarise(rows: list[dict[str, Any]], tail_fraction: float = 0.2) -> dict[str, Any]:
    """Final and late-average evaluated metrics, relay counts and timing of a run."""
    evals = [r for r in rows if "accuracy" in r]
    final = evals[-1] if evals else {}
    relays: dict[str, int] = {}
    for r in rows:
        for pid in r.get("relayed", []):
            relays[str(pid)] = relays.get(str(pid), 0) + 1
    times = [r["round-seconds"] for r in rows if "round-seconds" in r]
    rounds = max((r["round"] for r in rows), default=0)
    tail = [r for r in evals if r["round"] >= (1 - tail_fraction) * rounds]
    trained = [r for r in evals if r["round"] > 0]
    numeric = [k for k, v in final.items() if isinstance(v, (int, float)) and k != "round"]
    return {
        "rounds": rounds,
        "final": {k: v for k, v in final.items() if k not in ("relayed",)},
        # Mean over the evaluations in the last ``tail_fraction`` of the rounds: less
        # sensitive than the final model to which client the RAM relayed last.
        "tail-mean": {k: float(np.mean([r[k] for r in tail if k in r])) for k in numeric},
        # Mean over every evaluation after round 0: the time-averaged accuracy of the
        # CA-Fed paper (Sec. V-B), which rewards fast as well as good convergence.
        "time-mean": {k: float(np.mean([r[k] for r in trained if k in r])) for k in numeric},
        "relay-counts": relays,
        "mean-round-seconds": sum(times) / len(times) if times else math.nan,
    }


def estimator_errors(
    diagnostics: dict[str, Any], true_law: tuple[np.ndarray, np.ndarray]
) -> dict[str, float]:
    """Mean over clients of |pi_hat - pi| and |lambda_hat - lambda| of the availability
    estimates a strategy's ``diagnostics()`` reports under ``availability`` (CA-Fed and
    its baselines track availability in both modes) against the oracle's hidden law;
    {} when there are none (other strategies, or before round 1)."""
    tracked = diagnostics.get("availability")
    if tracked is None:
        return {}
    pi_est, lam_est = tracked
    pi, lam = true_law
    return {
        "pi-error": float(np.mean(np.abs(pi_est - pi))),
        "lambda-error": float(np.mean(np.abs(lam_est - lam))),
    }


class RecordingStrategy(Strategy):
    """Wraps a strategy of ``fedram_flwr.strategies`` (``diagnostics()``); writes one
    metrics row per round and finishes the run directory after the last round. Works in
    every engine (it lives in the server).

    It reads what it logs of the algorithm from the strategy's ``diagnostics()``:
    ``q`` (the last aggregation's weights over all clients, from strategies that weigh
    clients individually) and ``availability`` (the estimates (pi_hat, lambda_hat)).
    The recorder keeps each round's weights of the
    participants and writes them as ``weights.npy`` after the last round. ``true_law``
    (pi, lambda): the oracle's hidden law, read *by the recorder only* to log the
    estimators' errors ``pi-error`` / ``lambda-error`` each round; the wrapped strategy
    never sees it."""

    def __init__(
        self,
        strategy: Strategy,
        run_dir: RunDirectory,
        *,
        num_rounds: int,
        on_finish=None,
        label: str = "",
        progress_every: int = 0,
        summary_extra: dict[str, Any] | None = None,
        true_law: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.strategy = strategy
        self.run_dir = run_dir
        self.num_rounds = num_rounds
        self.on_finish = on_finish
        self.label = label
        self.progress_every = progress_every or max(1, num_rounds // 20)
        self.summary_extra = summary_extra or {}
        self.true_law = true_law
        self._weights: dict[int, np.ndarray] = {}  # round -> float32 weights of participants
        self._row: dict[str, Any] = {}
        self._num_clients = 0  # known once an oracle has drawn a round
        self._t0 = self._t_round = time.monotonic()

    def __repr__(self) -> str:
        return f"Recording({self.strategy!r})"

    def initialize_parameters(self, client_manager: ClientManager) -> Parameters | None:
        return self.strategy.initialize_parameters(client_manager)

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ):
        """The wrapped strategy's instructions; records the oracle's draw as ``active``
        and, for physical availability, the partitions it saw up as ``connected``."""
        instructions = self.strategy.configure_fit(server_round, parameters, client_manager)
        if isinstance(client_manager, OracleClientManager):
            self._row["active"] = list(client_manager.last_active)
            if isinstance(client_manager, ConnectedClientManager):
                self._row["connected"] = client_manager.connected_partitions()
            self._num_clients = client_manager.num_clients
        return instructions

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        params, metrics = self.strategy.aggregate_fit(server_round, results, failures)
        relayed = sorted(int(r.metrics[PARTITION_ID]) for _, r in results)
        self._row.update(
            {
                "relayed": relayed,
                "failures": len(failures),
                # drawn but no update aggregated: error, timeout or lost connection
                "failed": sorted(set(self._row.get("active", [])) - set(relayed)),
                **{f"fit-{k}": v for k, v in metrics.items()},
            }
        )
        diagnostics = self.strategy.diagnostics()
        q = diagnostics.get("q")
        if isinstance(q, np.ndarray) and params is not None:
            applied = np.zeros(q.size, np.float32)
            applied[relayed] = q[relayed]  # q_k of those whose update was aggregated
            self._weights[server_round] = applied
        if self.true_law is not None:
            self._row.update(estimator_errors(diagnostics, self.true_law))
        return params, metrics

    def configure_evaluate(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ):
        return self.strategy.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, EvaluateRes]],
        failures: list[tuple[ClientProxy, EvaluateRes] | BaseException],
    ):
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters: Parameters):
        result = self.strategy.evaluate(server_round, parameters)
        row: dict[str, Any] = {"round": server_round, **self._row}
        now = time.monotonic()
        if server_round > 0:  # everything since the previous round's evaluation
            row["round-seconds"] = now - self._t_round
        self._t_round = now
        if result is not None:
            loss, metrics = result
            row.update({"loss": loss, **metrics})
        self._row = {}
        self.run_dir.append_metrics(row)
        self._progress(row)
        if server_round == self.num_rounds:
            np.savez(self.run_dir.path / "final_model.npz", *parameters_to_ndarrays(parameters))
            rows = self.run_dir.read_metrics()
            if self._num_clients:
                active = availability_from_rows(rows, self._num_clients)
                write_trace(self.run_dir.path / "availability.csv", active)
            if self._weights:
                self.write_weights()
            summary = summarise(rows)
            summary["wall-seconds"] = time.monotonic() - self._t0
            summary.update(self.summary_extra)
            self.run_dir.write("summary.json", json.dumps(summary, indent=2))
            if self.on_finish is not None:
                self.on_finish(self.run_dir, rows)
            self.run_dir.set_status("complete", finished=time.time())
        return result

    def write_weights(self) -> None:
        """``weights.npy``: rounds 1..T x clients, zeros in rounds without aggregation."""
        n = next(iter(self._weights.values())).size
        out = np.zeros((self.num_rounds, n), np.float32)
        for r, w in self._weights.items():
            out[r - 1] = w
        tmp = self.run_dir.path / f".{WEIGHTS_FILE}"
        with tmp.open("wb") as fh:
            np.save(fh, out)
        tmp.replace(self.run_dir.path / WEIGHTS_FILE)

    def _progress(self, row: dict[str, Any]) -> None:
        r = row["round"]
        if r % self.progress_every and r != self.num_rounds:
            return
        elapsed = time.monotonic() - self._t0
        eta = elapsed / max(r, 1) * (self.num_rounds - r)
        parts = [f"{self.label} round {r}/{self.num_rounds}"]
        for key, name in (("accuracy", "acc"), ("rare-accuracy", "rare"), ("t", "t")):
            if key in row:
                parts.append(f"{name} {row[key]:.3f}")
        parts.append(f"{elapsed:.0f}s elapsed, eta {eta:.0f}s")
        print(" | ".join(parts), file=sys.stderr, flush=True)
