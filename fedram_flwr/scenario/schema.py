"""The scenario schema's machinery, a leaf module: the error every bad field raises, the
strict YAML reader, the YAML-to-dataclass coercion (keys, types, ranges) that
:mod:`fedram_flwr.scenario.config` and the registered parameter classes of
:mod:`fedram_flwr.registry` are built with, and how a relative path is made absolute."""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Literal

import yaml


class ScenarioError(ValueError):
    """A scenario file or override is invalid; the message names the field."""


# ------------------------------------------------------------------------- YAML
MAX_YAML_CHARS = 4 * 2**20
"""The longest YAML text read (a scenario file, a ``--set`` value): the shipped
scenarios are under 2 kB; a scenario listing a value per client for 100,000 clients
fits."""
MAX_YAML_DEPTH = 64
"""The deepest nesting of lists and mappings (a scenario needs about 5 levels); deeper
text ends Python's recursion in PyYAML's composer."""
MAX_YAML_VALUES = 2_000_000
"""The most values (scalars, lists, mappings) a YAML text may hold once its aliases are
expanded: a nested alias ("billion laughs") bomb of a few hundred bytes expands to
billions, which every later copy of the scenario would build."""
MAX_INT_DIGITS = 100
"""The most digits of an integer (seeds are below 2**32, 10 digits); Python refuses to
convert more than 4300 (``sys.set_int_max_str_digits``)."""


class _LimitError(yaml.MarkedYAMLError):
    """A YAML text over one of the limits above."""


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that rejects a key given twice in one mapping (PyYAML keeps the
    last one silently) and refuses texts over the limits above while composing them,
    before anything is built from them: nesting deeper than :data:`MAX_YAML_DEPTH`,
    more than :data:`MAX_YAML_VALUES` values with aliases expanded, integers longer than
    :data:`MAX_INT_DIGITS` digits."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[str] = []  # the field being composed, for messages
        self._sizes: dict[int, int] = {}  # id(node) -> its values, aliases expanded

    def _refuse(self, problem: str, mark: Any) -> None:
        parts = self._path if len(self._path) <= 8 else [*self._path[:6], "...", self._path[-1]]
        field = "".join(parts).lstrip(".")
        raise _LimitError(None, None, f"{field or 'the document'}: {problem}", mark)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if isinstance(index, yaml.ScalarNode):
            self._path.append(f".{index.value}")
        elif isinstance(index, int):
            self._path.append(f"[{index}]")
        else:
            self._path.append("")
        try:
            if len(self._path) > MAX_YAML_DEPTH:
                self._refuse(
                    f"nested more than {MAX_YAML_DEPTH} levels deep", self.peek_event().start_mark
                )
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:  # an alias returns a node composed before
                self._sizes[id(node)] = 1 + sum(self._sizes[id(c)] for c in _children(node))
            if self._sizes[id(node)] > MAX_YAML_VALUES:
                self._refuse(
                    f"expands to more than {MAX_YAML_VALUES:,} values (aliases of aliases: "
                    "a YAML bomb?)",
                    node.start_mark,
                )
            return node
        finally:
            self._path.pop()

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            if isinstance(key, Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        digits = sum(c.isalnum() for c in str(node.value))  # 0x.. too: a repr() of it fails
        if digits > MAX_INT_DIGITS:
            raise _LimitError(
                None,
                None,
                f"an integer of {digits} digits; at most {MAX_INT_DIGITS} are read",
                node.start_mark,
            )
        return super().construct_yaml_int(node)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml(text: str, where: str) -> Any:
    """``text`` as YAML (duplicate keys rejected); a syntax error raises
    :class:`ScenarioError` naming ``where``, the line and the column, and so does a text
    over the limits (:data:`MAX_YAML_CHARS`, :data:`MAX_YAML_DEPTH`,
    :data:`MAX_YAML_VALUES`, :data:`MAX_INT_DIGITS`), refused before it is built."""
    if len(text) > MAX_YAML_CHARS:
        raise ScenarioError(
            f"{where}: refused: {len(text):,} characters of YAML; at most {MAX_YAML_CHARS:,}"
        )
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        if "'\\t'" in problem:
            problem += " (indent with spaces: YAML forbids tabs there)"
        kind = "refused" if isinstance(err, _LimitError) else "invalid YAML"
        raise ScenarioError(f"{where}: {kind}: {at}{problem}") from None


# ------------------------------------------------------------------ small helpers
def absolute_path(path: str) -> str:
    """``path`` made absolute against the working directory (``~`` expanded): the one
    rule for every relative path of a scenario, applied when it is loaded."""
    return os.path.abspath(os.path.expanduser(path))


NAME_MAX = 255
"""The longest file name, in bytes of UTF-8, on Linux's file systems (ext4, xfs, btrfs,
tmpfs) and macOS's: a scenario name or a variant label is one folder of a run's path."""


def plain_name(value: str, what: str) -> str:
    """``value`` if it can be one file name: not empty, ``.`` or ``..``; no ``/``, ``\\``
    or control character; at most :data:`NAME_MAX` bytes of UTF-8. Otherwise
    :class:`ScenarioError` naming ``what`` and the rule."""
    bad = [c for c in value if c in "/\\" or ord(c) < 32 or ord(c) == 127]
    if value in ("", ".", "..") or bad:
        shown = value if len(value) <= 60 else value[:57] + "..."
        raise ScenarioError(
            f"{what}: {shown!r} cannot name a run folder: give a plain name (not empty, '.' or "
            f"'..'; no '/', '\\' or control characters)"
        )
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX:
        raise ScenarioError(
            f"{what}: {value[:40]!r}... is {size} bytes long; a folder name is at most "
            f"{NAME_MAX} bytes (the file system's limit)"
        )
    return value


def few(items: Iterable[Any], limit: int = 5) -> str:
    """``[a, b, c, d, e, ...]`` (N in all): at most ``limit`` items of a list for an error
    message, which must stay short whatever the scenario's size."""
    items = list(items)
    if len(items) <= limit:
        return str(items)
    shown = ", ".join(map(str, items[:limit]))
    return f"[{shown}, ...] ({len(items)} in all)"


def build_dataclass(cls: type, raw: Any, prefix: str) -> Any:
    """Build dataclass ``cls`` from a mapping, checking its keys and types (recursively
    for nested dataclasses); errors name the field as ``prefix`` + key."""
    where = prefix.rstrip(".") or "scenario"
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{where}: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ScenarioError(
            f"{prefix}{unknown[0]}: unknown key; allowed keys of {where}: "
            f"{', '.join(sorted(fields))}"
        )
    kwargs = {}
    for name, value in raw.items():
        kwargs[name] = _coerce(hints[name], value, f"{prefix}{name}")
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ScenarioError(f"{prefix}{missing[0]}: required key is missing")
    try:
        return cls(**kwargs)
    except ScenarioError:
        raise
    except (TypeError, ValueError) as err:  # pragma: no cover - defensive
        raise ScenarioError(f"{where}: {err}") from None


def _coerce(tp: Any, value: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        if value is None:
            raise ScenarioError(
                f"{name}: expected a mapping, got null (leave the section out for its defaults)"
            )
        return build_dataclass(tp, value, f"{name}.")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _coerce(inner[0], value, name)
        errors = []  # several forms (a list or a keyword): the first that fits
        for form in inner:
            try:
                return _coerce(form, value, name)
            except ScenarioError as err:
                if not str(err).startswith(f"{name}: "):
                    raise  # the value has this form; one of its entries is wrong
                errors.append(str(err).removeprefix(f"{name}: "))
        raise ScenarioError(f"{name}: {'; or '.join(errors)}")
    if origin is Literal:
        if isinstance(value, bool) and {"on", "off"} <= set(args):
            value = "on" if value else "off"  # YAML 1.1 reads an unquoted on / off as a bool
        if value not in args:
            raise ScenarioError(
                f"{name}: {value!r} is not allowed; allowed values: {', '.join(map(str, args))}"
            )
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ScenarioError(f"{name}: expected a list, got {value!r}")
        return tuple(_coerce(args[0], v, f"{name}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict) or tp is Mapping:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ScenarioError(f"{name}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ScenarioError(f"{name}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScenarioError(f"{name}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):
            try:
                value = float(value)  # YAML reads 5e-4 as a string
            except ValueError:
                raise ScenarioError(f"{name}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ScenarioError(f"{name}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ScenarioError(f"{name}: expected a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ScenarioError(f"{name}: expected a string, got {value!r}")
        return value
    return value


def range_text(lo: float | str | None, hi: float | str | None, *, lo_open: bool = False) -> str:
    """``[lo, hi]``, ``(lo, hi]`` when ``lo_open``; an unbounded end is ``-inf`` or ``inf)``,
    a bound named by a string (a run value) is written as its name."""
    lo_s = "-inf" if lo is None else (lo if isinstance(lo, str) else f"{lo:g}")
    hi_s = "inf" if hi is None else (hi if isinstance(hi, str) else f"{hi:g}")
    return f"{'(' if lo_open else '['}{lo_s}, {hi_s}{')' if hi is None else ']'}"


def range_problem(
    name: str, value: float, lo: float | None, hi: float | None, *, lo_open: bool = False
) -> str | None:
    """Why ``value`` is outside ``[lo, hi]`` (``(lo, hi]`` when ``lo_open``; NaN is outside
    any bounded range), naming ``name``; ``None`` when it is inside."""
    below = lo is not None and not (value > lo if lo_open else value >= lo)
    if below or (hi is not None and not value <= hi):
        return (
            f"{name}: {value!r} is outside the allowed range {range_text(lo, hi, lo_open=lo_open)}"
        )
    return None


def check_range(
    name: str,
    value: float,
    lo: float | None,
    hi: float | None,
    *,
    lo_open: bool = False,
    bound: str = "",
) -> None:
    """Raise :func:`range_problem`'s reason if ``value`` is outside its range (``bound``:
    why the range ends where it does, added to the message)."""
    if why := range_problem(name, value, lo, hi, lo_open=lo_open):
        raise ScenarioError(f"{why} ({bound})" if bound else why)
