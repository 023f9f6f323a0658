"""Hyper-parameters declared once (strategies/hyper.py): the declarations' checks, and
every algorithm's two Flower faces built from its core's declarations."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

from fedram_flwr.registry import ALGORITHMS
from fedram_flwr.strategies.core import Core
from fedram_flwr.strategies.hyper import (
    Hyper,
    core_parameters,
    declared,
    hyper,
    is_required,
    make_core,
)

CORES = {name: spec.strategy.core_type for name, spec in ALGORITHMS.items() if name != "qffl"}


@dataclass(frozen=True, kw_only=True)
class ToyCore(Core[None]):
    rate: float = hyper(doc="a rate", lo=0.0, hi=1.0, lo_open=True)
    steps: int = hyper(3, doc="a count", lo=1, hi="num-clients")
    mode: str = hyper("a", doc="a mode", choices=("a", "b"))
    weights: tuple[float, ...] = hyper((0.5,), doc="weights", lo=0.0, hi=1.0)


# ------------------------------------------------------------------ the checks
@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0.5, None),
        (1.0, None),
        (0.0, "rate: 0.0 is outside the allowed range (0, 1]"),
        (1.5, "rate: 1.5 is outside the allowed range (0, 1]"),
        (math.nan, "rate: nan is outside the allowed range (0, 1]"),
        (np.float32(0.25), None),
    ],
)
def test_a_range_is_checked_at_both_ends_and_refuses_nan(value, why) -> None:
    h = declared(ToyCore)[0][1]
    assert h.problem("rate", value) == why


def test_choices_tuples_and_run_bounds() -> None:
    (_, steps), (_, mode), (_, weights) = (d for d in declared(ToyCore)[1:])
    assert mode.problem("mode", "c") == "mode: 'c' is not one of the allowed values: a, b"
    assert mode.problem("mode", len).startswith("mode: <built-in function len> is not one of")
    assert weights.problem("weights", (0.5, 1.5)) == (
        "weights[1]: 1.5 is outside the allowed range [0, 1]"
    )
    assert weights.problem("weights", np.array([0.2, -1.0])).startswith("weights[1]: -1.0")
    assert steps.problem("steps", 9) is None  # the run bound is unknown here
    assert steps.problem("steps", 9, {"num-clients": 4}) == (
        "steps: 9 is outside the allowed range [1, 4]"
    )
    assert Hyper("x", lo=0.0).allowed() == "[0, inf)"


def test_a_core_checks_its_declarations_when_built_naming_its_own_field() -> None:
    ToyCore(rate=0.5)
    with pytest.raises(ValueError, match=r"^rate: 0.0 is outside the allowed range \(0, 1\]$"):
        ToyCore(rate=0.0)
    with pytest.raises(ValueError, match="^mode: 'z' is not one of"):
        ToyCore(rate=0.5, mode="z")


def test_an_undeclared_field_is_refused() -> None:
    @dataclass(frozen=True)
    class Loose(Core[None]):
        gain: float = field(default=1.0)

    with pytest.raises(TypeError, match=r"Loose.gain: declare it with strategies.hyper.hyper"):
        Loose()


def test_make_core_names_unknown_and_missing_arguments() -> None:
    with pytest.raises(TypeError, match=r"Toy: unknown argument\(s\) \['speed'\]; its own are"):
        make_core(ToyCore, {"rate": 0.5, "speed": 2}, "Toy", "nothing else")
    with pytest.raises(TypeError, match=r"Toy: missing required argument\(s\) \['rate'\]"):
        make_core(ToyCore, {}, "Toy", "nothing else")
    params = core_parameters(ToyCore)
    assert [p.name for p in params] == ["rate", "steps", "mode", "weights"]  # required first
    assert params[1].default == 3 and params[0].default is inspect.Parameter.empty


# ------------------------------------------- every algorithm, from its declarations
@pytest.mark.parametrize("name", sorted(CORES))
def test_both_faces_take_exactly_the_cores_declared_parameters(name: str) -> None:
    """The legacy and Message-API signatures list each declared parameter with the
    declared default (or none: required), and their docs list each one with its doc."""
    spec, core = ALGORITHMS[name], CORES[name]
    want = {
        f.name: (inspect.Parameter.empty if is_required(f) else f.default)
        for f, _ in declared(core)
    }
    for face in (spec.strategy, spec.message_strategy):
        got = inspect.signature(face).parameters
        assert {n: got[n].default for n in want} == want, face
        doc = inspect.getdoc(face)
        for f, h in declared(core):
            assert f"\n{f.name} : " in doc and h.doc in doc, (face, f.name)
    assert list(inspect.signature(spec.strategy).parameters)[0] == "initial_arrays"
