"""The local objectives (imported as ``fedram_flwr.clients``): one local fit each, the
legacy NumPyClient over it, and the Message-API blocks a user's ``@app.train()`` calls
(:mod:`fedram_flwr.clients.message`)."""

from fedram_flwr.clients.ca_fed import CAFedClient
from fedram_flwr.clients.cvar import CVaRClient
from fedram_flwr.clients.erm import ERMClient
from fedram_flwr.clients.message import (
    evaluate,
    train_ca_fed,
    train_cvar,
    train_erm,
    train_rcfl,
    train_scaffold,
)
from fedram_flwr.clients.rc_fl import RCFLClient
from fedram_flwr.clients.scaffold import ScaffoldClient

__all__ = [
    "CAFedClient",
    "CVaRClient",
    "ERMClient",
    "RCFLClient",
    "ScaffoldClient",
    "evaluate",
    "train_ca_fed",
    "train_cvar",
    "train_erm",
    "train_rcfl",
    "train_scaffold",
]
