"""The legacy adapters' ``aggregate_fit``, written once: :class:`ReplyAggregation`.

What every adapter shares: results taken in partition-id order
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

A mixin over any Flower strategy: :class:`~fedram_flwr.strategies.base.CoreStrategy`
(over ``FedAvg``) and :class:`~fedram_flwr.strategies.qffl.QFFL` (over ``QFedAvg``).
"""

from __future__ import annotations

from typing import Any

from flwr.common import FitRes, NDArrays, Parameters, Scalar
from flwr.server.client_proxy import ClientProxy

from fedram_flwr.strategies.core import Core, Outcome
from fedram_flwr.strategies.round_driver import RoundPolicy, RoundState, drive_round
from fedram_flwr.strategies.rounds import DEFAULT_MAX_FAILED_ROUNDS, FailedRounds
from fedram_flwr.strategies.wire import failure_text, received, to_parameters, to_reply, warn


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
