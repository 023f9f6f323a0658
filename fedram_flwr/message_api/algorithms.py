"""Every algorithm of :mod:`fedram_flwr.strategies` as a Flower Message-API strategy.

Each class is its legacy namesake's core (``fedram_flwr.strategies.<module>.<Name>Core``)
behind :class:`~fedram_flwr.message_api.strategy.CoreMessageStrategy`, with the legacy
class's hyper-parameters (same names, same defaults: they are the core's fields) and
Flower ``FedAvg``'s arguments. Same names as the legacy classes, as Flower does
(``flwr.server.strategy.FedAvg`` and ``flwr.serverapp.strategy.FedAvg``): switching API
changes the import, not the code. q-FFL is Flower's own Message-API ``QFedAvg``
(:class:`QFFL`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import QFedAvg

from fedram_flwr.message_api.partitions import grid_query
from fedram_flwr.message_api.round_guard import ordered_replies, take_replies
from fedram_flwr.message_api.round_view import RoundView
from fedram_flwr.message_api.strategy import CoreMessageStrategy, EvaluateFn
from fedram_flwr.protocol import RECEIVED_LOSS
from fedram_flwr.strategies.afl import AFLCore
from fedram_flwr.strategies.amplified_scaffold import AmplifiedScaffoldCore
from fedram_flwr.strategies.availability_baselines import (
    AdaFedCore,
    F3ASTCore,
    MoreAvailableCore,
    UnbiasedCore,
)
from fedram_flwr.strategies.ca_fed import CAFedCore
from fedram_flwr.strategies.debiasing_fedavg import DebiasingFedAvgCore
from fedram_flwr.strategies.fed_cvar_avg import FedCVaRAvgCore
from fedram_flwr.strategies.fedar import FedARCore
from fedram_flwr.strategies.fedavg import FedAvgCore
from fedram_flwr.strategies.fedawe import FedAWECore
from fedram_flwr.strategies.participation import (
    FedAUCore,
    FedAvgAllCore,
    FedAvgISCore,
    FedAvgSampledCore,
)
from fedram_flwr.strategies.rc_fl import RFedFairCore
from fedram_flwr.strategies.rounds import DEFAULT_MAX_FAILED_ROUNDS, FailedRounds
from fedram_flwr.strategies.scaffold import ScaffoldCore
from fedram_flwr.strategies.stale_updates import (
    FedStaleActiveCore,
    FedStaleCore,
    FedVARPCore,
    MIFACore,
)

THETA_T = "(theta, t): theta's arrays, then t as a 1-element array (protocol.join_theta_t)"


# ------------------------------------------------------------- FedAvg, Fed-CVaR-Avg
class FedAvg(CoreMessageStrategy):
    """FedAvg in partition-id order (replies without a partition id are summed first)."""

    core_type = FedAvgCore
    needs_partition_id = False


class FedCVaRAvg(CoreMessageStrategy):
    """Fed-CVaR-Avg (Alg. 1); ``evaluate_fn`` sees theta, its metrics gain the global ``t``."""

    core_type = FedCVaRAvgCore
    needs_partition_id = False
    reply_layout = THETA_T


# ------------------------------------------------------------- CA-Fed, baselines
class CAFed(CoreMessageStrategy):
    """CA-Fed (Alg. 1); replies report ``received-loss``."""

    core_type = CAFedCore
    required_metrics = (RECEIVED_LOSS,)


class Unbiased(CoreMessageStrategy):
    """Unbiased (CA-Fed Sec. V-A c, baseline 1)."""

    core_type = UnbiasedCore


class MoreAvailable(CoreMessageStrategy):
    """More available (CA-Fed Sec. V-A c, baseline 2)."""

    core_type = MoreAvailableCore


class AdaFed(CoreMessageStrategy):
    """AdaFed (CA-Fed Sec. V-A c, baseline 3)."""

    core_type = AdaFedCore


class F3AST(CoreMessageStrategy):
    """F3AST (Ribero et al. 2023; CA-Fed Sec. V-A c, baseline 4)."""

    core_type = F3ASTCore


# --------------------------------------------- FedAR and the stale-update family
class FedAR(CoreMessageStrategy):
    """FedAR (Alg. 1); steps from memory in a round without replies."""

    core_type = FedARCore


class MIFA(CoreMessageStrategy):
    """MIFA; steps from memory in an empty round."""

    core_type = MIFACore


class FedVARP(CoreMessageStrategy):
    """FedVARP (Jhunjhunwala et al. 2022, Alg. 1)."""

    core_type = FedVARPCore


class FedStale(CoreMessageStrategy):
    """FedStale (its authors' rule: fresh updates weighted a_i / p_i)."""

    core_type = FedStaleCore


class FedStaleActive(CoreMessageStrategy):
    """FedStale over the active set (fresh updates weighted 1 / |S|)."""

    core_type = FedStaleActiveCore


class FedAvgAll(CoreMessageStrategy):
    """FedAvg over all clients (the unavailable ones count as zero updates)."""

    core_type = FedAvgAllCore


class FedAWE(CoreMessageStrategy):
    """FedAWE (Xiang et al., NeurIPS 2024, Alg. 1): each node trains from its own x_i^t.

    Each node is sent its own x_i^t (``core.client_arrays``), by partition id: the
    availability wrapper's, else asked once per node with the partition-id query. Besides
    the core's hyper-parameters it takes ``query_timeout`` (float, default 60): the
    seconds, > 0, that the partition-id query waits at most.
    """

    core_type = FedAWECore

    def __init__(self, *, query_timeout: float = 60.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.query_timeout = query_timeout

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send each of the base's trainers its own x_i^t instead of the broadcast.

        See :meth:`CoreMessageStrategy.configure_train
        <fedram_flwr.message_api.strategy.CoreMessageStrategy.configure_train>`; the
        trainers' partition ids come from the availability wrapper, else from the
        partition-id query (an error naming the silent nodes after ``query_timeout`` s).
        """
        sampled = list(super().configure_train(server_round, arrays, config, grid))
        nodes = [m.metadata.dst_node_id for m in sampled]
        if isinstance(grid, RoundView) and set(nodes) <= set(grid.partition_of):
            pid_of = grid.partition_of
        else:
            pid_of = self.partition_ids(grid, nodes, FEDAWE_HINT)
        keys, models = self.core.starts(self.state, [pid_of[n] for n in nodes])
        records = {key: ArrayRecord(model) for key, model in models.items()}  # once per round
        return [
            Message(
                RecordDict(
                    {
                        self.arrayrecord_key: records[key],
                        self.configrecord_key: msg.content[self.configrecord_key],
                    }
                ),
                msg.metadata.dst_node_id,
                MessageType.TRAIN,
            )
            for msg, key in zip(sampled, keys)
        ]


class FedAvgIS(CoreMessageStrategy):
    """FedAvg-IS: each available client weighted 1 / p_i."""

    core_type = FedAvgISCore


class FedAvgSampled(CoreMessageStrategy):
    """FedAvg(S): at most S of the available clients a round.

    Under an availability wrapper the seeded subset of S is taken among the available
    nodes (in partition order) before training, as the legacy class does: only they
    train. Without one the server knows partition ids only from the replies, so the
    subset is taken among the replies (the same subset when every sampled node
    answers; the nodes left out train too and their update is discarded).
    """

    core_type = FedAvgSampledCore

    def pick(self, server_round: int, nodes: list[int], partitions: list[int]) -> list[int]:
        """Keep the seeded subset of at most S of the available ``nodes`` (the core's draw).

        See :meth:`CoreMessageStrategy.pick
        <fedram_flwr.message_api.strategy.CoreMessageStrategy.pick>`.
        """
        return [nodes[k] for k in self.core.select(len(nodes), server_round)]


class FedAU(CoreMessageStrategy):
    """FedAU (Wang and Ji, ICLR 2024): weights from the observed participation intervals."""

    core_type = FedAUCore


class Scaffold(CoreMessageStrategy):
    """SCAFFOLD (Alg. 1, option II); ``evaluate_fn`` sees x."""

    core_type = ScaffoldCore
    reply_layout = "(y_i, Delta c_i): the model's arrays, then the control's (join_model_control)"


class AmplifiedScaffold(CoreMessageStrategy):
    """Amplified SCAFFOLD (Crawshaw and Liu 2024); ``evaluate_fn`` sees x."""

    core_type = AmplifiedScaffoldCore
    reply_layout = "(y_i, D_i): the model's arrays, then the control's (join_model_control)"


class DebiasingFedAvg(CoreMessageStrategy):
    """Debiasing FedAvg (Sun et al. 2025); pi_R known (``known_p``) or estimated."""

    core_type = DebiasingFedAvgCore


# ------------------------------------------------------- rFedFair, AFL, q-FFL
FEDAWE_HINT = (
    "FedAWE sends each node its own model: its ClientApp answers "
    'app.query("partition_id") (partition_id_query)'
)
RFEDFAIR_HINT = (
    "rFedFair needs each node's partition id and training-set size; its ClientApp "
    'answers the partition-id query with both: app.query("partition_id") calling '
    "partition_id_query(msg, context, num_examples=len(trainset))"
)


class RFedFair(CoreMessageStrategy):
    """rFedFair (RC-FL Alg. 1): the server chooses who trains and sends each its config.

    As the legacy class, the server chooses Z among the available nodes (under an
    availability wrapper: the oracle's; else Flower's sample) and sends each its own
    config (``rcfl-alpha``, ``rcfl-p``, ``rcfl-mu``, ``lr-eta``); only Z trains. p_i =
    m_i / m over every node known, from the partition-id query's ``num-examples``
    (the wrapper's answers when it has every node's, else asked once per node).
    ``evaluate_fn`` sees omega; its metrics gain ``eta`` and the ``avg-`` metrics of
    omega_tilde_T. Besides the core's hyper-parameters it takes ``query_timeout``
    (float, default 60): the seconds, > 0, that the partition-id query waits at most.
    """

    core_type = RFedFairCore
    reply_layout = "(omega, eta): omega's arrays, then eta as a 1-element array (join_theta_t)"

    def __init__(self, *, query_timeout: float = 60.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.query_timeout = query_timeout
        self.known: dict[int, tuple[int, int]] = {}  # node id -> (partition id, m_i)

    def sizes(self, grid: Grid, nodes: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        """Return the partition ids of ``nodes`` and m_i of every node known.

        The availability wrapper's when it has every node's m_i, else from this
        strategy's partition directory (each node asked once).

        Parameters
        ----------
        grid : Grid
            The grid (or an availability wrapper's view of it).
        nodes : list of int
            The sampled node ids.

        Returns
        -------
        tuple of (dict of int to int, dict of int to int)
            {node id: partition id} of ``nodes``, and {partition id: m_i} of every node
            known (m_i: its number of training examples).

        Raises
        ------
        AvailabilityError
            If a node answers wrongly, or gives no partition id and m_i within
            ``query_timeout`` s (:data:`RFEDFAIR_HINT` says what to change).
        """
        if isinstance(grid, RoundView) and set(grid.partition_of.values()) <= set(
            grid.num_examples
        ):
            return {n: grid.partition_of[n] for n in nodes}, grid.num_examples
        every = list(dict.fromkeys([*grid.get_node_ids(), *nodes]))
        placed = self.partition_directory().require(
            every, grid_query(grid), "RFedFair", RFEDFAIR_HINT, sizes=True
        )
        self.known.update({n: (p.partition_id, p.num_examples) for n, p in placed.items()})
        return {n: self.known[n][0] for n in nodes}, dict(self.known.values())

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Choose Z among the base's sample and send each its own config.

        See :meth:`CoreMessageStrategy.configure_train
        <fedram_flwr.message_api.strategy.CoreMessageStrategy.configure_train>`; the core
        chooses Z and writes each one's ``rcfl-alpha``, ``rcfl-p``, ``rcfl-mu`` and
        ``lr-eta`` (p_i = m_i / m, from :meth:`sizes`); only Z trains.
        """
        sampled = {
            m.metadata.dst_node_id: m
            for m in super().configure_train(server_round, arrays, config, grid)
        }
        self.state = self.core.broadcast(self.state, self.broadcast_arrays())
        pid_of, sizes = self.sizes(grid, list(sampled))
        self.state, configs = self.core.fit_configs(self.state, pid_of, sizes, server_round)
        return [
            Message(
                RecordDict(
                    {
                        self.arrayrecord_key: sampled[node].content[self.arrayrecord_key],
                        self.configrecord_key: ConfigRecord(
                            {**sampled[node].content[self.configrecord_key], **cfg}
                        ),
                    }
                ),
                node,
                MessageType.TRAIN,
            )
            for node, cfg in configs
        ]

    def evaluation_extras(self, server_round: int, evaluate_fn: EvaluateFn) -> dict[str, Any]:
        """Add to the base's extras ``evaluate_fn``'s metrics of omega_tilde_T, as ``avg-``.

        See :meth:`CoreMessageStrategy.evaluation_extras
        <fedram_flwr.message_api.strategy.CoreMessageStrategy.evaluation_extras>`.
        """
        extras = super().evaluation_extras(server_round, evaluate_fn)
        averaged = self.core.averaged_omega(self.state)
        if averaged is not None and (avg := evaluate_fn(server_round, self.as_model(averaged))):
            extras.update({f"avg-{k}": v for k, v in avg.items()})
        return extras


class AFL(CoreMessageStrategy):
    """AFL (Mohri et al. 2019); replies report ``received-loss``."""

    core_type = AFLCore
    required_metrics = (RECEIVED_LOSS,)


class QFFL(QFedAvg):
    """q-FFL (Li et al., ICLR 2020) as Flower's Message-API ``QFedAvg``.

    Unchanged in its math (the q-FedAvg step, their Algorithm 3, with
    L = 1 / ``client_learning_rate``):

        Delta_k = F_k^q(w_t) L (w_t - w_k),
        h_k = q F_k^{q-1}(w_t) ||L (w_t - w_k)||^2 + L F_k^q(w_t),
        w_{t+1} = w_t - sum_k Delta_k / sum_k h_k.

    Flower's Message-API QFedAvg reads each client's own loss from its reply
    (``train_loss_key``), so the legacy ``QFedAvg``'s defect that
    :mod:`fedram_flwr.strategies.qffl` fixes (one server loss for every client) is not
    there. Added: ``train_loss_key`` defaults to ``received-loss``, replies are
    aggregated in partition-id order (sums reproducible across engines), replies with a
    bad or duplicated partition id or NaN / inf are refused, and the failure guard
    (:mod:`~fedram_flwr.message_api.round_guard`).

    Parameters
    ----------
    client_learning_rate : float
        The clients' learning rate, > 0; L = 1 / it.
    train_loss_key : str, default "received-loss"
        The reply metric holding F_k(w_t), the loss at the received model, as Li et al.
        (Flower's default ``train_loss`` would be a loss during training).
    accept_failures : bool, default True
        ``False``: a round with an error reply aggregates nothing and the model stays.
    max_failed_rounds : int, default 3
        Rounds in a row that aggregate nothing because clients failed before the run
        stops (:class:`~fedram_flwr.strategies.rounds.FailedRoundsError`), >= 1.
    **qfedavg_kwargs
        Flower Message-API ``QFedAvg``'s other arguments (``q``, q >= 0, default 0.1;
        ``fraction_train``, ``weighted_by_key``, ...).
    """

    def __init__(
        self,
        *,
        client_learning_rate: float,
        train_loss_key: str = RECEIVED_LOSS,
        accept_failures: bool = True,
        max_failed_rounds: int = DEFAULT_MAX_FAILED_ROUNDS,
        **qfedavg_kwargs: Any,
    ) -> None:
        super().__init__(
            client_learning_rate=client_learning_rate,
            train_loss_key=train_loss_key,
            **qfedavg_kwargs,
        )
        self.accept_failures = accept_failures
        self.failed_rounds = FailedRounds(max_failed_rounds)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Screen the replies and run Flower's q-FedAvg step on them, by partition id.

        Parameters
        ----------
        server_round : int
            t, >= 1.
        replies : iterable of Message
            The round's replies, error replies included.

        Returns
        -------
        tuple of (ArrayRecord or None, MetricRecord or None)
            Flower's ``QFedAvg.aggregate_train`` result; ``(None, None)`` when a failure
            cancels the round (``accept_failures`` off).

        Raises
        ------
        ValueError
            For a reply without a partition id or ``train_loss_key``
            (:func:`~fedram_flwr.message_api.round_guard.ordered_replies`).
        FailedRoundsError
            After ``max_failed_rounds`` rounds in a row that aggregated nothing because
            clients failed.
        """
        replies = list(replies)
        errors = [m for m in replies if m.has_error()]
        taken, self.failed_rounds = take_replies(
            self.failed_rounds,
            type(self).__name__,
            server_round,
            [m for m in replies if not m.has_error()],
            errors,
            None,
            self.accept_failures,
        )
        if taken is None:
            return None, None
        pairs = ordered_replies(
            taken,
            type(self).__name__,
            weighted_by_key=self.weighted_by_key,
            required_metrics=(self.train_loss_key,),
        )
        return super().aggregate_train(server_round, [m for m, _ in pairs] + errors)
