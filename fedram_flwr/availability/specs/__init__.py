"""The oracle specs: every availability oracle a scenario may name, declared once.

A node's data split depends on its oracle's law (the rare clients are the least
available under it), so these specs are availability knowledge the client side reads,
apart from the server's registry of algorithms (:mod:`fedram_flwr.registry` re-exports
every name here; the client side imports this package only, ``tests/test_imports.py``).

- :mod:`.oracle_spec`: the spec shape (:class:`OracleSpec`, :class:`OracleParams`) and
  :func:`least_available`;
- :mod:`.oracles`: ``ORACLES``, one spec per oracle, and :func:`oracle_spec`,
  :func:`oracle_params` (the scenario's);
- :mod:`.observed`: ``trace`` and ``connected``; :mod:`.nonstationary`: FedAWE's
  ``nonstationary``; :mod:`.labels`: FedAWE's p_i from the labels; :mod:`.checks`: the
  checks their params share.

Nothing in :mod:`fedram_flwr.availability` imports this package: a Flower user's
``import fedram_flwr.availability`` loads no scenario machinery.
"""

from fedram_flwr.availability.specs.oracle_spec import (
    Hidden,
    OracleParams,
    OracleSpec,
    RoundLaw,
    least_available,
)
from fedram_flwr.availability.specs.oracles import ORACLES, oracle_params, oracle_spec

__all__ = [
    "ORACLES",
    "Hidden",
    "OracleParams",
    "OracleSpec",
    "RoundLaw",
    "least_available",
    "oracle_params",
    "oracle_spec",
]
