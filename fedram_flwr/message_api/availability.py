"""Availability for any Message-API strategy, decided by an oracle.

Only the nodes an oracle makes available in a server round train and evaluate in it.

Flower 1.39's Message API has no availability model and no sampling hook: ``FedAvg``
(and every strategy built on it: FedProx, FedAdam, QFedAvg, ...) picks nodes in
``configure_train`` / ``configure_evaluate`` with ``strategy_utils.sample_nodes``, which
polls ``grid.get_node_ids()`` with no time limit until ``min_available_nodes`` are
connected, then draws with the unseeded ``random.sample``. :func:`with_availability`
wraps any such strategy, unchanged, in :class:`AvailabilityStrategy`:

- **The strategy's own loop runs.** ``start`` runs the wrapped strategy's own ``start``
  (Flower's loop, or an app's override with its own round loop, results files and
  checkpoints); while it runs, the ``configure_train``, ``configure_evaluate``,
  ``aggregate_train`` and ``summary`` it calls on itself are the wrapper's, which call
  the strategy's own (its overrides included: a learning-rate schedule in
  ``configure_train`` stays) on the round's view of the grid. The round is the one the
  loop passes to ``configure_*``, so the nodes shown are known before any message is
  built.
- **Keyed on the server round.** Round r relays ``oracle.draw(r)`` (the oracle's law,
  a pure function of (seed, r), :mod:`fedram_flwr.availability`); training and
  evaluation of round r get the same nodes, only the round number advances the law,
  a restarted run replays the same draws. For the ``connected`` oracle "available"
  means: the grid's connected nodes when round r's training is configured (or
  ``clients_per_round`` of them drawn by (seed, r)); not replayable, by nature.
- **The server cannot pick.** The wrapped strategy decides *what* is sent (its
  messages' content and type), the oracle decides *to whom*: every available node,
  in partition-id order, whatever the strategy's fractions and minimum sizes. A
  strategy that configures nothing (``fraction_train`` or ``fraction_evaluate`` = 0)
  skips that phase; any other fraction means "the available set". To that end the
  strategy configures with a view of the grid whose ``get_node_ids()`` are the
  available nodes padded with stand-in ids up to its ``min_available_nodes``,
  ``min_train_nodes`` and ``min_evaluate_nodes`` (where it has them), so Flower's
  unbounded wait in ``sample_nodes`` cannot be reached; a strategy that still polls
  the view more than :data:`MAX_POLLS` times in one call gets an error. A strategy
  whose class sets ``picks_among_available = True`` (the project's strategies: FedAvg(S)'s
  seeded subset, rFedFair's draws by p_i, CA-Fed, ...) instead sees exactly the available
  nodes, with their partition ids in the view's ``partition_of`` (and the m_i the nodes
  reported in its ``num_examples``), and its messages go where it addresses them, which
  must be available nodes: exactly the nodes it selects train.
- **Empty rounds** (nobody available) send nothing; the strategy's ``aggregate_train``
  gets no replies (Flower's FedAvg family returns no arrays: ``start`` keeps the model)
  and the loop goes on.
- **Failed rounds stop the run.** A reply with NaN or inf in its metrics or arrays (or
  a second reply of a node) is refused: never handed to the strategy, named in the log
  and counted as a failure of its node. A round in which every selected node failed
  is logged each time (the round, the failures, the first error); ``max_failed_rounds``
  such rounds in a row raise :class:`~fedram_flwr.strategies.rounds.FailedRoundsError`
  quoting the first error, whatever the strategy (Flower's own FedAvg would otherwise
  save an untrained model). A strategy with its own guard (the project's: a
  ``failed_rounds`` attribute) screens and counts its replies itself, with its own
  ``max_failed_rounds``; one that wraps such a strategy (Flower's DP wrappers, which
  skip a round with an error reply before the strategy they wrap sees it) does not.
- **The partition-id contract.** Oracles know clients by partition id, Flower names
  nodes by random ids: each node is asked its partition id once (the ``connected``
  oracle: each newly connected node), through the run's partition directory, with a
  bounded wait (:mod:`~fedram_flwr.message_api.partitions`; the handler the user's
  ClientApp registers is :func:`partition_id_query`). Waiting for the nodes and learning
  their partition ids is the mixin
  :class:`~fedram_flwr.message_api.node_discovery.NodeDiscovery`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedram_flwr.availability.connected import ConnectedClientManager
from fedram_flwr.availability.laws import connected_sample
from fedram_flwr.availability.manager import OracleClientManager
from fedram_flwr.availability.partition_directory import PartitionDirectory
from fedram_flwr.message_api.node_discovery import NodeDiscovery
from fedram_flwr.message_api.round_guard import error_text, received, warn
from fedram_flwr.message_api.round_view import (
    MAX_POLLS,
    RoundView,
    check_addressed,
    minimum_sizes,
    readdress,
    standing_in,
)
from fedram_flwr.strategies.round_driver import RoundPolicy, screen_round
from fedram_flwr.strategies.rounds import (
    DEFAULT_MAX_FAILED_ROUNDS,
    FailedRounds,
    check_max_failed_rounds,
)

STOOD_IN = ("configure_train", "configure_evaluate", "aggregate_train", "summary")
"""The wrapped strategy's methods the wrapper stands in for while its ``start`` runs."""

__all__ = ["MAX_POLLS", "AvailabilityStrategy", "RoundView", "with_availability"]


class AvailabilityStrategy(NodeDiscovery, Strategy):
    """A Message-API strategy that trains round r only on the oracle's nodes of round r.

    ``strategy`` (unchanged) trains and evaluates round r on exactly the nodes
    ``oracle`` makes available in round r (see the module docstring). Attributes not
    defined here are the wrapped strategy's.

    Parameters
    ----------
    strategy : Strategy
        Any Message-API strategy.
    oracle : OracleClientManager
        Decides who is available (:mod:`fedram_flwr.availability`).
    wait_timeout : float, optional
        Seconds, >= 0, the first round waits for the nodes the oracle needs; default
        the oracle's ``wait_timeout``.
    query_timeout : float, optional
        Seconds, > 0, the partition-id query waits for answers; default the oracle's
        ``wait_timeout``.
    poll_interval : float
        Seconds, >= 0, between two looks at the grid while waiting.
    max_failed_rounds : int
        Rounds in a row in which every selected node failed before the run stops (for
        a strategy without a guard of its own), >= 1.

    Attributes
    ----------
    relayed : dict of int to list of int
        Round r -> the partition ids round r relayed.
    connected : dict of int to list of int
        Under the ``connected`` oracle, round r -> the partitions connected when round
        r was configured.

    Raises
    ------
    ValueError
        If ``max_failed_rounds``, a timeout or the poll interval is out of range.
    """

    def __init__(
        self,
        strategy: Strategy,
        oracle: OracleClientManager,
        *,
        wait_timeout: float | None = None,
        query_timeout: float | None = None,
        poll_interval: float = 1.0,
        max_failed_rounds: int = DEFAULT_MAX_FAILED_ROUNDS,
    ) -> None:
        if getattr(strategy, "asynchronous", False) is True:
            raise ValueError(
                f"{type(strategy).__name__} is asynchronous: it has no rounds for an oracle "
                f"to key on; give it the oracle itself, {type(strategy).__name__}(..., "
                "oracle=oracle)"
            )
        self.strategy, self.oracle = strategy, oracle
        self.failed_rounds = FailedRounds(check_max_failed_rounds(max_failed_rounds))
        self.wait_timeout = oracle.wait_timeout if wait_timeout is None else wait_timeout
        self.query_timeout = oracle.wait_timeout if query_timeout is None else query_timeout
        self.poll_interval = poll_interval
        for name, least in (("wait_timeout", 0), ("query_timeout", 1e-9), ("poll_interval", 0)):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < least:
                sign = ">=" if least == 0 else ">"
                raise ValueError(f"{name}: {value!r} must be a number of seconds {sign} 0")
        self.partitions: PartitionDirectory[int] = PartitionDirectory(
            self.query_timeout, oracle.num_clients
        )  # node id -> partition id and m_i, each node asked once
        self.relayed: dict[int, list[int]] = {}  # round -> partition ids relayed
        self.connected: dict[int, list[int]] = {}  # round -> partitions connected (connected)
        self._round: tuple[int, list[int]] | None = None  # (round, its node ids)
        self._own: dict[str, Callable[..., Any]] = {}  # the strategy's methods, while stood in

    @property
    def partition_of(self) -> dict[int, int]:
        """Node id -> partition id of every node placed so far."""
        return self.partitions.partition_of()

    @property
    def num_examples(self) -> dict[int, int]:
        """Partition id -> m_i, where nodes report it."""
        return self.partitions.num_examples()

    def __getattr__(self, name: str) -> Any:
        if name in ("strategy", "_own"):  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.strategy, name)

    # ---------------------------------------------------------- Strategy methods
    def summary(self) -> None:
        """Log the wrapped strategy's summary, then the oracle that picks the nodes."""
        self.own("summary")()
        log(INFO, "\t└──> Availability: %s oracle picks the nodes", type(self.oracle).__name__)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Configure the strategy's training, sent to the round's available nodes.

        Arguments as for Flower's ``Strategy.configure_train``; ``server_round`` >= 1.
        """
        return self._relay(self.own("configure_train"), server_round, arrays, config, grid)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Configure the strategy's evaluation, sent to the same nodes as its training."""
        return self._relay(self.own("configure_evaluate"), server_round, arrays, config, grid)

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], Any] | None = None,
    ) -> Any:
        """Run the wrapped strategy's own ``start``, this wrapper standing in for its rounds.

        Its ``start`` runs as it is written (Flower's loop, or an override: its own
        round loop, files, checkpoints and logs); for the duration of the call, the
        ``configure_train``, ``configure_evaluate``, ``aggregate_train`` and ``summary``
        it calls on itself are this wrapper's, which call its own in turn
        (:func:`~fedram_flwr.message_api.round_view.standing_in`). Arguments and result as
        for Flower's ``Strategy.start``.
        """
        self.failed_rounds = FailedRounds(self.failed_rounds.limit)
        given = {
            "train_config": train_config,
            "evaluate_config": evaluate_config,
            "evaluate_fn": evaluate_fn,
        }  # passed by Flower's names, those given only: an override may take fewer
        try:
            with standing_in(self.strategy, self, STOOD_IN) as own:
                self._own = own
                return self.strategy.start(
                    grid=grid,
                    initial_arrays=initial_arrays,
                    num_rounds=num_rounds,
                    timeout=timeout,
                    **{name: value for name, value in given.items() if value is not None},
                )
        finally:
            self._own = {}

    def own(self, name: str) -> Callable[..., Any]:
        """Return the wrapped strategy's own method ``name`` (not this wrapper's stand-in)."""
        return self._own.get(name) or getattr(self.strategy, name)

    def prepare_start(self, initial_arrays: ArrayRecord, evaluate_fn: Any) -> Any:
        """Reset the failed-round count and run the wrapped strategy's ``prepare_start``.

        Returns its result if it has one, else ``evaluate_fn``.
        """
        self.failed_rounds = FailedRounds(self.failed_rounds.limit)
        prepare = getattr(self.strategy, "prepare_start", None)
        return prepare(initial_arrays, evaluate_fn) if callable(prepare) else evaluate_fn

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> Any:
        """Aggregate the round's replies with the wrapped strategy.

        Unless it guards its rounds itself, the refused ones (NaN, inf, a node's second
        reply) are left out and the round counted
        (:mod:`~fedram_flwr.message_api.round_guard`).

        Raises
        ------
        FailedRoundsError
            After ``max_failed_rounds`` rounds in a row in which every node failed.
        """
        if isinstance(getattr(self.strategy, "failed_rounds", None), FailedRounds):
            return self.own("aggregate_train")(server_round, replies)
        replies, name = list(replies), type(self.strategy).__name__
        errors = [m for m in replies if m.has_error()]
        screened = screen_round(
            [received(m, self._partition_of) for m in replies if not m.has_error()],
            [error_text(m) for m in errors],
            self.failed_rounds,
            server_round,
            num_clients=self.oracle.num_clients,
            policy=RoundPolicy(getattr(self.strategy, "accept_failures", True) is not False),
            strategy=name,
            warn=warn,
        )
        self.failed_rounds = screened.guard
        return self.own("aggregate_train")(
            server_round, [r.source for r in screened.taken] + errors
        )

    def _partition_of(self, message: Message) -> int | None:
        """Return the partition id of a reply's node (``None``: a node not known)."""
        placement = self.partitions.placements.get(int(message.metadata.src_node_id))
        return None if placement is None else placement.partition_id

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> Any:
        """Aggregate the round's evaluation replies with the wrapped strategy."""
        return self.strategy.aggregate_evaluate(server_round, replies)

    # ----------------------------------------------------------- availability
    def available_nodes(self, server_round: int, grid: Grid) -> list[int]:
        """Return the node ids available in ``server_round``, in partition-id order.

        Computed once per round: training and evaluation share it.

        Parameters
        ----------
        server_round : int
            Server round, >= 1.
        grid : Grid
            The real grid.

        Returns
        -------
        list of int
            Node ids; empty when nobody is available.

        Raises
        ------
        AvailabilityError
            If the nodes, or their answers to the partition-id query, do not come within
            the timeouts, or two nodes report one partition id.
        """
        if self._round is not None and self._round[0] == server_round:
            return list(self._round[1])
        if isinstance(self.oracle, ConnectedClientManager):
            node_of = self._connected_nodes(grid, first=not self.relayed)
            self.connected[server_round] = sorted(node_of)
            pids = connected_sample(
                list(node_of), self.oracle.clients_per_round, self.oracle.seed, server_round
            )
        else:
            self._learn_partitions(grid)
            node_of = {p: n for n, p in self.partition_of.items()}
            pids = self.oracle.draw(server_round)
        nodes = [node_of[p] for p in pids]
        self._round, self.relayed[server_round] = (server_round, nodes), list(pids)
        self.oracle.round, self.oracle.last_active = server_round, list(pids)
        oracle = type(self.oracle).__name__
        if pids:
            log(INFO, "availability: round %d relays partitions %s (%s)", server_round, pids,
                oracle)  # fmt: skip
        else:
            what = "the round trains and evaluates nobody and the strategy keeps its model"
            log(WARNING, "availability: round %d: no node is available (%s); %s", server_round,
                oracle, what)  # fmt: skip
        return nodes

    def _relay(
        self,
        configure: Callable[..., Iterable[Message]],
        server_round: int,
        arrays: ArrayRecord,
        config: ConfigRecord,
        grid: Grid,
    ) -> list[Message]:
        """Run ``configure`` on the round's view of the grid.

        Its messages go to the round's available nodes.
        """
        nodes, name = self.available_nodes(server_round, grid), type(self.strategy).__name__
        picks = getattr(self.strategy, "picks_among_available", False) is True
        need = len(nodes) if picks else max([len(nodes), *minimum_sizes(self.strategy)])
        taken = set(nodes) | set(self.partition_of)
        free_ids = (i for i in itertools.count(1) if i not in taken)
        stand_ins = list(itertools.islice(free_ids, need - len(nodes)))
        partition_of = {n: self.partition_of[n] for n in nodes}
        view = RoundView(grid, nodes + stand_ins, name, partition_of, self.num_examples)
        messages = list(configure(server_round, arrays, config, view))
        if picks:
            check_addressed(messages, nodes, name, server_round)
        else:
            messages = readdress(messages, nodes)
        if messages:  # the strategy's own "Sampled n nodes" log line counted stand-ins
            log(INFO, "availability: sending to the %d available nodes", len(messages))
        return messages


def with_availability(
    strategy: Strategy, oracle: OracleClientManager, **settings: float
) -> AvailabilityStrategy:
    """Wrap ``strategy`` so that each round trains and evaluates on ``oracle``'s nodes.

    Parameters
    ----------
    strategy : Strategy
        Any Message-API strategy, unchanged.
    oracle : OracleClientManager
        Decides who is available in each round.
    **settings : float
        ``wait_timeout``, ``query_timeout``, ``poll_interval``, ``max_failed_rounds`` of
        :class:`AvailabilityStrategy`.

    Returns
    -------
    AvailabilityStrategy
    """
    return AvailabilityStrategy(strategy, oracle, **settings)
