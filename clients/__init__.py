"""Local objectives, imported as ``fedram_flwr.clients``.

The legacy NumPyClients, and the Message-API building blocks a user's ``@app.train()`` /
``@app.evaluate()`` calls (:mod:`fedram_flwr.clients.message`), both over one local fit
per objective; with the client side of the partition-id contract
(``partition_id_query``), everything a Message-API ClientApp imports from the project.
"""

from fedram_flwr.clients.ca_fed import CAFedClient
from fedram_flwr.clients.cvar import CVaRClient
from fedram_flwr.clients.erm import ERMClient
from fedram_flwr.clients.message import evaluate
from fedram_flwr.clients.partition_query import partition_id_query
from fedram_flwr.clients.rc_fl import RCFLClient
from fedram_flwr.clients.scaffold import AmplifiedScaffoldClient, ScaffoldClient
from fedram_flwr.clients.train_blocks import (
    train_amplified_scaffold,
    train_ca_fed,
    train_cvar,
    train_erm,
    train_rcfl,
    train_scaffold,
)
from fedram_flwr.clients.wire import partition_id

__all__ = [
    "AmplifiedScaffoldClient",
    "CAFedClient",
    "CVaRClient",
    "ERMClient",
    "RCFLClient",
    "ScaffoldClient",
    "evaluate",
    "partition_id",
    "partition_id_query",
    "train_amplified_scaffold",
    "train_ca_fed",
    "train_cvar",
    "train_erm",
    "train_rcfl",
    "train_scaffold",
]
