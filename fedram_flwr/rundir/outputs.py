"""The strategy wrapper that records every round in a run directory (the files of a
run directory and its one writer: :mod:`fedram_flwr.rundir`, re-exported here), and the
run's summary.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from flwr.common import EvaluateRes, FitRes, Parameters, Scalar, parameters_to_ndarrays
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import Strategy

from fedram_flwr.availability import (
    PARTITION_ID,
    ConnectedClientManager,
    OracleClientManager,
)
from fedram_flwr.rundir import PLOT_INPUTS_FILE as PLOT_INPUTS_FILE
from fedram_flwr.rundir import VARIANT_FILE as VARIANT_FILE
from fedram_flwr.rundir import WEIGHTS_FILE, RunDirectory
from fedram_flwr.rundir import label_fields as label_fields
from fedram_flwr.rundir.nofollow import encoded, write_atomic

BOUNDARY_GRID = 300  # points per axis of the decision-boundary grid
NO_TRAINING = "no client trained in any round"
"""The summary's warning for a run in which no client's update was ever aggregated."""


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


def realised_availability(rows: list[dict[str, Any]], num_clients: int) -> np.ndarray:
    """Who was available in fact, rounds 1..R x clients (``availability.csv``): the
    oracle's draw (``active``) minus the clients whose instruction failed (``failed``: a
    SuperNode gone in a Deployment run), so the ``trace`` oracle replays the run's
    participation (a deployment's physical availability becomes a simulation's)."""
    return availability_from_rows(rows, num_clients) & ~availability_from_rows(
        rows, num_clients, "failed"
    )


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
        # a timed run's simulated seconds at its end
        **({"sim-seconds": rows[-1]["sim-seconds"]} if rows and "sim-seconds" in rows[-1] else {}),
        # rounds in which Flower found nobody to train have no "relayed" list at all
        **({"warnings": [NO_TRAINING]} if rounds and not relays else {}),
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


class RoundRecorder:
    """Writes one metrics row per round in a run directory and finishes it after the
    last round; the part of the recorders that does not depend on Flower's API (the
    legacy :class:`RecordingStrategy`, the Message API's
    :class:`~fedram_flwr.engines.message_recording.MessageRecordingStrategy`).

    It logs of the algorithm what its ``diagnostics()`` report: ``q`` (the last
    aggregation's weights over all clients, from strategies that weigh clients
    individually) and ``availability`` (the estimates (pi_hat, lambda_hat)). It keeps
    each round's weights of the participants and writes them as ``weights.npy`` after
    the last round. ``true_law`` (pi, lambda): the oracle's hidden law, read *by the
    recorder only* to log the estimators' errors ``pi-error`` / ``lambda-error`` each
    round; the strategy never sees it."""

    def __init__(
        self,
        run_dir: RunDirectory,
        *,
        num_rounds: int,
        on_finish=None,
        label: str = "",
        progress_every: int = 0,
        summary_extra: dict[str, Any] | None = None,
        true_law: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
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

    def record_fit(
        self,
        server_round: int,
        relayed: list[int],
        failures: int,
        metrics: Mapping[str, Any],
        diagnostics: dict[str, Any],
        aggregated: bool,
    ) -> None:
        """A round's training: the partitions whose update reached the strategy
        (``relayed``, sorted), the number of failed replies, the aggregated metrics, the
        strategy's diagnostics after aggregating, and whether it gave a new model."""
        self._row.update(
            {
                "relayed": relayed,
                "failures": failures,
                # drawn but no update aggregated: error, timeout or lost connection (a
                # round policy's late or dropped update is no failure: ``not-used``)
                "failed": sorted(
                    set(self._row.get("active", []))
                    - set(relayed)
                    - set(self._row.get("not-used", []))
                ),
                **{f"fit-{k}": v for k, v in metrics.items()},
            }
        )
        q = diagnostics.get("q")
        if isinstance(q, np.ndarray) and aggregated:
            applied = np.zeros(q.size, np.float32)
            applied[relayed] = q[relayed]  # q_k of those whose update was aggregated
            self._weights[server_round] = applied
        if self.true_law is not None:
            self._row.update(estimator_errors(diagnostics, self.true_law))

    def record_time(self, fields: Mapping[str, Any]) -> None:
        """A timed round's clock (:mod:`fedram_flwr.engines.timed`): ``sim-seconds`` at
        the round's end, its ``sim-round-seconds``, the clients ``available``,
        ``started``, ``used``, ``late``, ``dropped`` and ``late-delivered`` (with their
        ``staleness`` in rounds), and which started ones were ``not-used``."""
        self._row.update(fields)

    def record_extra(self, fields: Mapping[str, Any]) -> None:
        """Add ``fields`` to the current round's row (an asynchronous step's staleness,
        simulated time, ...)."""
        self._row.update(fields)

    def record_round(
        self,
        server_round: int,
        result: tuple[float, dict[str, Scalar]] | None,
        final_arrays: Callable[[], list[np.ndarray]],
    ) -> None:
        """The round's row, with the server's evaluation ``result`` (loss, metrics) if
        any; after the last round ``final_arrays()`` (the model) and the run's files."""
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
            model = encoded(np.savez, *final_arrays())
            write_atomic(self.run_dir.path / "final_model.npz", model)
            rows = self.run_dir.read_metrics()
            if self._num_clients:
                available = realised_availability(rows, self._num_clients)
                text = encoded(np.savetxt, available.astype(np.uint8), fmt="%d", delimiter=",")
                write_atomic(self.run_dir.path / "availability.csv", text)
            if self._weights:
                self.write_weights()
            summary = summarise(rows)
            summary["wall-seconds"] = time.monotonic() - self._t0
            summary.update(self.summary_extra)
            self.run_dir.write("summary.json", json.dumps(summary, indent=2))
            if self.on_finish is not None:
                self.on_finish(self.run_dir, rows)
            self.run_dir.set_status("complete", finished=time.time())

    def write_weights(self) -> None:
        """``weights.npy``: rounds 1..T x clients, zeros in rounds without aggregation."""
        n = next(iter(self._weights.values())).size
        out = np.zeros((self.num_rounds, n), np.float32)
        for r, w in self._weights.items():
            out[r - 1] = w
        write_atomic(self.run_dir.path / WEIGHTS_FILE, encoded(np.save, out))

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


class RecordingStrategy(RoundRecorder, Strategy):
    """Wraps a legacy strategy of ``fedram_flwr.strategies`` (``diagnostics()``) and
    records every round (:class:`RoundRecorder`). Works in every engine (it lives in
    the server)."""

    def __init__(self, strategy: Strategy, run_dir: RunDirectory, **recorder: Any) -> None:
        self.strategy = strategy
        super().__init__(run_dir, **recorder)

    def __repr__(self) -> str:
        return f"Recording({self.strategy!r})"

    def checkpoint(self) -> dict[str, Any]:
        """What the run carries from one round to the next on the server, taken between
        rounds (a run's checkpoint): the wrapped strategy's ``checkpoint()``, the
        aggregation weights recorded so far, the number of clients and the seconds run."""
        return {
            "strategy": self.strategy.checkpoint(),
            "weights": dict(self._weights),
            "num-clients": self._num_clients,
            "seconds": time.monotonic() - self._t0,
        }

    def restore(self, saved: dict[str, Any]) -> None:
        """Take back what :meth:`checkpoint` gave (resuming a run): the summary's
        ``wall-seconds`` then counts the seconds run before the interruption too."""
        self.strategy.restore(saved["strategy"])
        self._weights = dict(saved["weights"])
        self._num_clients = saved["num-clients"]
        self._t0 = time.monotonic() - saved["seconds"]

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
        diagnostics = self.strategy.diagnostics()
        self.record_fit(
            server_round, relayed, len(failures), metrics, diagnostics, params is not None
        )
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
        self.record_round(server_round, result, lambda: parameters_to_ndarrays(parameters))
        return result
