"""ClientApps for ``flwr run .``: the scenario's client on each SuperNode partition.

Flower 1.39's ``ClientApp`` takes either a ``client_fn`` or ``@app.train()`` /
``@app.evaluate()`` handlers, never both (``ClientApp.train`` raises "Use either
`@app.train()` or `client_fn`, but not both"), and a handler app rejects the legacy
``get_properties`` messages the legacy oracles send. So there are two apps, over the same
client: ``app`` (legacy API: one NumPyClient per message) and ``message_app`` (Message API:
the handlers call the blocks of :mod:`fedram_flwr.message_api.client` with the scenario's
model and data, batches in the same seeded order). pyproject's
``[tool.flwr.app.components] clientapp`` names the one a run uses:
``"fedram_flwr.client_app:app"`` or ``"fedram_flwr.client_app:message_app"``.
"""

from __future__ import annotations

import torch
from flwr.app import Context, Message
from flwr.client import Client, ClientApp
from torch.utils.data import DataLoader, TensorDataset

from fedram_flwr.app_config import run_settings
from fedram_flwr.experiment import Experiment
from fedram_flwr.message_api.client import evaluate, objective_for, partition_id


def node_experiment(context: Context) -> tuple[Experiment, int]:
    """The run's experiment and this node's partition id (checked against the scenario)."""
    scenario, seed = run_settings(context.run_config)
    pid = partition_id(context)
    n = int(context.node_config.get("num-partitions", scenario.data.num_clients))
    if n != scenario.data.num_clients:
        raise ValueError(
            f"the federation has {n} partitions but data.num_clients is "
            f"{scenario.data.num_clients}: use num-supernodes={scenario.data.num_clients}"
        )
    return Experiment(scenario, seed), pid


def client_fn(context: Context) -> Client:
    exp, pid = node_experiment(context)
    return exp.client(pid, context.state).to_client()


app = ClientApp(client_fn=client_fn)
"""The legacy-API ClientApp (legacy strategies and oracles)."""

message_app = ClientApp()
"""The Message-API ClientApp (Message-API strategies)."""


@message_app.train()
def train(msg: Message, context: Context) -> Message:
    """The scenario's local objective on the node's data, as its legacy client trains."""
    exp, pid = node_experiment(context)
    client = exp.client(pid, context.state)
    return objective_for(type(client)).reply(msg, context, client.trainer)


@message_app.evaluate()
def evaluate_partition(msg: Message, context: Context) -> Message:
    """Loss and accuracy of the received model on the node's own test set
    (``client_test``, the per-client test split of the scenario's data)."""
    exp, pid = node_experiment(context)
    d, own = exp.data, exp.data.client_test[pid]
    data = TensorDataset(torch.from_numpy(d.test_x[own]), torch.from_numpy(d.test_y[own]))
    return evaluate(msg, context, exp.new_model(), DataLoader(data, batch_size=4096))
