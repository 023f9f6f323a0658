"""Base of the legacy Flower adapters: a core behind Flower's ``Strategy``.

A :class:`~fedram_flwr.strategies.core.Core` behind Flower's ``Strategy`` (through
``FedAvg``, for its client sampling, config and evaluation plumbing).

What every adapter shares is written here once: results taken in partition-id order
(sums are the same in every engine, whatever order the replies arrived in), the refusal
of replies that are no update (:func:`~fedram_flwr.strategies.rounds.refusals`: a bad or
duplicated partition id, NaN or inf; each a failure of its client, named in the log),
the failure guard (``accept_failures=False``: a round with a failure aggregates nothing
and leaves the state as it was; ``max_failed_rounds`` rounds in a row that aggregated
nothing because clients failed stop the run with
:class:`~fedram_flwr.strategies.rounds.FailedRoundsError`), the fit-metrics aggregation,
and the rule that every round counts. The engines' server
(:class:`~fedram_flwr.engines.server.StrategyEveryRound`) calls ``aggregate_fit`` with
no results in a round in which nobody is available, and the core decides (FedAR and MIFA
step from memory, the others keep the model); under Flower's stock ``Server``, which
skips such a round, the core still learns how many rounds elapsed since the last
aggregation.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from functools import partial
from logging import WARNING
from typing import Any, ClassVar

from flwr.common import (
    FitIns,
    FitRes,
    NDArrays,
    Parameters,
    Scalar,
)
from flwr.common.logger import log
from flwr.server.client_manager import ClientManager
from flwr.server.client_proxy import ClientProxy
from flwr.server.strategy import FedAvg as FlowerFedAvg

from fedram_flwr.partition_directory import (
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
    npy_array,
    npy_bytes,
    reply_partition_id,
)
from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.hyper import (
    core_parameters,
    make_core,
    parameters_doc,
    with_parameters_doc,
)
from fedram_flwr.strategies.round_driver import Received, RoundPolicy, RoundState, drive_round
from fedram_flwr.strategies.rounds import DEFAULT_MAX_FAILED_ROUNDS, FailedRounds

LEGACY_HINT = (
    f"its client answers get_properties with '{PARTITION_ID}' (and '{NUM_EXAMPLES}', m_i: "
    "the project's NumPyClients do)"
)


def to_parameters(arrays: NDArrays) -> Parameters:
    """Encode arrays as Flower's ``ndarrays_to_parameters`` does, byte for byte.

    By the protocol's codec (:func:`~fedram_flwr.protocol.npy_bytes`; ~20x cheaper for a
    small model, which matters when it runs every round).

    Parameters
    ----------
    arrays : list of np.ndarray
        The arrays, any shapes and dtypes.

    Returns
    -------
    flwr.common.Parameters
        One ``.npy`` blob per array, ``tensor_type="numpy.ndarray"``.
    """
    return Parameters(tensors=[npy_bytes(a) for a in arrays], tensor_type="numpy.ndarray")


def to_arrays(parameters: Parameters) -> NDArrays:
    """Decode Flower ``Parameters`` into the arrays ``parameters_to_ndarrays`` gives.

    By the protocol's codec (:func:`~fedram_flwr.protocol.npy_array`).

    Parameters
    ----------
    parameters : flwr.common.Parameters
        One ``.npy`` blob per array.

    Returns
    -------
    list of np.ndarray
        The arrays, in order.
    """
    return [npy_array(t) for t in parameters.tensors]


def client_id(res: FitRes) -> int:
    """Return the partition id a client reports in its fit metrics.

    Parameters
    ----------
    res : FitRes
        A client's fit result, with ``partition-id`` in its metrics.

    Returns
    -------
    int
        The partition id, >= 0 for the project's clients.
    """
    return int(res.metrics[PARTITION_ID])


def failure_text(failure: tuple[ClientProxy, FitRes] | BaseException) -> str:
    """Describe one failure of a round (Flower's ``failures`` entry) as the log quotes it.

    Parameters
    ----------
    failure : tuple of (ClientProxy, FitRes) or BaseException
        An entry of Flower's ``failures``: an exception, or a reply with a non-OK status.

    Returns
    -------
    str
        ``"ExcType: message"`` or ``"client <cid>: <status code>: <status message>"``.
    """
    if isinstance(failure, BaseException):
        return f"{type(failure).__name__}: {failure}"
    proxy, res = failure
    return f"client {proxy.cid}: {res.status.code.name}: {res.status.message}"


def received(proxy: ClientProxy | None, res: FitRes) -> Received[FitRes]:
    """Wrap a ``FitRes`` as the round driver screens it (its sender named by its proxy).

    Parameters
    ----------
    proxy : ClientProxy or None
        The sender (``None``: named "a client").
    res : FitRes
        Its fit result; its arrays are decoded only when the driver asks for them.

    Returns
    -------
    Received
        The reply, its sender's name, its claimed partition id and metrics.
    """
    sender = "a client" if proxy is None else f"client {proxy.cid}"
    return Received(
        res, sender, res.metrics.get(PARTITION_ID), res.metrics, partial(to_arrays, res.parameters)
    )


def warn(line: str) -> None:
    """Log a round's warning in Flower's log (level ``WARNING``).

    Parameters
    ----------
    line : str
        The warning, logged as is.
    """
    log(WARNING, "%s", line)


def to_reply(res: FitRes, needs_id: bool = True, strategy: str = "strategy") -> ClientReply:
    """Convert a ``FitRes`` into the reply the cores see; its arrays decode when asked for.

    Parameters
    ----------
    res : FitRes
        A client's fit result.
    needs_id : bool
        Whether the metrics must carry a partition id (``False``: plain FedAvg, which also
        serves stock Flower clients).
    strategy : str
        The strategy's name, for the error message.

    Returns
    -------
    ClientReply
        Partition id, m_i (``num_examples``), metrics and a lazy decoder of the arrays.

    Raises
    ------
    ValueError
        If ``needs_id`` and the metrics carry no valid partition id
        (:func:`~fedram_flwr.protocol.reply_partition_id`).
    """
    pid = reply_partition_id(res.metrics, needs_id, strategy)
    return ClientReply(
        pid, res.num_examples, res.metrics, lambda: [npy_array(t) for t in res.parameters.tensors]
    )


class ReplyAggregation:
    """Mixin of ``aggregate_fit`` over a Flower strategy.

    ``FitRes`` become the round driver's
    :class:`~fedram_flwr.strategies.round_driver.Received` replies, the round is
    :func:`~fedram_flwr.strategies.round_driver.drive_round` (the guard, the order, the
    elapsed rounds, the core's aggregation), then the fit metrics are aggregated; the core
    is :meth:`round_core`.

    Parameters
    ----------
    *args
        Passed on to the Flower strategy.
    max_failed_rounds : int, default 3
        Rounds in a row that aggregate nothing because clients failed before the run
        stops (:class:`~fedram_flwr.strategies.rounds.FailedRounds`), >= 1.
    **kwargs
        Passed on to the Flower strategy.
    """

    accept_failures: bool
    fit_metrics_aggregation_fn: Any
    needs_partition_id = True  # False: plain FedAvg also serves stock Flower clients
    last_round = 0  # the last round aggregated

    def __init__(
        self, *args: Any, max_failed_rounds: int = DEFAULT_MAX_FAILED_ROUNDS, **kwargs: Any
    ) -> None:
        """Set up the failure guard; the other arguments go to the Flower strategy."""
        self.failed_rounds = FailedRounds(max_failed_rounds)
        super().__init__(*args, **kwargs)

    def client_count(self) -> int | None:
        """Return N: reply partition ids must lie in 0..N-1 (``None``: any id >= 0)."""
        return self.round_core()[0].client_count()

    def round_core(self) -> tuple[Core, Any]:
        """Return the core that aggregates this round's replies, and its state.

        Returns
        -------
        tuple of (Core, Any)
            The core and its current state.
        """
        raise NotImplementedError

    def take_outcome(self, outcome: Outcome) -> NDArrays | None:
        """Keep ``outcome``'s state and return the new global arrays.

        Parameters
        ----------
        outcome : Outcome
            The core's aggregation of the round.

        Returns
        -------
        list of np.ndarray or None
            The new global arrays (``None``: keep the model).
        """
        raise NotImplementedError

    def checkpoint(self) -> dict[str, Any]:
        """Return what this strategy carries from one round to the next, by attribute name.

        A run's checkpoint: the last round aggregated. What Flower's classes hold is set
        anew each round (QFedAvg's ``pre_weights`` in ``configure_fit``).

        Returns
        -------
        dict of str to Any
            ``{"last_round": t}``, t >= 0 (0: none yet).
        """
        return {"last_round": self.last_round}

    def restore(self, saved: dict[str, Any]) -> None:
        """Take back what :meth:`checkpoint` gave (resuming a run).

        Parameters
        ----------
        saved : dict of str to Any
            Attribute name -> value, as :meth:`checkpoint` returned them.
        """
        for name, value in saved.items():
            setattr(self, name, value)

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """Aggregate a round's replies through the core.

        Replies are screened (:func:`~fedram_flwr.strategies.rounds.refusals`) and taken
        in partition-id order; with ``accept_failures=False`` a round with a failure
        aggregates nothing and keeps the state.

        Parameters
        ----------
        server_round : int
            t, >= 1.
        results : list of tuple of (ClientProxy, FitRes)
            The replies, in any order.
        failures : list of tuple of (ClientProxy, FitRes) or BaseException
            The round's failures.

        Returns
        -------
        tuple of (Parameters or None, dict of str to Scalar)
            The new global model (``None``: keep the model) and the round's metrics: the
            aggregated fit metrics and the core's diagnostics.

        Raises
        ------
        FailedRoundsError
            After ``max_failed_rounds`` rounds in a row that aggregated nothing because
            clients failed.
        """
        name = type(self).__name__
        core, state = self.round_core()
        result = drive_round(
            core,
            state,
            server_round,
            [received(proxy, res) for proxy, res in results],
            [failure_text(f) for f in failures],
            RoundState(self.failed_rounds, self.last_round),
            RoundPolicy(self.accept_failures),
            reply_of=lambda r: to_reply(r.source, self.needs_partition_id, name),
            strategy=name,
            warn=warn,
        )
        self.failed_rounds, self.last_round = result.rounds.guard, result.rounds.last_round
        if result.outcome is None:
            return None, {}
        arrays = self.take_outcome(result.outcome)
        metrics: dict[str, Scalar] = {}
        if self.fit_metrics_aggregation_fn and result.kept:
            metrics = self.fit_metrics_aggregation_fn(
                [(r.num_examples, r.metrics) for _, r in result.kept]
            )
        params = None if arrays is None else to_parameters(arrays)
        return params, {**metrics, **result.outcome.diagnostics}


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
            cid -> :class:`~fedram_flwr.partition_directory.Placement`.

        Raises
        ------
        AvailabilityError
            If a new client answers wrongly, or gives no partition id (and m_i when
            ``sizes``) within ``query_timeout`` s
            (:class:`~fedram_flwr.partition_directory.AvailabilityError`).
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
