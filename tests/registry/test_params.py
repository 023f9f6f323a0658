"""A scenario's ``algorithm.params`` derived from the cores' declarations
(registry/params.py, parameters_doc.py): keys, defaults, range errors naming the
scenario field, what the run gives, the generated docs and ``fedram show``."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from fedram_flwr.cli.commands import main
from fedram_flwr.registry import ALGORITHMS, ASYNC_ALGORITHMS
from fedram_flwr.registry.parameters_doc import parameters_markdown
from fedram_flwr.registry.params import OracleInformed
from fedram_flwr.strategies.hyper import declared
from tests.helpers import TINY_GAUSSIAN, scenario_error

ROOT = Path(__file__).resolve().parents[2]
CORES = {name: spec.strategy.core_type for name, spec in ALGORITHMS.items() if name != "qffl"}
CORES.update({name: spec.core for name, spec in ASYNC_ALGORITHMS.items()})
CORED = sorted(CORES)
BASE = {"fedbuff": {"concurrency": 3}}  # its default C = 10 is more than the 3 clients


def raw_with(name: str, params: dict) -> dict:
    raw = copy.deepcopy(TINY_GAUSSIAN)
    raw["algorithm"] = {"name": name, "params": {**BASE.get(name, {}), **params}}
    return raw


@pytest.mark.parametrize("name", CORED)
def test_the_scenario_keys_are_the_declared_ones_with_their_defaults(name: str) -> None:
    spec, core = {**ALGORITHMS, **ASYNC_ALGORITHMS}[name], CORES[name]
    own = {f.name: f.default for f, h in declared(core) if h.run is None and h.run_default is None}
    fields = {f.name: f.default for f in dataclasses.fields(spec.params)}
    added = {"availability": "estimated"} if issubclass(spec.params, OracleInformed) else {}
    run_defaulted = {f.name: None for f, h in declared(core) if h.run_default is not None}
    assert fields == {**own, **run_defaulted, **added}


def bad_values() -> list[tuple[str, str, object]]:
    """(algorithm, field, a value just outside its declared range or choices)."""
    out = []
    for name in CORED:
        for f, h in declared(CORES[name]):
            if h.run is not None:
                continue
            if h.choices:
                out.append((name, f.name, "no-such-choice"))
            elif isinstance(h.lo, int | float):
                out.append((name, f.name, h.lo if h.lo_open else h.lo - 1))
            elif isinstance(h.hi, int | float):
                out.append((name, f.name, h.hi + 1))
    return out


@pytest.mark.parametrize(("name", "key", "value"), bad_values())
def test_a_value_outside_its_declaration_names_the_scenario_field(name, key, value) -> None:
    if key == "alpha" and name == "rfedfair":
        value = [value]
    message = scenario_error(raw_with(name, {key: value}))
    assert message.startswith(f"algorithm.params.{key}"), message
    assert "allowed" in message, message


def test_a_bound_given_by_the_run_is_checked_against_the_scenario() -> None:
    message = scenario_error(raw_with("f3ast", {"clients_per_round": 4}))  # 3 clients
    assert message == "algorithm.params.clients_per_round: 4 is outside the allowed range [1, 3]"


def test_the_committed_parameters_page_is_current() -> None:
    committed = (ROOT / "docs" / "parameters.md").read_text(encoding="utf-8")
    assert committed == parameters_markdown(), (
        "docs/parameters.md is stale: python -m fedram_flwr.registry.parameters_doc "
        "> docs/parameters.md"
    )


def test_fedram_show_prints_the_algorithms_declared_parameters(tmp_path, capsys) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw_with("fedar", {"rho": 0.3})), encoding="utf-8")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "# algorithm.params of fedar (declared on its core):" in out
    assert (
        "#   rho = 0.3  (rho, the exponent of the staleness weight (eq. 6); allowed [0, 1]" in out
    )
    assert "#   lr: given by the run (training-lr)" in out
