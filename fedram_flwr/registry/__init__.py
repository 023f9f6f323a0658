"""The registry: every oracle and algorithm a scenario may name, declared once, and the
one place scenarios are validated.

- :mod:`~fedram_flwr.registry.specs`: the two spec shapes (:class:`OracleSpec`,
  :class:`AlgorithmSpec`) and the params base classes.
- ``ORACLES``, one spec per availability oracle, and the oracles' spec shape live in
  :mod:`fedram_flwr.availability.specs` (availability knowledge a node reads) and are
  re-exported here; ``registry.oracles`` & co. stay as aliases of their modules there.
- :mod:`~fedram_flwr.registry.algorithms`: ``ALGORITHMS``, one spec per algorithm;
  ``ASYNC_ALGORITHMS``, the asynchronous ones (FedBuff: its event loop, and the Message API).
- :mod:`~fedram_flwr.registry.validate`: :func:`load_scenario`,
  :func:`scenario_from_dict`, :func:`with_overrides` (schema + registry checks).

Importing the package loads none of them: each name below loads its module when first
used (PEP 562). A node, which needs the oracles (its data depends on who is rarely
available) and not the algorithms' strategies, imports
:mod:`fedram_flwr.availability.specs` and nothing of this package
(:mod:`fedram_flwr.clients.node`, ``tests/test_imports.py``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_SPECS = "fedram_flwr.availability.specs"

_HOME = {
    "ALGORITHMS": f"{__name__}.algorithms",
    "ASYNC_ALGORITHMS": f"{__name__}.algorithms",
    "ORACLES": _SPECS,
    "oracle_params": _SPECS,
    "oracle_spec": _SPECS,
    "AlgorithmParams": f"{__name__}.specs",
    "AlgorithmSpec": f"{__name__}.specs",
    "AsyncAlgorithmSpec": f"{__name__}.specs",
    "OracleParams": _SPECS,
    "OracleSpec": _SPECS,
    "Run": f"{__name__}.specs",
    "least_available": _SPECS,
    "algorithm_params": f"{__name__}.validate",
    "algorithm_spec": f"{__name__}.validate",
    "is_asynchronous": f"{__name__}.validate",
    "load_scenario": f"{__name__}.validate",
    "scenario_from_dict": f"{__name__}.validate",
    "validate": f"{__name__}.validate",
    "with_overrides": f"{__name__}.validate",
}
"""Each public name -> the module that defines it: one of this package, or the oracle
specs' package (:mod:`fedram_flwr.availability.specs`, re-exported here)."""

__all__ = sorted(_HOME, key=str.lower)


def __getattr__(name: str) -> Any:
    """``name``'s value, its module loaded first; every name of that module is bound here
    then (``validate``, the function, not the module ``registry.validate``)."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = import_module(_HOME[name])
    globals().update({n: getattr(module, n) for n, home in _HOME.items() if home == _HOME[name]})
    return globals()[name]
