"""The run-directory recorder for Flower's Message API: a Message-API ``Strategy`` that
wraps another and records every round as the legacy
:class:`~fedram_flwr.rundir.outputs.RecordingStrategy` does (both are a
:class:`~fedram_flwr.rundir.outputs.RoundRecorder`: same rows, same files, same summary).

What it records, and from where (Flower's ``Strategy.start`` loop, unchanged):
- ``active``: the oracle's draw of the round under an availability wrapper (as the legacy
  recorder records it, also when the strategy picks some of the available nodes, as
  FedAvg(S) and rFedFair do), else the partitions ``configure_train`` sends to; under
  the ``connected`` oracle also the partitions it saw ``connected``, as the legacy rows;
- ``relayed`` / ``failures``: the partitions of the train replies without error, and the
  number of error replies handed to ``aggregate_train`` (on a simulated clock, those the
  round policy kept, and the round's clock:
  :class:`~fedram_flwr.message_api.timed.TimedAvailability`; on the wall clock the same,
  :class:`~fedram_flwr.message_api.wall.WallClockAvailability`, whose rounds wait on the
  grid :meth:`~fedram_flwr.message_api.wall.WallClockAvailability.run_grid` gives
  ``start``); the aggregated train metrics as
  ``fit-*``; the strategy's ``diagnostics()`` (``q``, availability estimates) if it has
  that method (the project's strategies do; Flower's own do not);
- the round's row, the server-side evaluation and, after the last round, the run's files:
  in the ``evaluate_fn`` it gives ``start`` (Flower calls it at round 0 and after each
  round, as the legacy loop calls ``Strategy.evaluate``), on the project's strategies'
  full broadcast (``broadcast_arrays()``: the legacy layout, so ``final_model.npz`` holds
  what the legacy run's does), else on the model ``start`` holds.

Partition ids come from ``partition_of(node_id)``: the grid's map in-process, the map the
availability layer learns from the nodes' ``node_config`` in Flower's engines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import Scalar
from flwr.serverapp.grid import Grid
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy import Strategy as MessageStrategy

from fedram_flwr.message_api.availability import AvailabilityStrategy
from fedram_flwr.message_api.timed import TimedAvailability
from fedram_flwr.message_api.wall import WallClockAvailability
from fedram_flwr.rundir import RunDirectory
from fedram_flwr.rundir.outputs import RoundRecorder

ServerEvaluate = Callable[[int, list[np.ndarray]], tuple[float, dict[str, Scalar]] | None]
"""Server-side evaluation of the broadcast arrays of a round: (loss, metrics) or None
(the shape of a legacy strategy's ``evaluate``)."""


def metric_record(loss: float, metrics: dict[str, Any]) -> MetricRecord:
    """``{"loss": loss, **metrics}`` as a ``MetricRecord``, keeping the values it can hold
    (numbers and lists of numbers)."""

    def number(v: Any) -> bool:
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)

    out: dict[str, Any] = {}
    for key, value in {"loss": loss, **metrics}.items():
        if number(value):
            out[key] = value.item() if isinstance(value, np.generic) else value
        elif isinstance(value, list) and value and all(number(v) for v in value):
            out[key] = [float(v) for v in value]
    return MetricRecord(out)


class MessageRecordingStrategy(RoundRecorder, MessageStrategy):
    """Wraps a Message-API strategy (Flower's or the project's) and records every round
    in ``run_dir`` (module docstring). ``partition_of``: node id -> partition id.
    ``num_clients``: the number of partitions (for ``availability.csv``). ``evaluate``:
    the server-side evaluation recorded each round. ``recorder``: the
    :class:`~fedram_flwr.rundir.outputs.RoundRecorder` settings (``num_rounds``, ...).

    Run it with :meth:`start`, Flower's loop; the wrapped strategy's own ``start`` is not
    used, so a strategy that overrides ``start`` is refused unless that only prepares
    (``prepare_start``: the project's strategies reset their state, which they also do
    in round 1's ``configure_train``, and add their extras to ``evaluate_fn``, which the
    recorder's own evaluation records)."""

    def __init__(
        self,
        strategy: MessageStrategy,
        run_dir: RunDirectory,
        *,
        partition_of: Callable[[int], int],
        num_clients: int,
        evaluate: ServerEvaluate | None = None,
        **recorder: Any,
    ) -> None:
        if type(strategy).start is not MessageStrategy.start and not hasattr(
            strategy, "prepare_start"
        ):
            raise TypeError(
                f"{type(strategy).__name__} overrides Strategy.start, which the recorder "
                "does not call: move that code into configure_*/aggregate_*"
            )
        self.strategy = strategy
        self.partition_of = partition_of
        self.num_clients = num_clients
        self.evaluate = evaluate
        super().__init__(run_dir, **recorder)

    def __repr__(self) -> str:
        return f"Recording({self.strategy!r})"

    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        drawn = None
        if isinstance(self.strategy, AvailabilityStrategy):
            drawn = self.strategy.relayed.get(server_round)
            if server_round in self.strategy.connected:  # physical availability
                self._row["connected"] = self.strategy.connected[server_round]
        if drawn is None:
            drawn = [self.partition_of(m.metadata.dst_node_id) for m in messages]
        self._row["active"] = sorted(drawn)
        self._num_clients = self.num_clients
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        arrays, metrics = self.strategy.aggregate_train(server_round, replies)
        if isinstance(self.strategy, (TimedAvailability, WallClockAvailability)):  # the policy's
            clocked = self.strategy.clocked.pop(server_round)
            self.record_time(clocked.row)
            replies = clocked.replies
        ok = [r for r in replies if not r.has_error()]
        relayed = sorted(self.partition_of(r.metadata.src_node_id) for r in ok)
        diagnostics = getattr(self.strategy, "diagnostics", dict)()
        self.record_fit(
            server_round,
            relayed,
            len(replies) - len(ok),
            dict(metrics or {}),
            diagnostics,
            arrays is not None,
        )
        return arrays, metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return self.strategy.aggregate_evaluate(server_round, replies)

    def evaluate_fn(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Flower's ``evaluate_fn``: evaluates, writes the round's row, finishes the run
        after the last round."""
        recorded = self.recorded_arrays(arrays)
        result = None if self.evaluate is None else self.evaluate(server_round, recorded())
        self.record_round(server_round, result, recorded)
        return None if result is None else metric_record(*result)

    def recorded_arrays(self, arrays: ArrayRecord) -> Callable[[], list[np.ndarray]]:
        """What a round records and evaluates: the project's strategies' full broadcast
        (``broadcast_arrays()``: the legacy run's layout, e.g. (theta, t)), else the model
        Flower's ``start`` holds."""
        broadcast = getattr(self.strategy, "broadcast_arrays", None)
        return arrays.to_numpy_ndarrays if broadcast is None else broadcast

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int | None = None,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: None = None,
    ) -> Result:
        """Flower's ``Strategy.start`` for the recorder's ``num_rounds``, with
        :meth:`evaluate_fn` (the server-side evaluation is the ``evaluate`` given at
        construction), after the wrapped strategy's ``reset(initial_arrays)`` where it has
        one (the project's strategies: their state from the model, as their ``start``)."""
        if num_rounds not in (None, self.num_rounds) or evaluate_fn is not None:
            raise ValueError(
                f"start: num_rounds is the recorder's ({self.num_rounds}) and evaluate_fn "
                "its own (give the server evaluation as `evaluate` to the constructor)"
            )
        if callable(reset := getattr(self.strategy, "reset", None)):
            reset(initial_arrays)  # a project strategy's state, as its own start sets it
        if isinstance(self.strategy, WallClockAvailability):  # its rounds wait on the wall
            grid = self.strategy.run_grid(grid)
        return super().start(
            grid,
            initial_arrays,
            num_rounds=self.num_rounds,
            timeout=timeout,
            train_config=train_config,
            evaluate_config=evaluate_config,
            evaluate_fn=self.evaluate_fn,
        )
