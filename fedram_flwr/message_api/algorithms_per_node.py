"""The Message-API strategies that address each node apart: FedAWE and rFedFair.

Both need each trainer's partition id before training (the availability wrapper's, else
the partition-id query, :func:`~fedram_flwr.message_api.partitions.grid_query`, asked
once per node): :class:`FedAWE` sends each node its own model x_i^t, :class:`RFedFair`
chooses who trains and sends each its own config (and needs every node's m_i). The
other algorithms, which send every trainer the same broadcast, are in
:mod:`~fedram_flwr.message_api.algorithms`, which re-exports these two.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fedram_flwr.message_api.evaluation import EvaluateFn
from fedram_flwr.message_api.partitions import grid_query
from fedram_flwr.message_api.round_view import RoundView
from fedram_flwr.message_api.strategy import CoreMessageStrategy
from fedram_flwr.strategies.fedawe import FedAWECore
from fedram_flwr.strategies.rc_fl import RFedFairCore

FEDAWE_HINT = (
    "FedAWE sends each node its own model: its ClientApp answers "
    'app.query("partition_id") (partition_id_query)'
)
RFEDFAIR_HINT = (
    "rFedFair needs each node's partition id and training-set size; its ClientApp "
    'answers the partition-id query with both: app.query("partition_id") calling '
    "partition_id_query(msg, context, num_examples=len(trainset))"
)


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
                        **sampled[node].content.array_records,  # the model, and eta
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
