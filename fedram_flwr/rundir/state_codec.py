"""A checkpoint's payload without pickle: plain values as JSON, arrays and bytes as raw
buffers beside it, so that reading one can never run code, import a module or allocate
more than the file holds.

:func:`encode` turns a value built of ``None``, ``bool``, ``int``, ``float``, ``str``,
``bytes``, numpy arrays (numeric or boolean) and scalars, lists, tuples, dicts (``str``
or ``int`` keys) and this package's dataclasses into bytes; :func:`decode` gives it back
exactly (arrays with their dtype and shape, numpy scalars as numpy scalars, floats as
their ``repr``, NaN and infinities included). The bytes are a decimal length, a newline,
that many bytes of JSON, then the buffers one after the other:

    {"tree": <value>, "buffers": [{"dtype": "<f4", "shape": [3, 2]}, ...]}

where ``<value>`` is a JSON scalar, a list, or an object of one of the forms
``{"array": i}``, ``{"scalar": i}``, ``{"bytes": i}`` (``i``: the buffer's index),
``{"tuple": [...]}``, ``{"dict": [[key, value], ...]}`` or
``{"dataclass": "module:Name", "fields": {...}}``. A dataclass is rebuilt only from a
module this process has already imported, below ``fedram_flwr``, with exactly the fields
its class has; anything else is a :class:`StateCodecError` naming what and where.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from typing import Any

import numpy as np

PACKAGE = "fedram_flwr"
"""Dataclasses of this package (and its ``strategies`` and ``clients``) only."""
DTYPE_KINDS = "biufc"
"""Buffer dtypes: booleans, signed and unsigned integers, floats, complex numbers."""


class StateCodecError(ValueError):
    """A payload that does not decode: the message names the field and what is wrong."""


# ---------------------------------------------------------------------- encoding
def encode(value: Any) -> bytes:
    """``value`` as bytes (see the module docstring); :class:`TypeError` for a value of
    a type a checkpoint cannot hold."""
    buffers: list[np.ndarray] = []
    tree = _pack(value, buffers, "checkpoint")
    header = {
        "tree": tree,
        "buffers": [{"dtype": a.dtype.str, "shape": list(a.shape)} for a in buffers],
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([f"{len(text)}\n".encode(), text, *(a.tobytes() for a in buffers)])


def _pack(value: Any, buffers: list[np.ndarray], where: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)  # tobytes() writes C order whatever its layout
        if array.dtype.kind not in DTYPE_KINDS:
            raise TypeError(f"{where}: a checkpoint cannot hold arrays of dtype {array.dtype}")
        buffers.append(array)
        return {"scalar" if isinstance(value, np.generic) else "array": len(buffers) - 1}
    if isinstance(value, int | float):
        return value
    if isinstance(value, bytes):
        buffers.append(np.frombuffer(value, dtype=np.uint8))
        return {"bytes": len(buffers) - 1}
    if isinstance(value, list):
        return [_pack(v, buffers, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple):
        return {"tuple": [_pack(v, buffers, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict):
        for key in value:
            if isinstance(key, bool) or not isinstance(key, int | str):
                raise TypeError(f"{where}: a checkpoint's dict keys are str or int, not {key!r}")
        return {"dict": [[k, _pack(v, buffers, f"{where}[{k!r}]")] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        fields = {
            f.name: _pack(getattr(value, f.name), buffers, f"{where}.{f.name}")
            for f in dataclasses.fields(value)
            if f.init
        }
        return {"dataclass": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
    raise TypeError(f"{where}: a checkpoint cannot hold a {type(value).__name__}")


# ---------------------------------------------------------------------- decoding
def decode(data: bytes) -> Any:
    """The value :func:`encode` wrote; :class:`StateCodecError` for anything else."""
    length, newline, rest = data.partition(b"\n")
    if not newline or not length.isdigit() or len(length) > 12 or int(length) > len(rest):
        raise StateCodecError("its header length is missing or past the end of the file")
    try:
        header = json.loads(rest[: int(length)])
    except (ValueError, RecursionError) as err:
        raise StateCodecError(f"its header is not JSON ({type(err).__name__})") from None
    if not isinstance(header, dict) or set(header) != {"tree", "buffers"}:
        raise StateCodecError("its header is not {tree, buffers}")
    buffers = split_buffers(header["buffers"], memoryview(rest)[int(length) :])
    try:
        return _unpack(header["tree"], buffers, "checkpoint")
    except RecursionError:
        raise StateCodecError("its values are nested too deeply") from None


def split_buffers(layouts: Any, blob: memoryview) -> list[np.ndarray]:
    """The arrays ``layouts`` (``[{"dtype", "shape"}, ...]``) describe, cut from
    ``blob`` in order; their sizes must add up to ``blob``'s exactly."""
    if not isinstance(layouts, list):
        raise StateCodecError("buffers: not a list")
    out, offset = [], 0
    for i, layout in enumerate(layouts):
        dtype, shape = buffer_layout(layout, f"buffers[{i}]")
        nbytes = math.prod(shape) * dtype.itemsize
        if offset + nbytes > len(blob):
            raise StateCodecError(f"buffers[{i}]: {nbytes} bytes, past the end of the file")
        raw = blob[offset : offset + nbytes]
        out.append(np.frombuffer(raw, dtype=dtype).reshape(shape).copy())
        offset += nbytes
    if offset != len(blob):
        raise StateCodecError(f"{len(blob) - offset} bytes after the last buffer")
    return out


def buffer_layout(layout: Any, where: str) -> tuple[np.dtype, tuple[int, ...]]:
    """(dtype, shape) of one buffer's ``{"dtype": str, "shape": [int, ...]}``."""
    if not isinstance(layout, dict) or set(layout) != {"dtype", "shape"}:
        raise StateCodecError(f"{where}: not {{dtype, shape}}")
    shape = layout["shape"]
    if not isinstance(shape, list) or len(shape) > 32 or not all(_count(n) for n in shape):
        raise StateCodecError(f"{where}.shape: {shape!r} is not a list of counts >= 0")
    try:
        dtype = np.dtype(layout["dtype"]) if isinstance(layout["dtype"], str) else None
    except Exception:  # numpy's parser of dtype strings raises several kinds
        dtype = None
    if dtype is None or dtype.kind not in DTYPE_KINDS or dtype.fields or dtype.subdtype:
        raise StateCodecError(
            f"{where}.dtype: {layout['dtype']!r} is not a boolean or numeric dtype"
        )
    return dtype, tuple(shape)


def _count(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _unpack(tree: Any, buffers: list[np.ndarray], where: str) -> Any:
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        return [_unpack(v, buffers, f"{where}[{i}]") for i, v in enumerate(tree)]
    if not isinstance(tree, dict) or not tree:
        raise StateCodecError(f"{where}: {type(tree).__name__} is not a value")
    kind = next(iter(tree))
    if kind in ("array", "scalar", "bytes") and len(tree) == 1:
        return _buffer(kind, tree[kind], buffers, where)
    if kind == "tuple" and len(tree) == 1 and isinstance(tree[kind], list):
        return tuple(_unpack(v, buffers, f"{where}[{i}]") for i, v in enumerate(tree[kind]))
    if kind == "dict" and len(tree) == 1 and isinstance(tree[kind], list):
        return _dict(tree[kind], buffers, where)
    if set(tree) == {"dataclass", "fields"}:
        return _dataclass(tree["dataclass"], tree["fields"], buffers, where)
    raise StateCodecError(f"{where}: an object of keys {sorted(tree)} is not a value")


def _buffer(kind: str, index: Any, buffers: list[np.ndarray], where: str) -> Any:
    if not _count(index) or index >= len(buffers):
        raise StateCodecError(f"{where}: buffer {index!r} does not exist")
    array = buffers[index]
    if kind == "array":
        return array
    if kind == "scalar":
        if array.shape != ():
            raise StateCodecError(f"{where}: a scalar of shape {array.shape}")
        return array[()]
    if array.dtype != np.uint8 or array.ndim != 1:
        raise StateCodecError(f"{where}: bytes stored as {array.dtype} {array.shape}")
    return array.tobytes()


def _dict(items: list, buffers: list[np.ndarray], where: str) -> dict:
    out: dict[Any, Any] = {}
    for item in items:
        if not (isinstance(item, list) and len(item) == 2):
            raise StateCodecError(f"{where}: a dict item is not [key, value]")
        key, value = item
        if isinstance(key, bool) or not isinstance(key, int | str) or key in out:
            raise StateCodecError(f"{where}: key {key!r} is not a new str or int")
        out[key] = _unpack(value, buffers, f"{where}[{key!r}]")
    return out


def _dataclass(name: Any, fields: Any, buffers: list[np.ndarray], where: str) -> Any:
    cls = loaded_dataclass(name, where)
    expected = {f.name for f in dataclasses.fields(cls) if f.init}
    if not isinstance(fields, dict) or set(fields) != expected:
        got = sorted(fields) if isinstance(fields, dict) else type(fields).__name__
        raise StateCodecError(f"{where}: {name} has fields {sorted(expected)}, not {got}")
    values = {k: _unpack(v, buffers, f"{where}.{k}") for k, v in fields.items()}
    try:
        return cls(**values)
    except Exception as err:  # the class's own checks (__post_init__)
        raise StateCodecError(f"{where}: {name} refused its fields ({err})") from None


def loaded_dataclass(name: Any, where: str) -> type:
    """The dataclass ``"module:Name"`` names, from a module below ``fedram_flwr`` that
    is already imported (nothing is imported here)."""
    module_name, _, qualname = name.partition(":") if isinstance(name, str) else ("", "", "")
    below = module_name == PACKAGE or module_name.startswith(f"{PACKAGE}.")
    module = sys.modules.get(module_name) if below else None
    found = getattr(module, qualname, None) if qualname.isidentifier() else None
    if not (
        isinstance(found, type)
        and dataclasses.is_dataclass(found)
        and found.__module__ == module_name
    ):
        raise StateCodecError(f"{where}: {name!r} is not a dataclass of a loaded {PACKAGE} module")
    return found


# ---------------------------------------------------------------------- checking
def check_like(value: Any, template: Any, where: str) -> None:
    """Raise :class:`StateCodecError` unless ``value`` (decoded from a checkpoint) has
    the shape of ``template`` (the same value taken from the live run): the same
    dataclass, the same ``str`` keys (``int``-keyed maps may differ in keys, each value
    like the template's first), arrays of the same shape and kind of dtype, numbers of
    the same kind (:func:`scalar_kind`), strings for strings. Where the template holds
    ``None`` (a value not known yet) anything decoded is taken."""
    if template is None:
        return
    if dataclasses.is_dataclass(template) and not isinstance(template, type):
        if type(value) is not type(template):
            raise StateCodecError(
                f"{where}: a {type(value).__name__}, not a {type(template).__name__}"
            )
        for f in dataclasses.fields(template):
            if f.init:
                check_like(getattr(value, f.name), getattr(template, f.name), f"{where}.{f.name}")
        return
    if isinstance(template, np.ndarray):
        same = isinstance(value, np.ndarray) and value.dtype.kind == template.dtype.kind
        if not same or value.shape != template.shape:
            got = f"{type(value).__name__} {getattr(value, 'dtype', '')} {np.shape(value)}"
            raise StateCodecError(f"{where}: {got}, not {template.dtype} {template.shape}")
        return
    if isinstance(template, dict):
        _check_dict(value, template, where)
    elif isinstance(template, list | tuple):
        _check_sequence(value, template, where)
    elif scalar_kind(value) != scalar_kind(template):
        raise StateCodecError(
            f"{where}: {value!r} is a {type(value).__name__}, not a {type(template).__name__}"
        )


def scalar_kind(value: Any) -> str:
    """``b``, ``i``, ``f``, ``c`` for Python's and numpy's booleans, integers, floats and
    complex numbers alike (a count may be an ``int`` or an ``np.int64``); else the
    type's name."""
    if isinstance(value, np.generic):
        return value.dtype.kind
    for kind, types in (("b", bool), ("i", int), ("f", float), ("c", complex)):
        if isinstance(value, types):
            return kind
    return type(value).__name__


def _check_dict(value: Any, template: dict, where: str) -> None:
    if not isinstance(value, dict):
        raise StateCodecError(f"{where}: a {type(value).__name__}, not a dict")
    if any(isinstance(k, str) for k in template):  # attributes by name: exactly these
        if set(value) != set(template):
            raise StateCodecError(f"{where}: keys {sorted(value)}, not {sorted(template)}")
        for key, item in value.items():
            check_like(item, template[key], f"{where}[{key!r}]")
        return
    first = next(iter(template.values()), None)
    for key, item in value.items():
        if isinstance(key, bool) or not isinstance(key, int):
            raise StateCodecError(f"{where}: key {key!r} is not an int")
        check_like(item, first, f"{where}[{key!r}]")


def _check_sequence(value: Any, template: list | tuple, where: str) -> None:
    if type(value) is not type(template):
        raise StateCodecError(f"{where}: a {type(value).__name__}, not a {type(template).__name__}")
    if len(value) == len(template):
        for i, (item, like) in enumerate(zip(value, template)):
            check_like(item, like, f"{where}[{i}]")
    elif template and all(isinstance(like, np.ndarray) for like in template):  # a model
        raise StateCodecError(f"{where}: {len(value)} arrays, not {len(template)}")
    elif template:
        for i, item in enumerate(value):
            check_like(item, template[0], f"{where}[{i}]")


def first_nonfinite(value: Any, where: str) -> str | None:
    """Where ``value`` (decoded from a checkpoint) holds a NaN or an infinity, in an
    array or a number, at any depth (``where[key].field[i]``); None when nowhere."""
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        finite = array.dtype.kind not in "fc" or bool(np.isfinite(array).all())
        return None if finite else where
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    if isinstance(value, list | tuple):
        items: Any = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = ((f".{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value))
        return next((w for name, v in items if (w := first_nonfinite(v, f"{where}{name}"))), None)
    else:
        return None
    return next((w for key, v in items if (w := first_nonfinite(v, f"{where}[{key!r}]"))), None)
