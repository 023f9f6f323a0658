"""Tracking in a Flower app: :func:`with_tracking` makes a Message-API strategy's
``start()`` log each round's metrics to TensorBoard, MLflow or W&B, the app's own loop
unchanged.

What is logged, per round (the step), under the names a ``fedram run`` row uses:
- the train metrics ``aggregate_train`` returns, as ``fit-<key>``; where the strategy
  records the partitions a round relayed (``relayed``: ``with_availability``), their
  number as ``relayed.count``;
- the evaluation ``aggregate_evaluate`` returns, as ``evaluate-<key>``;
- the server-side evaluation of ``start``'s ``evaluate_fn`` (round 0 too), as its keys
  (``accuracy``, ``loss``, ...);
- an asynchronous strategy's steps (FedBuff's ``on_step``): ``buffered``, ``failures``,
  ``mean-staleness``, ``max-staleness`` and the step's ``sim-seconds``.
Whatever the loop returned in its ``Result`` for a round not seen live (a wrapper whose
``start`` runs the wrapped strategy's own loop) is logged when ``start`` returns. The run
ends ``complete``, ``failed`` (an exception) or ``interrupted`` (Ctrl-C).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy import Strategy as MessageStrategy

from fedram_flwr.tracking.run import TrackerSet, end_of
from fedram_flwr.tracking.trackers import RunInfo
from fedram_flwr.tracking.values import is_number, params_of


def numbers(record: Mapping[str, Any] | None, prefix: str = "") -> dict[str, float]:
    """The numbers of a ``MetricRecord`` (lists of numbers left out), keys prefixed."""
    return {f"{prefix}{k}": float(v) for k, v in (record or {}).items() if is_number(v)}


class AppTracking:
    """The tracked run of one ``start()`` of a strategy; what :func:`with_tracking`
    installs (its ``logged``: step -> the keys logged, so a round is never logged twice)."""

    def __init__(self, names: list[str], info: RunInfo) -> None:
        self.names = names
        self.info = info
        self.trackers: TrackerSet | None = None
        self.logged: dict[int, set[str]] = {}

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Log what of ``metrics`` the step has not logged yet."""
        seen = self.logged.setdefault(step, set())
        new = {k: v for k, v in metrics.items() if k not in seen}
        if new and self.trackers is not None:
            seen.update(new)
            self.trackers.log(step, new)

    def from_result(self, result: Result) -> None:
        """The rounds of Flower's ``Result`` not logged live."""
        for records, prefix in (
            (result.train_metrics_clientapp, "fit-"),
            (result.evaluate_metrics_clientapp, "evaluate-"),
            (result.evaluate_metrics_serverapp, ""),
        ):
            for step, record in sorted(records.items()):
                self.log(int(step), numbers(record, prefix))


def with_tracking(
    strategy: MessageStrategy,
    trackers: str | Iterable[str],
    *,
    name: str,
    group: str = "flower-app",
    params: Mapping[str, Any] | None = None,
    root: str | Path = "tracking",
) -> MessageStrategy:
    """Make ``strategy.start()`` log each round to ``trackers`` (module docstring).

    Parameters
    ----------
    strategy : flwr.serverapp.strategy.Strategy
        Any Message-API strategy; wrap the outermost one (``with_availability``'s result,
        so that its ``relayed`` is seen). Returned, its methods wrapped on the instance.
    trackers : str or iterable of str
        ``"tensorboard"``, ``"mlflow"``, ``"wandb"`` (their packages: the ``tracking``
        extra).
    name : str
        The tracked run's name.
    group : str
        The MLflow experiment, W&B group and TensorBoard folder the run goes in.
    params : mapping, optional
        The run's parameters (nested mappings become dotted keys), e.g. the run config.
    root : str or Path
        The folder the local stores go under (``tensorboard/``, ``mlruns/``, ``wandb/``),
        as for ``fedram run`` (``$MLFLOW_TRACKING_URI`` and ``$WANDB_MODE`` apply).

    Raises
    ------
    ScenarioError
        For an unknown tracker or one whose package is not installed (naming the extra).
    """
    from fedram_flwr.tracking import requested

    names = requested([trackers] if isinstance(trackers, str) else list(trackers))
    if not names:
        raise ValueError("with_tracking: name at least one tracker")
    info = RunInfo(name=name, group=group, params=params_of(params or {}), root=Path(root))
    tracking = AppTracking(names, info)
    strategy.tracking = tracking
    train, evaluate, start = strategy.aggregate_train, strategy.aggregate_evaluate, strategy.start

    @functools.wraps(train)
    def aggregate_train(server_round: int, replies: Iterable[Message]):
        arrays, metrics = train(server_round, replies)
        facts = numbers(metrics, "fit-")
        relayed = getattr(strategy, "relayed", None)
        if isinstance(relayed, Mapping) and server_round in relayed:
            facts["relayed.count"] = float(len(relayed[server_round]))
        tracking.log(server_round, facts)
        return arrays, metrics

    @functools.wraps(evaluate)
    def aggregate_evaluate(server_round: int, replies: Iterable[Message]):
        metrics = evaluate(server_round, replies)
        tracking.log(server_round, numbers(metrics, "evaluate-"))
        return metrics

    @functools.wraps(start)
    def tracked_start(*args: Any, evaluate_fn=None, **kwargs: Any) -> Result:
        def evaluated(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            record = evaluate_fn(server_round, arrays)
            tracking.log(server_round, numbers(record))
            return record

        tracking.trackers = TrackerSet(names)
        tracking.logged = {}
        tracking.trackers.open(info, {})
        on_step = getattr(strategy, "on_step", "absent")
        if on_step != "absent":  # an asynchronous strategy's steps (FedBuff)
            strategy.on_step = stepped(tracking, on_step)
        try:
            result = start(*args, evaluate_fn=None if evaluate_fn is None else evaluated, **kwargs)
            tracking.from_result(result)
        except BaseException as err:
            tracking.trackers.close(end_of(err))
            raise
        finally:
            if on_step != "absent":
                strategy.on_step = on_step
        tracking.trackers.close("complete")
        return result

    strategy.aggregate_train = aggregate_train
    strategy.aggregate_evaluate = aggregate_evaluate
    strategy.start = tracked_start
    return strategy


def stepped(tracking: AppTracking, on_step: Any):
    """An ``on_step(record, model)`` that logs the step, then calls ``on_step``."""

    def log_step(record: Any, model: Any) -> None:
        staleness = [float(s) for s in record.staleness] or [0.0]
        tracking.log(
            int(record.version),
            {
                "buffered": float(len(record.clients)),
                "failures": float(record.failures),
                "mean-staleness": sum(staleness) / len(staleness),
                "max-staleness": max(staleness),
                "sim-seconds": float(record.time),
            },
        )
        if on_step is not None:
            on_step(record, model)

    return log_step
