"""The one place a scenario is validated, and the ways to make one.

:func:`load_scenario`, :func:`scenario_from_dict` and :func:`with_overrides` parse with
:mod:`fedram_flwr.scenario.config` (the schema) and then :func:`validate` against the registry:
the oracle's and the algorithm's ``params``, their compatibility, and every variant of
the sweep. Errors name the scenario field (``algorithm.params.alpha``) and what is
allowed. Nothing is built here: the ClientManager, strategy and clients are built by
:class:`fedram_flwr.engines.experiment.Experiment`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedram_flwr.availability.specs.checks import lookup
from fedram_flwr.availability.specs.oracles import ORACLES, oracle_params, oracle_spec
from fedram_flwr.availability.timed import clock_availability
from fedram_flwr.clock.scenario import scenario_speeds
from fedram_flwr.registry.algorithms import ALGORITHMS, ASYNC_ALGORITHMS
from fedram_flwr.registry.specs import AlgorithmParams, AlgorithmSpec, AsyncAlgorithmSpec
from fedram_flwr.scenario.config import (
    RoundPolicyConfig,
    Scenario,
    ScenarioError,
    parse_scenario,
    parse_scenario_file,
    parse_with_overrides,
)
from fedram_flwr.scenario.schema import build_dataclass


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file; errors name the file and the field."""
    return parse_scenario_file(path, validate)


def scenario_from_dict(raw: Mapping[str, Any]) -> Scenario:
    """Parse and validate a scenario mapping (a YAML file's contents)."""
    return validate(parse_scenario(raw))


def with_overrides(scenario: Scenario, overrides: Mapping[str, Any]) -> Scenario:
    """A validated copy of ``scenario`` with dotted-path overrides
    (``algorithm.params.alpha``, or its short form ``algorithm.alpha``)."""
    return parse_with_overrides(scenario, overrides, validate)


def validate(scenario: Scenario) -> Scenario:
    """Check ``scenario`` (and every variant of its sweep) against the registry."""
    _validate_one(scenario)
    if scenario.sweep:  # a bad sweep value fails at load time, not mid-run
        for _, variant in scenario.variants():
            try:
                _validate_one(variant)
            except ScenarioError as err:
                raise ScenarioError(f"sweep: {err}") from None
    return scenario


def _validate_one(scenario: Scenario) -> None:
    check_time(scenario)
    oracle = oracle_params(scenario)
    oracle.check(scenario)
    params = algorithm_params(scenario)
    params.check(scenario)
    spec, oracle_spec_ = algorithm_spec(scenario), oracle_spec(scenario)
    missing = spec.reads_hidden - oracle_spec_.hidden
    if params.oracle_informed and missing:
        defining = [o.name for o in ORACLES.values() if spec.reads_hidden <= o.hidden]
        raise ScenarioError(
            f"algorithm.params.availability: oracle-informed {spec.name} reads each "
            f"client's {', '.join(sorted(spec.reads_hidden))}, which only the "
            f"{', '.join(defining)} oracles define; availability.oracle is "
            f"{oracle_spec_.name!r} (use estimated)"
        )


def check_time(scenario: Scenario) -> None:
    """What ``time`` says that only the algorithm or the files can refute, at load: a
    round policy given to an asynchronous algorithm (it has no rounds to wait for: the
    policy would do nothing), and FedScale speed and behaviour files that are missing
    or malformed (read here as a run reads them)."""
    time = scenario.time
    if time is None:
        return
    if scenario.algorithm.name in ASYNC_ALGORITHMS and time.policy != RoundPolicyConfig():
        raise ScenarioError(
            f"time.policy: {scenario.algorithm.name} is asynchronous and takes each update as "
            "it arrives, so a round policy would do nothing; leave time.policy out (its "
            "algorithm.params set how many updates a step waits for)"
        )
    if scenario.algorithm.name in ASYNC_ALGORITHMS and time.clock != "simulated":
        raise ScenarioError(
            f"time.clock: {scenario.algorithm.name} chooses its clock itself "
            "(algorithm.params.clock: wall, simulated or auto); leave time.clock out"
        )
    k = scenario.data.num_clients
    try:
        if time.speeds.law == "fedscale":
            scenario_speeds(time.speeds, k, seed=0)
        if time.availability.law == "fedscale":
            clock_availability(time.availability, k, seed=0)
    except ValueError as err:
        raise ScenarioError(str(err)) from None


# ------------------------------------------------------------------ lookups
def algorithm_spec(scenario: Scenario) -> AlgorithmSpec[Any] | AsyncAlgorithmSpec[Any]:
    """The spec ``algorithm.name`` names (a synchronous or an asynchronous one)."""
    table = {**ALGORITHMS, **ASYNC_ALGORITHMS}
    return lookup(table, scenario.algorithm.name, "algorithm.name")


def is_asynchronous(scenario: Scenario) -> bool:
    """Whether ``algorithm.name`` is an asynchronous algorithm (in-process only)."""
    return scenario.algorithm.name in ASYNC_ALGORITHMS


def algorithm_params(scenario: Scenario) -> AlgorithmParams:
    """``algorithm.params`` as its algorithm's params dataclass (keys and types
    checked; :func:`validate` runs its ``check``)."""
    spec = algorithm_spec(scenario)
    return build_dataclass(spec.params, scenario.algorithm.params, "algorithm.params.")
