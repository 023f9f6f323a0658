"""The registry: every oracle and algorithm a scenario may name, declared once, and the
one place scenarios are validated.

- :mod:`~fedram_flwr.registry.specs`: the two spec shapes (:class:`OracleSpec`,
  :class:`AlgorithmSpec`) and the params base classes.
- :mod:`~fedram_flwr.registry.oracles`: ``ORACLES``, one spec per availability oracle.
- :mod:`~fedram_flwr.registry.algorithms`: ``ALGORITHMS``, one spec per algorithm;
  ``ASYNC_ALGORITHMS``, the asynchronous ones (FedBuff: in-process only).
- :mod:`~fedram_flwr.registry.validate`: :func:`load_scenario`,
  :func:`scenario_from_dict`, :func:`with_overrides` (schema + registry checks).

Importing the package loads none of them: each name below loads its module when first
used (PEP 562), so a node, which needs the oracles (its data depends on who is rarely
available) and not the algorithms' strategies, imports ``registry.oracles`` alone
(:mod:`fedram_flwr.node`).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOME = {
    "ALGORITHMS": "algorithms",
    "ASYNC_ALGORITHMS": "algorithms",
    "ORACLES": "oracles",
    "oracle_params": "oracles",
    "oracle_spec": "oracles",
    "AlgorithmParams": "specs",
    "AlgorithmSpec": "specs",
    "AsyncAlgorithmSpec": "specs",
    "OracleParams": "oracle_spec",
    "OracleSpec": "oracle_spec",
    "Run": "specs",
    "least_available": "oracle_spec",
    "algorithm_params": "validate",
    "algorithm_spec": "validate",
    "is_asynchronous": "validate",
    "load_scenario": "validate",
    "scenario_from_dict": "validate",
    "validate": "validate",
    "with_overrides": "validate",
}
"""Each public name -> the module of this package that defines it."""

__all__ = sorted(_HOME, key=str.lower)


def __getattr__(name: str) -> Any:
    """``name``'s value, its module loaded first; every name of that module is bound here
    then (``validate``, the function, not the module ``registry.validate``)."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = import_module(f"{__name__}.{_HOME[name]}")
    globals().update({n: getattr(module, n) for n, home in _HOME.items() if home == _HOME[name]})
    return globals()[name]
