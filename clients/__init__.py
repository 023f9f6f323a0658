"""The client side, imported as ``fedram_flwr.clients``.

Everything a SuperNode runs of the project, and nothing of the server side
(``tests/test_imports.py``):

- The local objectives, one local fit each: the legacy NumPyClients (``erm``, ``cvar``,
  ``ca_fed``, ``rc_fl``, ``scaffold``, ``focus``) and the Message-API building blocks a
  user's ``@app.train()`` / ``@app.evaluate()`` calls (:mod:`~fedram_flwr.clients.train_blocks`,
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

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOME = {
    "AmplifiedScaffoldClient": "fedram_flwr.clients.scaffold",
    "CAFedClient": "fedram_flwr.clients.ca_fed",
    "CVaRClient": "fedram_flwr.clients.cvar",
    "ERMClient": "fedram_flwr.clients.erm",
    "FocusClient": "fedram_flwr.clients.focus",
    "evaluate": "fedram_flwr.clients.message",
    "partition_id": "fedram_flwr.clients.wire",
    "partition_id_query": "fedram_flwr.clients.partition_query",
    "RCFLClient": "fedram_flwr.clients.rc_fl",
    "ScaffoldClient": "fedram_flwr.clients.scaffold",
    "train_amplified_scaffold": "fedram_flwr.clients.train_blocks",
    "train_ca_fed": "fedram_flwr.clients.train_blocks",
    "train_cvar": "fedram_flwr.clients.train_blocks",
    "train_erm": "fedram_flwr.clients.train_blocks",
    "train_focus": "fedram_flwr.clients.train_blocks",
    "train_rcfl": "fedram_flwr.clients.train_blocks",
    "train_scaffold": "fedram_flwr.clients.train_blocks",
}
"""Each name of the face -> the module that defines it, loaded on first use: importing a
light module of the client side (``partition_query``, which the torch-free Message-API
strategies import) does not load torch through this face."""

__all__ = sorted(_HOME, key=str.lower)


def __getattr__(name: str) -> Any:
    """``name``'s value, its module loaded first (PEP 562)."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
