"""The registry: every oracle and algorithm a scenario may name, declared once, and the
one place scenarios are validated.

- :mod:`~fedram_flwr.registry.specs`: the two spec shapes (:class:`OracleSpec`,
  :class:`AlgorithmSpec`) and the params base classes.
- :mod:`~fedram_flwr.registry.oracles`: ``ORACLES``, one spec per availability oracle.
- :mod:`~fedram_flwr.registry.algorithms`: ``ALGORITHMS``, one spec per algorithm.
- :mod:`~fedram_flwr.registry.validate`: :func:`load_scenario`,
  :func:`scenario_from_dict`, :func:`with_overrides` (schema + registry checks).
"""

from fedram_flwr.registry.algorithms import ALGORITHMS
from fedram_flwr.registry.oracles import ORACLES
from fedram_flwr.registry.specs import (
    AlgorithmParams,
    AlgorithmSpec,
    OracleParams,
    OracleSpec,
    Run,
    least_available,
)
from fedram_flwr.registry.validate import (
    algorithm_params,
    algorithm_spec,
    load_scenario,
    oracle_params,
    oracle_spec,
    scenario_from_dict,
    validate,
    with_overrides,
)

__all__ = [
    "ALGORITHMS",
    "ORACLES",
    "AlgorithmParams",
    "AlgorithmSpec",
    "OracleParams",
    "OracleSpec",
    "Run",
    "algorithm_params",
    "algorithm_spec",
    "least_available",
    "load_scenario",
    "oracle_params",
    "oracle_spec",
    "scenario_from_dict",
    "validate",
    "with_overrides",
]
