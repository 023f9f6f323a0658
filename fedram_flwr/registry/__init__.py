"""The registry: every oracle and algorithm a scenario may name, declared once, and the
one place scenarios are validated.

- :mod:`~fedram_flwr.registry.specs`: the two spec shapes (:class:`OracleSpec`,
  :class:`AlgorithmSpec`) and the params base classes.
- :mod:`~fedram_flwr.registry.oracles`: ``ORACLES``, one spec per availability oracle.
- :mod:`~fedram_flwr.registry.algorithms`: ``ALGORITHMS``, one spec per algorithm;
  ``ASYNC_ALGORITHMS``, the asynchronous ones (FedBuff: in-process only).
- :mod:`~fedram_flwr.registry.validate`: :func:`load_scenario`,
  :func:`scenario_from_dict`, :func:`with_overrides` (schema + registry checks).
"""

from fedram_flwr.registry.algorithms import ALGORITHMS, ASYNC_ALGORITHMS
from fedram_flwr.registry.oracles import ORACLES
from fedram_flwr.registry.specs import (
    AlgorithmParams,
    AlgorithmSpec,
    AsyncAlgorithmSpec,
    OracleParams,
    OracleSpec,
    Run,
    least_available,
)
from fedram_flwr.registry.validate import (
    algorithm_params,
    algorithm_spec,
    is_asynchronous,
    load_scenario,
    oracle_params,
    oracle_spec,
    scenario_from_dict,
    validate,
    with_overrides,
)

__all__ = [
    "ALGORITHMS",
    "ASYNC_ALGORITHMS",
    "ORACLES",
    "AlgorithmParams",
    "AlgorithmSpec",
    "AsyncAlgorithmSpec",
    "OracleParams",
    "OracleSpec",
    "Run",
    "algorithm_params",
    "algorithm_spec",
    "is_asynchronous",
    "least_available",
    "load_scenario",
    "oracle_params",
    "oracle_spec",
    "scenario_from_dict",
    "validate",
    "with_overrides",
]
