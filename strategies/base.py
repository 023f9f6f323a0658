"""Base of the legacy Flower adapters: a core behind Flower's ``Strategy``.

A :class:`~fedram_flwr.strategies.core.Core` behind Flower's ``Strategy`` (through
``FedAvg``, for its client sampling, config and evaluation plumbing):
:class:`CoreStrategy`. What every adapter shares in ``aggregate_fit`` (partition-id
order, the refusals, the failure guard, every round counts) is
:class:`~fedram_flwr.strategies.reply_aggregation.ReplyAggregation`; the conversions
between Flower's wire types and the cores' replies are in
:mod:`~fedram_flwr.strategies.wire`. Both are re-exported here.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from flwr.common import (
    FitIns,
    NDArrays,
    Parameters,
    Scalar,
)
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg as FlowerFedAvg

from fedram_flwr.availability.partition_directory import (
    DEFAULT_QUERY_TIMEOUT,
    PartitionDirectory,
    Placement,
    client_label,
    properties_query,
)
from fedram_flwr.protocol import (
    NUM_EXAMPLES,
    PARTITION_ID,
    ClientReply,
)
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.hyper import (
    core_parameters,
    make_core,
    parameters_doc,
    with_parameters_doc,
)
from fedram_flwr.strategies.reply_aggregation import ReplyAggregation
from fedram_flwr.strategies.rounds import DEFAULT_MAX_FAILED_ROUNDS
from fedram_flwr.strategies.wire import client_id as client_id
from fedram_flwr.strategies.wire import failure_text as failure_text
from fedram_flwr.strategies.wire import received as received
from fedram_flwr.strategies.wire import to_arrays, to_parameters
from fedram_flwr.strategies.wire import to_reply as to_reply
from fedram_flwr.strategies.wire import warn as warn

LEGACY_HINT = (
    f"its client answers get_properties with '{PARTITION_ID}' (and '{NUM_EXAMPLES}', m_i: "
    "the project's NumPyClients do)"
)

FLOWER_FEDAVG_ARGS = tuple(
    p for p in inspect.signature(FlowerFedAvg.__init__).parameters if p not in ("self", "kwargs")
)
"""Flower's legacy ``FedAvg`` arguments, which every strategy here also takes
(``initial_parameters`` aside: the strategy sets it from ``initial_arrays``)."""

INITIAL_ARRAYS_DOC = (
    "initial_arrays : list of np.ndarray, required\n"
    "    The initial model (what ``get_weights`` of the clients' model gives)."
)
FLOWER_ARGS_DOC = (
    "max_failed_rounds : int, default 3\n"
    "    Rounds in a row that aggregate nothing because clients failed before the run\n"
    "    stops (:class:`~fedram_flwr.strategies.rounds.FailedRoundsError`).\n"
    "**fedavg_kwargs\n"
    "    Flower ``FedAvg``'s arguments (``fraction_fit``, ``evaluate_fn``,\n"
    "    ``on_fit_config_fn``, ``fit_metrics_aggregation_fn``, ``accept_failures``, ...)."
)


class CoreStrategy(ReplyAggregation, FlowerFedAvg):
    """A core as a legacy Flower ``Strategy``.

    ``self.state`` is the core's state, replaced by each aggregation; :meth:`diagnostics`
    is what the recorder logs. Subclasses set ``core_type``; their keyword-only constructor takes
    ``initial_arrays`` (the initial model), the core's hyper-parameters (declared once
    on the core: :mod:`~fedram_flwr.strategies.hyper`), ``max_failed_rounds`` and
    Flower ``FedAvg``'s arguments (sampling fractions, ``evaluate_fn``,
    ``on_fit_config_fn``, ``fit_metrics_aggregation_fn``, ``accept_failures``, ...).
    The signature ``help()`` shows and the docstring's ``Parameters`` are built from
    the core's declarations. ``CoreStrategy(core, initial_arrays=...)`` serves a core
    built beforehand.

    Parameters
    ----------
    core : Core or None
        A core built beforehand (``None``: built from ``kwargs`` by the subclass's
        ``core_type``).
    initial_arrays : list of np.ndarray, required
        The initial model (what ``get_weights`` of the clients' model gives).
    **kwargs
        The core's hyper-parameters (when ``core`` is ``None``), ``max_failed_rounds``
        and Flower ``FedAvg``'s arguments.

    Raises
    ------
    TypeError
        On an argument neither the core, Flower's ``FedAvg`` nor this class takes, or a
        missing required one.
    """

    query_timeout = DEFAULT_QUERY_TIMEOUT  # s: a partition-id question waits at most this
    own_partitions: PartitionDirectory[str] | None = None  # without an oracle: its own

    core_type: ClassVar[type[Core]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Build the signature and ``Parameters`` of a subclass that sets ``core_type``."""
        super().__init_subclass__(**kwargs)
        if "core_type" not in cls.__dict__:
            return
        kw = inspect.Parameter.KEYWORD_ONLY
        extra = list(inspect.signature(cls.__init__).parameters.values())[1:]
        flower = list(inspect.signature(FlowerFedAvg.__init__).parameters.values())[1:]
        cls.__signature__ = inspect.Signature(
            [
                inspect.Parameter("initial_arrays", kw),
                *core_parameters(cls.core_type),
                *(p for p in extra if p.kind == kw and p.name != "initial_arrays"),
                inspect.Parameter("max_failed_rounds", kw, default=DEFAULT_MAX_FAILED_ROUNDS),
                *(p.replace(kind=kw) for p in flower if p.name != "initial_parameters"),
            ]
        )
        section = parameters_doc(cls.core_type, INITIAL_ARRAYS_DOC, FLOWER_ARGS_DOC)
        cls.__doc__ = with_parameters_doc(cls.__doc__, section)

    def __init__(
        self, core: Core | None = None, *, initial_arrays: NDArrays, **kwargs: Any
    ) -> None:
        flower = {
            k: kwargs.pop(k) for k in (*FLOWER_FEDAVG_ARGS, "max_failed_rounds") if k in kwargs
        }
        if core is None:
            others = "the others Flower FedAvg's and max_failed_rounds"
            core = make_core(self.core_type, kwargs, type(self).__name__, others)
        elif kwargs:
            raise TypeError(f"{type(self).__name__}: unknown argument(s) {sorted(kwargs)}")
        self.core = core.for_model(initial_arrays)
        self.state = self.core.init(initial_arrays)
        initial = to_parameters(self.core.arrays(self.state))
        super().__init__(initial_parameters=initial, **flower)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.core!r})"

    def diagnostics(self) -> dict[str, Any]:
        """Return the core's diagnostics of the current state (what the recorder logs)."""
        return self.core.diagnostics(self.state)

    def checkpoint(self) -> dict[str, Any]:
        """Return the core's state value, and the last round aggregated."""
        return {**super().checkpoint(), "state": self.state}

    def placements(
        self, client_manager: ClientManager, proxies: Iterable[ClientProxy], *, sizes: bool = False
    ) -> dict[str, Placement]:
        """Place ``proxies``: each one's partition id (and m_i when ``sizes``).

        From the oracle's partition directory when ``client_manager`` is an oracle (a
        client it placed is not asked again), else from this strategy's own; new clients
        are asked once, concurrently, waiting at most ``query_timeout`` s.

        Parameters
        ----------
        client_manager : ClientManager
            The server's client manager (an oracle's carries a partition directory).
        proxies : iterable of ClientProxy
            The clients to place.
        sizes : bool
            Whether m_i (the client's number of examples) is needed too.

        Returns
        -------
        dict of str to Placement
            cid -> :class:`~fedram_flwr.availability.partition_directory.Placement`.

        Raises
        ------
        AvailabilityError
            If a new client answers wrongly, or gives no partition id (and m_i when
            ``sizes``) within ``query_timeout`` s
            (:class:`~fedram_flwr.availability.partition_directory.AvailabilityError`).
        """
        directory = getattr(client_manager, "partitions", None)
        if not isinstance(directory, PartitionDirectory):
            if self.own_partitions is None:
                self.own_partitions = PartitionDirectory(self.query_timeout, label=client_label)
            directory = self.own_partitions
        proxies = list(proxies)
        return directory.require(
            [p.cid for p in proxies],
            properties_query(proxies),
            type(self).__name__,
            LEGACY_HINT,
            sizes=sizes,
            timeout=self.query_timeout,
        )

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        """Sample the round's clients as Flower's ``FedAvg`` does, adding the core's config.

        Parameters
        ----------
        server_round : int
            t, >= 1.
        parameters : Parameters
            The current global model.
        client_manager : ClientManager
            The server's client manager.

        Returns
        -------
        list of tuple of (ClientProxy, FitIns)
            Each sampled client and its instructions; the config carries the core's
            :meth:`~fedram_flwr.strategies.core.Core.fit_config` entries.
        """
        pairs = super().configure_fit(server_round, parameters, client_manager)
        extra = self.core.fit_config(self.state, server_round)
        for _, ins in pairs:
            ins.config.update(extra)
        return pairs

    def round_core(self) -> tuple[Core, Any]:
        """Return the core and its state."""
        return self.core, self.state

    def take_outcome(self, outcome: Outcome) -> NDArrays | None:
        """Keep ``outcome``'s state; return its arrays if it aggregated, else ``None``."""
        self.state = outcome.state
        return self.core.arrays(outcome.state) if outcome.aggregated else None

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, Scalar]] | None:
        """Run ``evaluate_fn`` on the model part of the arrays; the core's extras beside.

        Parameters
        ----------
        server_round : int
            t, >= 0 (0: the initial model).
        parameters : Parameters
            The global arrays (the model, then any of the core's extras).

        Returns
        -------
        tuple of (float, dict of str to Scalar) or None
            Loss and metrics (``evaluate_fn``'s and the core's extras); ``None`` without
            ``evaluate_fn`` or when it returns ``None``.
        """
        if self.evaluate_fn is None:
            return None
        model, extra = self.core.evaluated(to_arrays(parameters))
        result = self.evaluate_fn(server_round, model, {})
        if result is None:
            return None
        loss, metrics = result
        return loss, {**metrics, **extra}


def replies_by_id(replies: Sequence[ClientReply]) -> dict[int, ClientReply]:
    """Index replies by partition id.

    Parameters
    ----------
    replies : sequence of ClientReply
        Replies with distinct partition ids.

    Returns
    -------
    dict of int to ClientReply
        {partition id: reply}.
    """
    return {r.partition_id: r for r in replies}
