"""What a run computed: a fingerprint of its resolved scenario and seed, and the version
of the code that ran it."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import fedram_flwr


def scenario_fingerprint(scenario: Mapping[str, Any], seed: int) -> str:
    """sha256 of a resolved scenario (``Scenario.to_dict()``, without its ``seeds`` list)
    and the seed: what a run computed, whatever the sweep or ``--seeds`` around it."""
    body = {k: v for k, v in scenario.items() if k not in ("seeds", "seed")}
    body["seed"] = int(seed)
    text = json.dumps(body, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


SOURCE_PACKAGES = ("fedram_flwr", "fedram_flwr.strategies", "fedram_flwr.clients")
"""The packages whose ``.py`` files :func:`code_version` hashes, in this order."""


def source_files(roots: Mapping[str, list[Path]]) -> dict[tuple[int, str], Path]:
    """Every ``.py`` file of the packages ``roots`` names (package -> its folders), keyed
    by (the package's place in ``roots``, its path in that package), each file once.

    A file lies in the package whose folder holds it most closely: in a checkout
    ``strategies/`` sits beside ``fedram_flwr/``, while in a wheel or a Flower app
    bundle (:func:`~fedram_flwr.engines.flwr.staging.stage_app`) it sits inside it, and
    ``fedram_flwr``'s folder then holds ``strategies/x.py`` too: counted once, as
    ``fedram_flwr.strategies``'s ``x.py``, the code has one fingerprint in every layout.
    """
    owners = {Path(root).resolve(): i for i, name in enumerate(roots) for root in roots[name]}
    out: dict[tuple[int, str], Path] = {}
    for root, index in owners.items():
        for path in root.rglob("*.py"):
            folder = next(p for p in path.resolve().parents if p in owners)
            if folder == root:
                out[(index, path.relative_to(root).as_posix())] = path
    return out


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, str]:
    """The code that runs: the package version, a sha256 of every ``.py`` file of
    ``fedram_flwr`` (with its ``strategies`` and ``clients``, wherever they are imported
    from: a checkout, an installed wheel or a Flower app bundle, each file once
    (:func:`source_files`); by package, relative path and content) and, in a git
    checkout, the commit (informative only: it misses uncommitted edits and is absent
    in a wheel)."""
    roots = {}
    for name in SOURCE_PACKAGES:
        spec = importlib.util.find_spec(name)
        roots[name] = [Path(r) for r in (spec.submodule_search_locations or [])] if spec else []
    out = {"package": fedram_flwr.__version__, "source": source_digest(roots)}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(fedram_flwr.__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if git.returncode == 0:
            out["git"] = git.stdout.strip()
    return out


def source_digest(roots: Mapping[str, list[Path]]) -> str:
    """sha256 of :func:`source_files` of ``roots``, in package then path order, each
    file as ``<package>/<relative path>\\0`` and its bytes."""
    names = list(roots)
    digest = hashlib.sha256()
    files = source_files(roots)
    for index, rel in sorted(files, key=lambda key: (key[0], Path(key[1]))):
        path = files[(index, rel)]
        digest.update(f"{names[index]}/{rel}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def plain_json(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, default=str))


def dict_diff(a: Any, b: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(dotted key, old, new) of every leaf where ``a`` and ``b`` differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            yield from dict_diff(a.get(key), b.get(key), f"{prefix}{key}.")
    elif a != b:
        yield prefix.rstrip("."), a, b
