"""Evaluation in the Message-API base: what the nodes evaluate, and ``evaluate_fn``'s metrics.

:class:`Evaluation` is the mixin of
:class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy` that holds both
evaluations: the federated one (``configure_evaluate`` sends the model alone, theta
without t, under the keys of ``start``'s ``initial_arrays``, so a stock Flower
``@app.evaluate()`` handler works unchanged) and the server-side one (``start`` hands
Flower an ``evaluate_fn`` whose metrics gain the core's extras of the state, t or eta,
as in the legacy ``evaluate``). :func:`metric_values` turns diagnostics and extras into
``MetricRecord`` values; it and ``EvaluateFn`` are re-exported by
:mod:`~fedram_flwr.message_api.strategy`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from fedram_flwr.message_api.round_view import RoundView

EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]


def metric_values(values: Mapping[str, Any]) -> dict[str, int | float | list]:
    """Convert ``values`` into ``MetricRecord`` values.

    Parameters
    ----------
    values : mapping of str to Any
        Diagnostics or metrics.

    Returns
    -------
    dict of str to int, float or list
        Numpy scalars as Python numbers, 1-D arrays as lists, bools as ints; ``None`` and
        anything else (nested values) left out.
    """
    out: dict[str, int | float | list] = {}
    for key, value in values.items():
        if isinstance(value, np.ndarray) and value.ndim == 1:
            value = value.tolist()
        elif isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, int | float) or (
            isinstance(value, list) and all(isinstance(v, int | float) for v in value)
        ):
            out[key] = value
    return out


class Evaluation:
    """Mixin of a Message-API core strategy's evaluation (see the module docstring).

    Placed before Flower's ``FedAvg`` in the bases: ``configure_evaluate`` and ``start``
    end in Flower's. The host class provides ``state``, ``core``, :meth:`reset`,
    :meth:`broadcast_arrays` and :meth:`model_arrays`
    (:class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy`).
    """

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send the model to evaluate, as Flower's ``configure_evaluate`` does.

        The model is :meth:`model_arrays` (theta without t, x without c, under the keys of
        ``start``'s ``initial_arrays``), so that a stock Flower ``@app.evaluate()`` handler
        (``to_torch_state_dict()``) evaluates it unchanged.

        Parameters
        ----------
        server_round : int
            t, >= 0.
        arrays : ArrayRecord
            The current model (used only before any state).
        config : ConfigRecord
            The evaluate config; ``server-round`` joins it.
        grid : Grid
            The grid (or an availability wrapper's view of it).

        Returns
        -------
        iterable of Message
            Flower's sample; under an availability wrapper, every available node (none
            if ``fraction_evaluate`` is 0).
        """
        model = arrays if self.state is None else self.model_arrays()
        if not isinstance(grid, RoundView):
            return super().configure_evaluate(server_round, model, config, grid)
        if self.fraction_evaluate == 0.0:
            return []
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: model, self.configrecord_key: config})
        nodes = sorted(grid.get_node_ids(), key=grid.partition_of.__getitem__)
        return self._construct_messages(record, nodes, MessageType.EVALUATE)

    def evaluation_extras(self, server_round: int, evaluate_fn: EvaluateFn) -> dict[str, Any]:
        """Return the metrics beside ``evaluate_fn``'s: the core's extras of the state (t, eta).

        Parameters
        ----------
        server_round : int
            t, >= 0.
        evaluate_fn : callable
            The user's ``evaluate_fn`` (unused here; subclasses may read it).

        Returns
        -------
        dict of str to Any
            ``MetricRecord`` values (:func:`metric_values`).
        """
        return metric_values(self.core.evaluated(self.broadcast_arrays())[1])

    def prepare_start(
        self, initial_arrays: ArrayRecord, evaluate_fn: EvaluateFn | None
    ) -> EvaluateFn | None:
        """Do what :meth:`start` does before Flower's loop.

        An availability wrapper's ``start`` calls it too.

        Parameters
        ----------
        initial_arrays : ArrayRecord
            The initial model; the state is reset to it (:meth:`reset`).
        evaluate_fn : callable or None
            (round, model) -> ``MetricRecord`` or ``None``.

        Returns
        -------
        callable or None
            ``evaluate_fn`` with :meth:`evaluation_extras` added to its metrics
            (``None`` without one).
        """
        self.reset(initial_arrays)
        if evaluate_fn is None:
            return None

        def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            result = evaluate_fn(server_round, arrays)
            if result is None:
                return None
            return MetricRecord({**result, **self.evaluation_extras(server_round, evaluate_fn)})

        return evaluate

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: EvaluateFn | None = None,
    ) -> Result:
        """Run Flower's ``start`` from the state of ``initial_arrays``.

        ``evaluate_fn`` sees the model, and its metrics gain :meth:`evaluation_extras`.

        Parameters
        ----------
        grid : Grid
            The grid (or an availability wrapper's view of it).
        initial_arrays : ArrayRecord
            The initial model.
        num_rounds : int
            Rounds to run, >= 1.
        timeout : float
            Seconds a round waits for replies at most, > 0; a node that misses it is
            absent from the round.
        train_config : ConfigRecord or None
            Sent to the trainers each round.
        evaluate_config : ConfigRecord or None
            Sent to the evaluators each round.
        evaluate_fn : callable or None
            (round, model) -> ``MetricRecord`` or ``None``, the server-side evaluation.

        Returns
        -------
        Result
            Flower's result: the final model (``Result.arrays``) and the metrics.
        """
        evaluate = self.prepare_start(initial_arrays, evaluate_fn)
        return super().start(
            grid, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate
        )
