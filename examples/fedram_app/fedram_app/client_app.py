"""ClientApp: the node trains Fed-CVaR-Avg's local objective with fedram-flwr's block."""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedram_app.task import Net, load_data
from fedram_flwr.clients import evaluate as evaluate_block
from fedram_flwr.clients import partition_id_query, train_cvar

app = ClientApp()
# The availability oracle knows nodes by partition id: answer its query.
app.query("partition_id")(partition_id_query)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train the received (theta, t) on this node's data (Fed-CVaR-Avg's local steps)."""
    trainloader, _ = load_data(
        context.node_config["partition-id"], context.node_config["num-partitions"]
    )
    return train_cvar(
        msg,
        context,
        Net(),
        trainloader,
        lr=context.run_config["lr"],
        epochs=context.run_config["local-epochs"],
    )


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the received model on this node's test data."""
    _, testloader = load_data(
        context.node_config["partition-id"], context.node_config["num-partitions"]
    )
    return evaluate_block(msg, context, Net(), testloader)
