"""advancedapp: a Flower / PyTorch app."""

import json
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from advancedapp.task import Net, load_data
from advancedapp.task import train as train_fn

# Flower ClientApp
app = ClientApp()


def restore_head(model: Net, context: Context) -> None:
    """Keep this client's own classification head: restore it from context.state."""
    if "head" in context.state:
        model.head.load_state_dict(context.state["head"].to_torch_state_dict())


def trace(msg: Message, context: Context, model: Net, lr: float) -> list:
    """Trace this round: the head this client trains from (at its first forward pass)."""
    head = context.state["head"].to_torch_state_dict() if "head" in context.state else None
    kept = None if head is None else head["weight"].sum().item()
    row = {"round": msg.content["config"]["server-round"], "lr": lr, "head-kept": kept}
    row["partition"] = context.node_config["partition-id"]
    seen = []

    def first_forward(module, args):
        if not seen:
            seen.append(module.weight.detach().sum().item())

    model.head.register_forward_pre_hook(first_forward)
    return [row, seen]


def write_trace(context: Context, traced: list) -> None:
    """Append the round's trace to out-dir/clients.jsonl."""
    row, seen = traced
    with (Path(context.run_config["out-dir"]) / "clients.jsonl").open("a") as f:
        f.write(json.dumps({**row, "head-in": seen[0]}) + "\n")


@app.train()
def train(msg: Message, context: Context):
    """Train the model on local data."""

    # Load the global model, then this client's own head
    model = Net()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    restore_head(model, context)
    device = torch.device("cpu")

    # Load the data
    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    trainloader, _ = load_data(partition_id, num_partitions, context.run_config["batch-size"])

    # Call the training function
    lr = msg.content["config"]["lr"]
    traced = trace(msg, context, model, lr)
    train_loss = train_fn(
        model,
        trainloader,
        context.run_config["local-epochs"],
        lr,
        device,
    )

    # Keep the trained head for the next round
    context.state["head"] = ArrayRecord(model.head.state_dict())
    write_trace(context, traced)

    # Construct and return reply Message
    model_record = ArrayRecord(model.state_dict())
    metrics = {"train_loss": train_loss, "num-examples": len(trainloader.dataset)}
    content = RecordDict({"arrays": model_record, "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)
