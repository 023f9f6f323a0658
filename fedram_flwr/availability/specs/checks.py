"""The checks the oracles' params share.

Checks the oracles' params share (:mod:`fedram_flwr.availability.specs.oracles`,
:mod:`fedram_flwr.availability.specs.nonstationary`), and the tables' lookup: each raises a
ScenarioError naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fedram_flwr.scenario.config import ScenarioError


def as_scenario_error(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``, a ValueError becoming a ScenarioError.

    ``fn(*args, **kwargs)``, its ValueError (whose message names the field) a
    ScenarioError.
    """
    try:
        return fn(*args, **kwargs)
    except ValueError as err:
        raise ScenarioError(str(err)) from None


def check_length(field: str, values: tuple | None, n: int, what: str) -> None:
    """Require ``n`` entries in ``values`` (when given), ``what`` naming ``n``."""
    if values is not None and len(values) != n:
        raise ScenarioError(f"{field}: has {len(values)} entries, {what} is {n}")


def check_ids(field: str, values: tuple[int, ...] | None, n: int, what: str) -> None:
    """Every entry of ``values`` in 0..n-1."""
    bad = [i for i, v in enumerate(values or ()) if not 0 <= v < n]
    if bad:
        raise ScenarioError(
            f"{field}[{bad[0]}]: {values[bad[0]]} is not {what}; allowed values: 0..{n - 1}"
        )


def lookup(table: Mapping[str, Any], name: str, field: str) -> Any:
    """Return ``table[name]``, or raise naming ``field`` and the allowed names."""
    if name not in table:
        raise ScenarioError(
            f"{field}: unknown name {name!r}; allowed values: {', '.join(sorted(table))}"
        )
    return table[name]
