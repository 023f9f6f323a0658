"""Client building blocks for Flower's Message API.

What a user's ``@app.train()`` and ``@app.evaluate()`` handlers call to train the
project's local objectives with the user's own torch model, data loader and optimizer.

Each ``train_*`` block reads the wire contract (docs/API.md; ``fedram_flwr.protocol``):
the message's ``"arrays"`` ArrayRecord (the model's arrays under its state_dict keys;
t, eta or the control variate beside them in ``"algorithm-arrays"`` where the algorithm
sends them) and its ``"config"`` ConfigRecord (the
algorithm's keys, ``server-round``, an optional ``lr``); it trains through the same local
fit as the legacy NumPyClient of ``fedram_flwr.clients`` (bit-identical on the same
batches) and returns the reply ``Message``: ``"arrays"`` and a ``"metrics"`` MetricRecord
with ``num-examples`` and every legacy fit metric. What must survive between rounds
(SCAFFOLD's c_i, CA-Fed's F_k*) lives in ``context.state``. ::

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        trainloader, _ = load_data(context.node_config["partition-id"])
        return train_cvar(msg, context, Net(), trainloader, epochs=1, lr=0.01)

Pass the app's own optimizer (``optimizer=``: an instance, or a factory ``params ->
optimizer``; :mod:`fedram_flwr.clients.optimizers`) and ``to_xy`` for dict batches; to keep a
handler's own lines (its ``load_state_dict``, a personal layer it restores, its
``train(...)`` call and reply), ``train_cvar.local(msg, context, ...)``
(:class:`LocalTraining`), which trains the model as the handler prepared it. Contract
breaches raise ``ValueError`` naming the key, the algorithm and the fix. The train blocks
are in :mod:`fedram_flwr.clients.train_blocks`, re-exported here; :func:`evaluate` is this
module's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from fedram_flwr.clients.batches import Batch, LoaderData
from fedram_flwr.clients.evaluation import evaluate_passes
from fedram_flwr.clients.local_training import LocalTraining as LocalTraining
from fedram_flwr.clients.models import set_weights
from fedram_flwr.clients.train_blocks import OBJECTIVES as OBJECTIVES
from fedram_flwr.clients.train_blocks import Objective as Objective
from fedram_flwr.clients.train_blocks import objective_for as objective_for
from fedram_flwr.clients.train_blocks import objective_of as objective_of
from fedram_flwr.clients.train_blocks import train_amplified_scaffold as train_amplified_scaffold
from fedram_flwr.clients.train_blocks import train_ca_fed as train_ca_fed
from fedram_flwr.clients.train_blocks import train_cvar as train_cvar
from fedram_flwr.clients.train_blocks import train_erm as train_erm
from fedram_flwr.clients.train_blocks import train_rcfl as train_rcfl
from fedram_flwr.clients.train_blocks import train_scaffold as train_scaffold
from fedram_flwr.clients.wire import METRICS, layout_of, partition_id, received
from fedram_flwr.protocol import EVAL_ACCURACY, EVAL_LOSS, NUM_EXAMPLES, PARTITION_ID


def evaluate(
    msg: Message,
    context: Context,
    model: nn.Module,
    testloader: Iterable[Any],
    *,
    to_xy: Callable[[Any], Batch] | None = None,
    device: torch.device | str | None = None,
) -> Message:
    """Evaluate the received model on ``testloader`` for an ``@app.evaluate()`` handler.

    The model's arrays are taken out of whatever the algorithm sends (t, eta or
    SCAFFOLD's control after them).

    Parameters
    ----------
    msg, context : Message, Context
        The handler's arguments.
    model : nn.Module
        The app's torch model; the received arrays are loaded into it.
    testloader : iterable
        The client's test batches.
    to_xy : callable, optional
        Turns a batch into (inputs, labels), as for the train blocks.
    device : torch.device or str, optional
        Where batches move (default: the model's device).

    Returns
    -------
    Message
        The reply: ``eval-loss`` (mean cross-entropy), ``eval-accuracy`` (in [0, 1]),
        ``num-examples`` and ``partition-id``.
    """
    arrays, _ = received(msg, "evaluate")
    set_weights(model, layout_of(arrays, model, "evaluate").model(arrays))
    device = device or next(model.parameters()).device
    data = LoaderData(testloader, to_xy=to_xy, device=device)
    loss, accuracy, count = evaluate_passes(model, data.passes({}))
    metrics = {
        NUM_EXAMPLES: count,
        PARTITION_ID: partition_id(context),
        EVAL_LOSS: loss,
        EVAL_ACCURACY: accuracy,
    }
    return Message(RecordDict({METRICS: MetricRecord(metrics)}), reply_to=msg)
