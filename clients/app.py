"""ClientApps for ``flwr run .``: the scenario's client on each SuperNode partition.

Flower 1.39's ``ClientApp`` takes either a ``client_fn`` or ``@app.train()`` /
``@app.evaluate()`` handlers, never both (``ClientApp.train`` raises "Use either
`@app.train()` or `client_fn`, but not both"), and a handler app rejects the legacy
``get_properties`` messages the legacy oracles send ("Invalid message type"). So:
``app`` is the legacy API's (one NumPyClient per message); ``message_app`` runs the Message
API's handlers, which call the blocks of :mod:`fedram_flwr.clients.message` on the
scenario's model and data (batches in the same seeded order), and hands every legacy
message to ``app``: named in pyproject's ``[tool.flwr.app.components]`` as
``clientapp = "fedram_flwr.clients.app:message_app"`` it serves both APIs, so the server
alone (its run config) picks the API. It answers the partition-id query of the Message
API's availability wrapper (with the node's m_i). :func:`project_message_app` builds it
over any source of the node's experiment (the in-process engine hands it its own).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from flwr.app import Context, Message, MessageType
from flwr.client import Client, ClientApp
from flwr.common.constant import MessageTypeLegacy
from torch.utils.data import DataLoader, TensorDataset

from fedram_flwr.clients.emulate import emulates, modelled_seconds, pace
from fedram_flwr.clients.message import evaluate
from fedram_flwr.clients.node import NodeExperiment
from fedram_flwr.clients.partition_query import PARTITION_ACTION, partition_id_query
from fedram_flwr.clients.train_blocks import objective_for
from fedram_flwr.clients.wire import partition_id
from fedram_flwr.scenario.run_config import node_settings


def node_experiment(context: Context) -> tuple[NodeExperiment, int]:
    """The run's experiment (a node's side of it) and this node's partition id (checked
    against the scenario)."""
    scenario, seed = node_settings(context.run_config)
    pid = partition_id(context)
    n = int(context.node_config.get("num-partitions", scenario.data.num_clients))
    if n != scenario.data.num_clients:
        raise ValueError(
            f"the federation has {n} partitions but data.num_clients is "
            f"{scenario.data.num_clients}: use num-supernodes={scenario.data.num_clients}"
        )
    return NodeExperiment(scenario, seed), pid


ExperimentOf = Callable[[Context], tuple[NodeExperiment, int]]
"""A node's experiment and partition id, from its ``Context``."""


def legacy_app(experiment_of: ExperimentOf = node_experiment) -> ClientApp:
    """The legacy-API ClientApp over the node's experiment: one NumPyClient per message."""

    def client_of(context: Context) -> Client:
        exp, pid = experiment_of(context)
        return exp.client(pid, context.state).to_client()

    return ClientApp(client_fn=client_of)


def client_fn(context: Context) -> Client:
    exp, pid = node_experiment(context)
    return exp.client(pid, context.state).to_client()


app = ClientApp(client_fn=client_fn)
"""The legacy-API ClientApp (legacy strategies and oracles)."""

LEGACY_TYPES = (MessageTypeLegacy.GET_PROPERTIES, MessageTypeLegacy.GET_PARAMETERS)
LEGACY_RECORDS = ("fitins.parameters", "evaluateins.parameters")
"""How the legacy API's messages look on the wire (``flwr.compat``'s record names)."""


def is_legacy(message: Message) -> bool:
    """A message of the legacy API: get_properties / get_parameters, or fit / evaluate
    instructions in ``flwr.compat``'s records."""
    if message.metadata.message_type in LEGACY_TYPES:
        return True
    return any(key in message.content.array_records for key in LEGACY_RECORDS)


REPLY_METRICS = ("metrics", "fitres.metrics")
"""Where a train reply's metrics are: the Message API's record, the legacy API's."""


def with_metrics(reply: Message, metrics: dict[str, float]) -> Message:
    """``reply`` with ``metrics`` added to its train metrics (either API's record); a
    reply without content (an error) is returned as it is."""
    if reply.has_content():
        for key in REPLY_METRICS:
            if key in reply.content:
                reply.content[key].update(metrics)
    return reply


class BothAPIsClientApp(ClientApp):
    """A handler ClientApp that passes the legacy API's messages to ``legacy``; with
    ``time.emulate`` each train message takes the client's modelled seconds
    (:mod:`fedram_flwr.clients.emulate`; ``now`` and ``sleep`` its clock, ``wall_now`` the
    clock of the messages' ``created_at`` for ``time.emulate_from: push``)."""

    def __init__(
        self,
        legacy: ClientApp,
        experiment_of: ExperimentOf = node_experiment,
        *,
        now: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
        wall_now: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.legacy = legacy
        self.experiment_of = experiment_of
        self.now, self.sleep, self.wall_now = now, sleep, wall_now

    def __call__(self, message: Message, context: Context) -> Message:
        if message.metadata.message_type != MessageType.TRAIN:
            return self.handle(message, context)
        exp, pid = self.experiment_of(context)
        if not emulates(exp.scenario):
            return self.handle(message, context)
        # the node's own work counts: its data, the model, training; from the push, the
        # wait before it too (a node clock behind the server's counts from the node's start)
        if exp.scenario.time.emulate_from == "push":
            now = self.wall_now
            started = min(message.metadata.created_at, now())
        else:
            now = self.now
            started = now()
        modelled = modelled_seconds(exp, pid)
        reply = self.handle(message, context)
        pacing = pace(modelled, started, now=now, sleep=self.sleep)
        return with_metrics(reply, pacing.metrics())

    def handle(self, message: Message, context: Context) -> Message:
        """Answer ``message``: the legacy app, or this app's handlers."""
        if is_legacy(message):
            return self.legacy(message, context)
        return super().__call__(message, context)


def project_message_app(experiment_of: ExperimentOf = node_experiment) -> BothAPIsClientApp:
    """The project's Message-API ClientApp over the node's experiment (``experiment_of``:
    from the run config, or one given in-process): train, evaluate, the partition-id
    query (with the node's m_i); legacy messages go to :func:`legacy_app`'s."""
    legacy = app if experiment_of is node_experiment else legacy_app(experiment_of)
    message_app = BothAPIsClientApp(legacy, experiment_of)

    @message_app.train()
    def train(msg: Message, context: Context) -> Message:
        """The scenario's local objective on the node's data, as its legacy client trains."""
        exp, pid = experiment_of(context)
        client = exp.client(pid, context.state)
        return objective_for(type(client)).reply(msg, context, client.trainer)

    @message_app.evaluate()
    def evaluate_partition(msg: Message, context: Context) -> Message:
        """Loss and accuracy of the received model on the node's own test set
        (``client_test``, the per-client test split of the scenario's data)."""
        exp, pid = experiment_of(context)
        d, own = exp.data, exp.data.client_test[pid]
        data = TensorDataset(torch.from_numpy(d.test_x[own]), torch.from_numpy(d.test_y[own]))
        return evaluate(msg, context, exp.new_model(), DataLoader(data, batch_size=4096))

    @message_app.query(PARTITION_ACTION)
    def partition(msg: Message, context: Context) -> Message:
        """The partition-id contract, with m_i (rFedFair's p_i = m_i / m)."""
        exp, pid = experiment_of(context)
        return partition_id_query(msg, context, num_examples=len(exp.data.client_y[pid]))

    return message_app


message_app = project_message_app()
"""The Message-API ClientApp of ``flwr run .``; legacy messages go to ``app``."""
