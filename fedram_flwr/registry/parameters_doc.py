"""Every algorithm's parameters as tables, derived from the cores' declarations.

``docs/parameters.md`` is this module's output (``python -m
fedram_flwr.registry.parameters_doc > docs/parameters.md``; ``tests/registry`` checks
that the committed file is current), and ``fedram show`` prints the rows of the
scenario's algorithm. Nothing here is written by hand per algorithm.
"""

from __future__ import annotations

import typing
from dataclasses import fields
from typing import Any

from fedram_flwr.registry.algorithms import ALGORITHMS, ASYNC_ALGORITHMS
from fedram_flwr.registry.params import KNOWN_READS, AlgorithmParams
from fedram_flwr.registry.specs import AlgorithmSpec, AsyncAlgorithmSpec
from fedram_flwr.strategies.hyper import declared, is_required, type_name

HEADER = """# Parameters of every algorithm

Generated from the declarations on each algorithm's core
(`fedram_flwr.strategies.hyper`): `python -m fedram_flwr.registry.parameters_doc >
docs/parameters.md`. Do not edit by hand; a test checks the file is current.

Each table lists the keyword arguments both Flower faces take (the legacy
`fedram_flwr.strategies.<Name>` with `initial_arrays`, the Message-API
`fedram_flwr.message_api.<Name>`, beside Flower `FedAvg`'s arguments,
`accept_failures` and `max_failed_rounds`) and, in a scenario, the keys of
`algorithm.params`. A parameter *given by the run* is not a scenario key: the run
supplies it (`num-clients`: `data.num_clients`, `training-lr`: `training.lr`, `seed`:
the seed, `data-shares`: m_i / m, `known-*`: the oracle's hidden law, only with
`availability: oracle`).
"""


AnySpec = AlgorithmSpec[Any] | AsyncAlgorithmSpec[Any]


def core_of(spec: AnySpec) -> type | None:
    """The core class whose declarations ``spec``'s parameters are (None: q-FFL's)."""
    if isinstance(spec, AsyncAlgorithmSpec):
        return spec.core
    return getattr(spec.strategy, "core_type", None)


def rows(spec: AnySpec) -> list[tuple[str, str, str, str, str]]:
    """(name, type, default, allowed, meaning) of each of ``spec``'s parameters: the
    core's declarations, then what the scenario adds (``availability``)."""
    core = core_of(spec)
    out = []
    for f, h in declared(core) if core is not None else []:
        if h.run in KNOWN_READS and KNOWN_READS[h.run] not in spec.reads_hidden:
            continue  # never given to this algorithm
        if h.run is not None:
            default = f"given by the run ({h.run})"
        elif h.run_default is not None:
            default = f"the run's {h.run_default}"
        else:
            default = "required" if is_required(f) else f"`{f.default!r}`"
        out.append((f.name, type_name(core, f.name), default, h.allowed(), h.doc))
    named = {row[0] for row in out}
    for f in fields(spec.params) if core is not None else []:
        if f.name not in named:
            allowed = ", ".join(typing.get_args(typing.get_type_hints(spec.params)[f.name]))
            out.append((f.name, "str", f"`{f.default!r}`", allowed, ADDED.get(f.name, "")))
    return out


ADDED = {
    "availability": "where the rule's availability comes from: its own estimate, or the "
    "oracle's hidden law (oracle-informed)",
}
"""The meaning of each key a scenario adds beyond the cores' declarations."""


def algorithm_table(spec: AnySpec) -> str:
    """One algorithm's section: its classes and the table of its parameters."""
    if isinstance(spec, AsyncAlgorithmSpec):
        classes = (
            f"`{spec.core.__module__}.{spec.core.__name__}` / "
            f"`{spec.message_strategy.__module__}.{spec.message_strategy.__name__}` "
            "(asynchronous: the in-process event loop and the Message API; docs/fedbuff.md)"
        )
    else:
        classes = (
            f"`{spec.strategy.__module__}.{spec.strategy.__name__}` / "
            f"`{spec.message_strategy.__module__}.{spec.message_strategy.__name__}`"
        )
    lines = [f"## `{spec.name}`", "", classes, ""]
    table = rows(spec)
    if not table:
        return "\n".join([*lines, _hand_written(spec.params), ""])
    lines += ["| parameter | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    lines += [f"| `{n}` | {t} | {d} | {a} | {m} |" for n, t, d, a, m in table]
    return "\n".join([*lines, ""])


def _hand_written(params: type[AlgorithmParams]) -> str:
    return " ".join((params.__doc__ or "").split("\n\n")[0].split())


def parameters_markdown() -> str:
    """``docs/parameters.md``: every algorithm of the registry, in its order."""
    specs = [*ALGORITHMS.values(), *ASYNC_ALGORITHMS.values()]
    return "\n".join([HEADER, *(algorithm_table(spec) for spec in specs)])


def show_lines(name: str, params: AlgorithmParams) -> list[str]:
    """What ``fedram show`` prints of algorithm ``name`` with the scenario's ``params``:
    one line per scenario key, its value, what is allowed and what it is."""
    spec = {**ALGORITHMS, **ASYNC_ALGORITHMS}[name]
    values = vars(params)
    out = [f"# algorithm.params of {name} (declared on its core):"]
    for n, _, default, allowed, meaning in rows(spec):
        if n in values:
            where = f"; allowed {allowed}" if allowed else ""
            out.append(f"#   {n} = {values[n]!r}  ({meaning}{where}; default {default.strip('`')})")
        else:
            out.append(f"#   {n}: {default}  ({meaning})")
    return out


if __name__ == "__main__":  # pragma: no cover - the docs' generator
    print(parameters_markdown(), end="")
