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
from collections.abc import Sequence
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
    PARTITION_ID,
    ClientReply,
    in_partition_order,
    npy_array,
    npy_bytes,
    reply_partition_id,
)
from fedram_flwr.strategies.core import Core
from fedram_flwr.strategies.hyper import (
    core_parameters,
    make_core,
    parameters_doc,
    with_parameters_doc,
)
from fedram_flwr.strategies.rounds import (
    DEFAULT_MAX_FAILED_ROUNDS,
    FailedRounds,
    after_round,
    refusals,
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


def to_reply(res: FitRes, needs_id: bool = True, strategy: str = "strategy") -> ClientReply:
    """A ``FitRes`` as the cores see it; its arrays are decoded when asked for."""
    pid = reply_partition_id(res.metrics, needs_id, strategy)
    return ClientReply(
        pid, res.num_examples, res.metrics, lambda: [npy_array(t) for t in res.parameters.tensors]
    )


class ReplyAggregation:
    """Mixin of ``aggregate_fit`` over a Flower strategy: the guard, the order, the
    elapsed rounds and the fit metrics; the algorithm is :meth:`aggregate_replies`."""

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
        return None

    def aggregate_replies(
        self, server_round: int, replies: list[ClientReply], elapsed: int
    ) -> tuple[NDArrays | None, dict[str, Scalar]]:
        """The new global arrays (``None``: keep the model) and the round's diagnostics."""
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
        why = refusals(
            [r.metrics.get(PARTITION_ID) for _, r in results],
            [r.metrics for _, r in results],
            [partial(to_arrays, r.parameters) for _, r in results],
            self.client_count(),
        )
        failed = [failure_text(f) for f in failures]
        for (proxy, _), reason in zip(results, why):
            if reason is not None:
                failed.append(f"client {proxy.cid}: {reason}")
                log(WARNING, "round %d: %s refused %s", server_round, name, failed[-1])
        taken = [r for (_, r), reason in zip(results, why) if reason is None]
        self.failed_rounds, line = after_round(
            self.failed_rounds, server_round, failed, len(taken), self.accept_failures
        )
        if line:
            log(WARNING, "%s: %s", name, line)
        if failed and not self.accept_failures:
            return None, {}
        replies = in_partition_order(to_reply(r, self.needs_partition_id, name) for r in taken)
        elapsed, self.last_round = server_round - self.last_round, server_round
        arrays, diagnostics = self.aggregate_replies(server_round, replies, elapsed)
        metrics: dict[str, Scalar] = {}
        if self.fit_metrics_aggregation_fn and replies:
            metrics = self.fit_metrics_aggregation_fn(
                [(r.num_examples, r.metrics) for r in replies]
            )
        params = None if arrays is None else to_parameters(arrays)
        return params, {**metrics, **diagnostics}


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

    def client_count(self) -> int | None:
        """The core's N (:meth:`~fedram_flwr.strategies.core.Core.client_count`)."""
        return self.core.client_count()

    def diagnostics(self) -> dict[str, Any]:
        """The core's diagnostics of the current state."""
        return self.core.diagnostics(self.state)

    def checkpoint(self) -> dict[str, Any]:
        """The core's state value, and the last round aggregated."""
        return {**super().checkpoint(), "state": self.state}

    def configure_fit(
        self, server_round: int, parameters: Parameters, client_manager: ClientManager
    ) -> list[tuple[ClientProxy, FitIns]]:
        pairs = super().configure_fit(server_round, parameters, client_manager)
        extra = self.core.fit_config(self.state, server_round)
        for _, ins in pairs:
            ins.config.update(extra)
        return pairs

    def aggregate_replies(
        self, server_round: int, replies: list[ClientReply], elapsed: int
    ) -> tuple[NDArrays | None, dict[str, Scalar]]:
        out = self.core.aggregate(self.state, server_round, replies, elapsed)
        self.state = out.state
        return (self.core.arrays(out.state) if out.aggregated else None), out.diagnostics

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
