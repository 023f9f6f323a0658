"""The one base of the legacy Flower adapters: a :class:`~fedram_flwr.strategies.core.Core`
behind Flower's ``Strategy`` (through ``FedAvg``, for its client sampling, config and
evaluation plumbing).

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
from fedram_flwr.strategies.partitions import (
    DEFAULT_QUERY_TIMEOUT,
    PartitionDirectory,
    Placement,
    client_label,
    properties_query,
)
from fedram_flwr.strategies.round_driver import Received, RoundPolicy, RoundState, drive_round
from fedram_flwr.strategies.rounds import DEFAULT_MAX_FAILED_ROUNDS, FailedRounds

LEGACY_HINT = (
    f"its client answers get_properties with '{PARTITION_ID}' (and '{NUM_EXAMPLES}', m_i: "
    "the project's NumPyClients do)"
)


def to_parameters(arrays: NDArrays) -> Parameters:
    """Flower's ``ndarrays_to_parameters``, byte for byte, by the protocol's codec
    (:func:`~fedram_flwr.protocol.npy_bytes`; ~20x cheaper for a small model, which
    matters when it runs every round)."""
    return Parameters(tensors=[npy_bytes(a) for a in arrays], tensor_type="numpy.ndarray")


def to_arrays(parameters: Parameters) -> NDArrays:
    """Flower's ``parameters_to_ndarrays`` (the same arrays) by the protocol's codec
    (:func:`~fedram_flwr.protocol.npy_array`)."""
    return [npy_array(t) for t in parameters.tensors]


def client_id(res: FitRes) -> int:
    """The partition id a client reports in its fit metrics."""
    return int(res.metrics[PARTITION_ID])


def failure_text(failure: tuple[ClientProxy, FitRes] | BaseException) -> str:
    """One failure of a round (Flower's ``failures`` entry) as the log quotes it."""
    if isinstance(failure, BaseException):
        return f"{type(failure).__name__}: {failure}"
    proxy, res = failure
    return f"client {proxy.cid}: {res.status.code.name}: {res.status.message}"


def received(proxy: ClientProxy | None, res: FitRes) -> Received[FitRes]:
    """A ``FitRes`` as the round driver screens it (its sender named by its proxy)."""
    sender = "a client" if proxy is None else f"client {proxy.cid}"
    return Received(
        res, sender, res.metrics.get(PARTITION_ID), res.metrics, partial(to_arrays, res.parameters)
    )


def warn(line: str) -> None:
    """A round's warning in Flower's log."""
    log(WARNING, "%s", line)


def to_reply(res: FitRes, needs_id: bool = True, strategy: str = "strategy") -> ClientReply:
    """A ``FitRes`` as the cores see it; its arrays are decoded when asked for."""
    pid = reply_partition_id(res.metrics, needs_id, strategy)
    return ClientReply(
        pid, res.num_examples, res.metrics, lambda: [npy_array(t) for t in res.parameters.tensors]
    )


class ReplyAggregation:
    """Mixin of ``aggregate_fit`` over a Flower strategy: ``FitRes`` as the round
    driver's :class:`~fedram_flwr.strategies.round_driver.Received` replies, the round
    (:func:`~fedram_flwr.strategies.round_driver.drive_round`: the guard, the order, the
    elapsed rounds, the core's aggregation) and the fit metrics; the core is
    :meth:`round_core`."""

    accept_failures: bool
    fit_metrics_aggregation_fn: Any
    needs_partition_id = True  # False: plain FedAvg also serves stock Flower clients
    last_round = 0  # the last round aggregated

    def __init__(
        self, *args: Any, max_failed_rounds: int = DEFAULT_MAX_FAILED_ROUNDS, **kwargs: Any
    ) -> None:
        """``max_failed_rounds``: rounds in a row that aggregate nothing because clients
        failed before the run stops (:class:`~fedram_flwr.strategies.rounds.FailedRounds`);
        the rest goes to the Flower strategy."""
        self.failed_rounds = FailedRounds(max_failed_rounds)
        super().__init__(*args, **kwargs)

    def client_count(self) -> int | None:
        """N: reply partition ids must lie in 0..N-1 (``None``: any id >= 0)."""
        return self.round_core()[0].client_count()

    def round_core(self) -> tuple[Core, Any]:
        """The core that aggregates this round's replies, and its state."""
        raise NotImplementedError

    def take_outcome(self, outcome: Outcome) -> NDArrays | None:
        """Keep ``outcome``'s state; the new global arrays (``None``: keep the model)."""
        raise NotImplementedError

    def checkpoint(self) -> dict[str, Any]:
        """What this strategy carries from one round to the next, by attribute name (a
        run's checkpoint): the last round aggregated. What Flower's classes hold is set
        anew each round (QFedAvg's ``pre_weights`` in ``configure_fit``)."""
        return {"last_round": self.last_round}

    def restore(self, saved: dict[str, Any]) -> None:
        """Take back what :meth:`checkpoint` gave (resuming a run)."""
        for name, value in saved.items():
            setattr(self, name, value)

    def aggregate_fit(
        self,
        server_round: int,
        results: list[tuple[ClientProxy, FitRes]],
        failures: list[tuple[ClientProxy, FitRes] | BaseException],
    ) -> tuple[Parameters | None, dict[str, Scalar]]:
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
    """A core as a legacy Flower ``Strategy``. ``self.state`` is the core's state,
    replaced by each aggregation; :meth:`diagnostics` is what the recorder logs.

    Subclasses set ``core_type``; their keyword-only constructor takes
    ``initial_arrays`` (the initial model), the core's hyper-parameters (declared once
    on the core: :mod:`~fedram_flwr.strategies.hyper`), ``max_failed_rounds`` and
    Flower ``FedAvg``'s arguments (sampling fractions, ``evaluate_fn``,
    ``on_fit_config_fn``, ``fit_metrics_aggregation_fn``, ``accept_failures``, ...).
    The signature ``help()`` shows and the docstring's ``Parameters`` are built from
    the core's declarations. ``CoreStrategy(core, initial_arrays=...)`` serves a core
    built beforehand."""

    query_timeout = DEFAULT_QUERY_TIMEOUT  # s: a partition-id question waits at most this
    own_partitions: PartitionDirectory[str] | None = None  # without an oracle: its own

    core_type: ClassVar[type[Core]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Signature and ``Parameters`` of a subclass that sets ``core_type``."""
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
        """The core's diagnostics of the current state."""
        return self.core.diagnostics(self.state)

    def checkpoint(self) -> dict[str, Any]:
        """The core's state value, and the last round aggregated."""
        return {**super().checkpoint(), "state": self.state}

    def placements(
        self, client_manager: ClientManager, proxies: Iterable[ClientProxy], *, sizes: bool = False
    ) -> dict[str, Placement]:
        """cid -> :class:`~fedram_flwr.strategies.partitions.Placement` (partition id,
        m_i when ``sizes``) of ``proxies``, from the oracle's partition directory when
        ``client_manager`` is an oracle (a client it placed is not asked again), else
        from this strategy's own; new clients are asked once, concurrently, waiting at
        most ``query_timeout`` s; one that does not answer is an error."""
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
        pairs = super().configure_fit(server_round, parameters, client_manager)
        extra = self.core.fit_config(self.state, server_round)
        for _, ins in pairs:
            ins.config.update(extra)
        return pairs

    def round_core(self) -> tuple[Core, Any]:
        """The core and its state."""
        return self.core, self.state

    def take_outcome(self, outcome: Outcome) -> NDArrays | None:
        self.state = outcome.state
        return self.core.arrays(outcome.state) if outcome.aggregated else None

    def evaluate(
        self, server_round: int, parameters: Parameters
    ) -> tuple[float, dict[str, Scalar]] | None:
        """``evaluate_fn`` on the model part of the arrays; the core's extras beside."""
        if self.evaluate_fn is None:
            return None
        model, extra = self.core.evaluated(to_arrays(parameters))
        result = self.evaluate_fn(server_round, model, {})
        if result is None:
            return None
        loss, metrics = result
        return loss, {**metrics, **extra}


def replies_by_id(replies: Sequence[ClientReply]) -> dict[int, ClientReply]:
    """{partition id: reply}."""
    return {r.partition_id: r for r in replies}
