"""The client side, imported as ``fedram_flwr.clients``.

Everything a SuperNode runs of the project, and nothing of the server side
(``tests/test_imports.py``):

- The local objectives, one local fit each: the legacy NumPyClients (``erm``, ``cvar``,
  ``ca_fed``, ``rc_fl``, ``scaffold``) and the Message-API building blocks a user's
  ``@app.train()`` / ``@app.evaluate()`` calls (:mod:`~fedram_flwr.clients.train_blocks`,
  :mod:`~fedram_flwr.clients.message`, :mod:`~fedram_flwr.clients.wire`).
- The learning task they share: :mod:`~fedram_flwr.clients.models`, local SGD
  (:mod:`~fedram_flwr.clients.training` over :mod:`~fedram_flwr.clients.batches`, with
  :mod:`~fedram_flwr.clients.optimizers` and :mod:`~fedram_flwr.clients.lr_schedule`) and
  :mod:`~fedram_flwr.clients.evaluation` (which the server's central evaluation uses too).
- The node: :mod:`~fedram_flwr.clients.node` (a node's data, model and client for a
  scenario), :mod:`~fedram_flwr.clients.app` (the project's ClientApp, named in
  ``pyproject.toml``) and the node's half of the partition-id query
  (:mod:`~fedram_flwr.clients.partition_query`).

This face re-exports what a user's ClientApp imports.
"""

from fedram_flwr.clients.ca_fed import CAFedClient
from fedram_flwr.clients.cvar import CVaRClient
from fedram_flwr.clients.erm import ERMClient
from fedram_flwr.clients.focus import FocusClient
from fedram_flwr.clients.message import evaluate
from fedram_flwr.clients.partition_query import partition_id_query
from fedram_flwr.clients.rc_fl import RCFLClient
from fedram_flwr.clients.scaffold import AmplifiedScaffoldClient, ScaffoldClient
from fedram_flwr.clients.train_blocks import (
    train_amplified_scaffold,
    train_ca_fed,
    train_cvar,
    train_erm,
    train_focus,
    train_rcfl,
    train_scaffold,
)
from fedram_flwr.clients.wire import partition_id

__all__ = [
    "AmplifiedScaffoldClient",
    "CAFedClient",
    "CVaRClient",
    "ERMClient",
    "FocusClient",
    "RCFLClient",
    "ScaffoldClient",
    "evaluate",
    "partition_id",
    "partition_id_query",
    "train_amplified_scaffold",
    "train_ca_fed",
    "train_cvar",
    "train_erm",
    "train_focus",
    "train_rcfl",
    "train_scaffold",
]
