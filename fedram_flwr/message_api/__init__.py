"""Flower's Message API: client building blocks for ``@app.train()`` / ``@app.evaluate()``."""

from fedram_flwr.message_api.client import (
    evaluate,
    partition_id,
    train_ca_fed,
    train_cvar,
    train_erm,
    train_rcfl,
    train_scaffold,
)

__all__ = [
    "evaluate",
    "partition_id",
    "train_ca_fed",
    "train_cvar",
    "train_erm",
    "train_rcfl",
    "train_scaffold",
]
