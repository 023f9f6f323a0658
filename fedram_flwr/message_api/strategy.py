"""The one Message-API base over an algorithm core (Flower's ``flwr.serverapp.strategy``).

The Message-API face of every algorithm whose legacy face is
:class:`~fedram_flwr.strategies.base.CoreStrategy`.

:class:`CoreMessageStrategy` subclasses Flower's Message-API ``FedAvg`` and keeps its
node sampling (``configure_train`` / ``configure_evaluate`` sample from the ``grid``
they are handed, so an availability wrapper's grid view is honoured), its record keys
and its metric aggregation. What it adds is the legacy base's, written once for the
Message API:

- the wire contract (``docs/API.md``): every node receives, to train,
  ``ArrayRecord(core.arrays(state))`` (the legacy broadcast, e.g. (theta, t) packed by
  :mod:`fedram_flwr.protocol`, in order) and a ``ConfigRecord`` with Flower's
  ``server-round`` and the core's ``fit_config`` keys; to evaluate, the model alone
  (theta without t) under the keys of ``start``'s ``initial_arrays``, so a stock Flower
  ``@app.evaluate()`` handler works unchanged;
- :func:`~fedram_flwr.message_api.round_guard.client_reply`: a reply as the cores'
  :class:`~fedram_flwr.protocol.ClientReply`, contract-checked (partition id, the metrics
  the strategy needs, the same arrays as the broadcast), with errors naming the key, the
  node and the strategy;
- the refusal of replies that are no update (:mod:`~fedram_flwr.message_api.round_guard`:
  a partition id outside 0..N-1 or carried by two replies, NaN or inf; each a failure
  of its node, named in the log), the failure guard (``accept_failures=False``: a round
  with an error reply aggregates nothing, the state stays, the round counts as skipped;
  a node that misses ``start``'s ``timeout`` is simply absent, as under Flower's own
  Message-API strategies; ``max_failed_rounds`` rounds in a row that aggregated nothing
  because clients failed stop the run) and the rule that every round counts: Flower's
  ``start`` calls ``aggregate_train`` in every round, also with no replies
  (``send_and_receive`` of no messages pushes nothing and returns none), so FedAR and
  MIFA step from memory;
- ``aggregate_train`` returns the *model* part of the state (``core.evaluated``: theta
  without t, x without c) under the keys of ``start``'s ``initial_arrays``: Flower's
  ``start`` hands it to ``evaluate_fn`` and keeps it as ``Result.arrays``, so both see
  the model as the user built it (``to_torch_state_dict()`` works). The full broadcast
  is ``strategy.broadcast_arrays()``; the core's extras (t, eta) join ``evaluate_fn``'s
  metrics, as in the legacy ``evaluate``.

Both evaluations (``configure_evaluate``, ``start``'s ``evaluate_fn``) are the mixin
:class:`~fedram_flwr.message_api.evaluation.Evaluation`; :func:`metric_values` and
``EvaluateFn`` live there too, re-exported here. The partition-id lookup without an
availability wrapper is the mixin
:class:`~fedram_flwr.message_api.node_partitions.PartitionLookup`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from logging import INFO
from typing import Any, ClassVar

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import log

from fedram_flwr.message_api.evaluation import EvaluateFn as EvaluateFn
from fedram_flwr.message_api.evaluation import Evaluation, metric_values
from fedram_flwr.message_api.node_partitions import PartitionLookup
from fedram_flwr.message_api.round_guard import client_reply, error_text, received, warn
from fedram_flwr.message_api.round_view import RoundView
from fedram_flwr.protocol import ALGORITHM_ARRAYS, Arrays
from fedram_flwr.strategies.core import Core
from fedram_flwr.strategies.hyper import (
    core_parameters,
    make_core,
    parameters_doc,
    with_parameters_doc,
)
from fedram_flwr.strategies.round_driver import RoundPolicy, RoundState, drive_round
from fedram_flwr.strategies.rounds import DEFAULT_MAX_FAILED_ROUNDS, FailedRounds

FLOWER_FEDAVG_ARGS = tuple(p for p in inspect.signature(FedAvg.__init__).parameters if p != "self")
"""Flower's Message-API ``FedAvg`` arguments, which every strategy here also takes."""

GUARD_ARGS = ("accept_failures", "max_failed_rounds")
"""The failure guard's arguments, which every strategy here takes."""

GUARD_ARGS_DOC = (
    "accept_failures : bool, default True\n"
    "    False: a round with an error reply aggregates nothing and the state stays.\n"
    "max_failed_rounds : int, default 3\n"
    "    Rounds in a row that aggregate nothing because clients failed before the run\n"
    "    stops (:class:`~fedram_flwr.strategies.rounds.FailedRoundsError`).\n"
    "**fedavg_kwargs\n"
    "    Flower Message-API ``FedAvg``'s arguments (``fraction_train``,\n"
    "    ``min_available_nodes``, ``weighted_by_key``, ``arrayrecord_key``, ...)."
)


# ------------------------------------------------------------------ the base
class CoreMessageStrategy(Evaluation, PartitionLookup, FedAvg):
    """An algorithm core as a Flower Message-API strategy (see the module docstring).

    Subclasses set ``core_type``; their keyword-only constructor takes the core's
    hyper-parameters (the legacy class's names), their own keyword arguments,
    ``accept_failures``, ``max_failed_rounds`` and Flower ``FedAvg``'s arguments; the
    signature ``help()`` shows and the docstring's ``Parameters`` are built from the
    core's declarations. ``self.state`` is the core's state, set from the model in
    ``start`` (or round 1's ``configure_train``) and replaced by each aggregation.

    Parameters
    ----------
    accept_failures : bool, default True
        ``False``: a round with an error reply aggregates nothing and the state stays
        (``True`` as Flower's legacy strategies).
    max_failed_rounds : int, default 3
        Rounds in a row that aggregate nothing because clients failed before the run
        stops (:class:`~fedram_flwr.strategies.rounds.FailedRoundsError`), >= 1.
    **kwargs
        The core's hyper-parameters and Flower Message-API ``FedAvg``'s arguments.

    Raises
    ------
    TypeError
        On an argument neither the core nor Flower's ``FedAvg`` takes, or a missing
        required one.
    """

    core_type: ClassVar[type[Core]]
    needs_partition_id: ClassVar[bool] = True  # False: stock Flower clients are served too
    picks_among_available: ClassVar[bool] = True  # with_availability's contract
    required_metrics: ClassVar[tuple[str, ...]] = ()  # fit metrics the core reads
    reply_layout: ClassVar[str] = "the model's arrays"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Build the signature and ``Parameters`` of a subclass that sets ``core_type``.

        The signature ``help()`` and IDEs show: the core's hyper-parameters (required ones
        first), a subclass's own keyword arguments, ``accept_failures``,
        ``max_failed_rounds`` and Flower ``FedAvg``'s arguments, all keyword-only.
        """
        super().__init_subclass__(**kwargs)
        if "core_type" not in cls.__dict__:
            return
        kw = inspect.Parameter.KEYWORD_ONLY
        extra = list(inspect.signature(cls.__init__).parameters.values())[1:]
        flower = list(inspect.signature(FedAvg.__init__).parameters.values())[1:]
        params = [
            *core_parameters(cls.core_type),
            *(p for p in extra if p.kind == kw and p.name not in GUARD_ARGS),
            inspect.Parameter("accept_failures", kw, default=True),
            inspect.Parameter("max_failed_rounds", kw, default=DEFAULT_MAX_FAILED_ROUNDS),
            *(p.replace(kind=kw) for p in flower),
        ]
        cls.__doc__ = with_parameters_doc(
            cls.__doc__, parameters_doc(cls.core_type, trailing=GUARD_ARGS_DOC)
        )
        cls.__signature__ = inspect.Signature(params)

    def __init__(
        self,
        *,
        accept_failures: bool = True,
        max_failed_rounds: int = DEFAULT_MAX_FAILED_ROUNDS,
        **kwargs: Any,
    ) -> None:
        flower = {k: kwargs.pop(k) for k in FLOWER_FEDAVG_ARGS if k in kwargs}
        others = (
            f"the others Flower FedAvg's {list(FLOWER_FEDAVG_ARGS)}, accept_failures and "
            "max_failed_rounds"
        )
        self.core = make_core(self.core_type, kwargs, type(self).__name__, others)
        self.accept_failures = accept_failures
        self.failed_rounds = FailedRounds(max_failed_rounds)
        self.state: Any = None
        self.last_round = 0  # the last round aggregated
        self.picked_round = 0  # the last round whose trainers pick() chose
        self.model_keys: list[str] = []
        super().__init__(**flower)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.core!r})"

    def summary(self) -> None:
        """Log the core and ``accept_failures``, then Flower's summary."""
        log(INFO, "\t├──> %r (accept_failures=%s)", self.core, self.accept_failures)
        super().summary()

    # --------------------------------------------------------------- state
    def reset(self, initial_arrays: ArrayRecord) -> None:
        """Set the state before round 1 from the model ``initial_arrays``.

        Also forgets the last round aggregated and the failure streak.

        Parameters
        ----------
        initial_arrays : ArrayRecord
            The initial model; its keys name the model's arrays from then on.
        """
        model = initial_arrays.to_numpy_ndarrays()
        self.model_keys = list(initial_arrays.keys())
        self.core = self.core.for_model(model)
        self.state = self.core.init(model)
        self.last_round = 0
        self.failed_rounds = FailedRounds(self.failed_rounds.limit)

    def broadcast_arrays(self) -> Arrays:
        """Return what the nodes receive this round: ``core.arrays(state)``.

        Returns
        -------
        list of np.ndarray
            The broadcast (the model, then the core's extras, e.g. t).

        Raises
        ------
        RuntimeError
            Before the state is set (``start`` or round 1's ``configure_train``).
        """
        if self.state is None:
            raise RuntimeError(
                f"{type(self).__name__}: no state yet; call start(initial_arrays=...) or "
                "configure_train for round 1 first"
            )
        return self.core.arrays(self.state)

    def as_model(self, model: Arrays) -> ArrayRecord:
        """Put ``model``'s arrays under the keys of ``start``'s initial model.

        Parameters
        ----------
        model : list of np.ndarray
            The model's arrays (any other number of arrays keeps Flower's default keys).

        Returns
        -------
        ArrayRecord
            The arrays, in order.
        """
        if len(model) != len(self.model_keys):
            return ArrayRecord(model)
        return ArrayRecord({k: Array(np.asarray(a)) for k, a in zip(self.model_keys, model)})

    def train_records(self) -> dict[str, ArrayRecord]:
        """Return the train message's ArrayRecords: the model, and what travels beside it.

        Returns
        -------
        dict of str to ArrayRecord
            ``arrayrecord_key``: the broadcast's model arrays under ``start``'s keys (a
            handler's ``model.load_state_dict(...to_torch_state_dict())`` loads them);
            :data:`~fedram_flwr.protocol.ALGORITHM_ARRAYS`: the rest of the broadcast (t,
            eta, the control c), where the algorithm sends more than the model.
        """
        broadcast, n = self.broadcast_arrays(), len(self.model_keys)
        if not n or len(broadcast) <= n:
            return {self.arrayrecord_key: self.as_model(broadcast)}
        extra = {str(n + i): Array(np.asarray(a)) for i, a in enumerate(broadcast[n:])}
        return {
            self.arrayrecord_key: self.as_model(broadcast[:n]),
            ALGORITHM_ARRAYS: ArrayRecord(extra),
        }

    def model_arrays(self) -> ArrayRecord:
        """Return the model part of the state (``core.evaluated``) under the initial keys."""
        return self.as_model(self.core.evaluated(self.broadcast_arrays())[0])

    def diagnostics(self) -> dict[str, Any]:
        """Return the core's diagnostics of the current state (what a recorder logs)."""
        return self.core.diagnostics(self.state)

    # --------------------------------------------------------------- rounds
    def pick(self, server_round: int, nodes: list[int], partitions: list[int]) -> list[int]:
        """Choose the available nodes that train in ``server_round``: all of them.

        Subclasses override it (FedAvg(S) keeps its seeded subset).

        Parameters
        ----------
        server_round : int
            t, >= 1.
        nodes : list of int
            The available node ids, in partition-id order.
        partitions : list of int
            Their partition ids, in the same order.

        Returns
        -------
        list of int
            The node ids that train.
        """
        return nodes

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send the broadcast and the core's config keys to this round's trainers.

        Under an availability wrapper (a :class:`RoundView`: partition-id order, no
        sampling) the trainers are those :meth:`pick` chooses among the available nodes,
        else Flower's sample.

        Parameters
        ----------
        server_round : int
            t, >= 1.
        arrays : ArrayRecord
            In round 1 (or before any state), the initial model; otherwise unused.
        config : ConfigRecord
            The train config; the core's ``fit_config`` keys and ``server-round`` join it.
        grid : Grid
            The grid (or an availability wrapper's view of it).

        Returns
        -------
        iterable of Message
            One train message per trainer.
        """
        if self.state is None or server_round == 1:
            self.reset(arrays)
        config = ConfigRecord({**config, **self.core.fit_config(self.state, server_round)})
        records = self.train_records()
        broadcast = records.pop(self.arrayrecord_key)  # the model, under the app's keys
        if not isinstance(grid, RoundView):
            messages = list(super().configure_train(server_round, broadcast, config, grid))
            for message in messages:
                message.content.update(records)
            return messages
        nodes = sorted(grid.get_node_ids(), key=grid.partition_of.__getitem__)
        nodes = self.pick(server_round, nodes, [grid.partition_of[n] for n in nodes])
        self.picked_round = server_round
        config["server-round"] = server_round
        record = RecordDict(
            {self.arrayrecord_key: broadcast, **records, self.configrecord_key: config}
        )
        return self._construct_messages(record, nodes, MessageType.TRAIN)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Aggregate the round's replies through the round driver and the core.

        :func:`~fedram_flwr.strategies.round_driver.drive_round`: the refusals, the guard,
        the order, the kept subset, the elapsed rounds, ``core.aggregate``.

        Parameters
        ----------
        server_round : int
            t, >= 1.
        replies : iterable of Message
            The round's replies, error replies included.

        Returns
        -------
        tuple of (ArrayRecord or None, MetricRecord or None)
            The new model (``None`` when it did not move) and Flower's aggregated train
            metrics plus the core's diagnostics (``None``: none).

        Raises
        ------
        ValueError
            For a reply that breaks the wire contract
            (:func:`~fedram_flwr.message_api.round_guard.client_reply`).
        FailedRoundsError
            After ``max_failed_rounds`` rounds in a row that aggregated nothing because
            clients failed.
        """
        valid, errors = self._check_and_log_replies(list(replies), is_train=True)
        name = type(self).__name__
        contract = {
            "weighted_by_key": self.weighted_by_key,
            "needs_id": self.needs_partition_id,
            "required_metrics": self.required_metrics,
            "broadcast": self.broadcast_arrays(),
            "layout": self.reply_layout,
        }
        result = drive_round(
            self.core,
            self.state,
            server_round,
            [received(m) for m in valid],
            [error_text(m) for m in errors],
            RoundState(self.failed_rounds, self.last_round),
            RoundPolicy(self.accept_failures),
            reply_of=lambda r: client_reply(r.source, name, **contract),
            strategy=name,
            chosen_before_training=self.picked_round == server_round,
            warn=warn,
        )
        self.failed_rounds, self.last_round = result.rounds.guard, result.rounds.last_round
        if result.outcome is None:
            return None, None
        self.state = result.outcome.state
        metrics = MetricRecord()
        if result.kept:
            contents = [m.content for m, _ in result.kept]
            metrics = self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        metrics = MetricRecord({**metrics, **metric_values(result.outcome.diagnostics)})
        return (self.model_arrays() if result.moved else None), (metrics or None)
