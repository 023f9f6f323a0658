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


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, str]:
    """The code that runs: the package version, a sha256 of every ``.py`` file of
    ``fedram_flwr`` (with its ``strategies`` and ``clients``, wherever they are imported
    from: a checkout, an installed wheel or a Flower app bundle; by relative path and
    content) and, in a git checkout, the commit (informative only: it misses uncommitted
    edits and is absent in a wheel)."""
    digest = hashlib.sha256()
    for name in ("fedram_flwr", "fedram_flwr.strategies", "fedram_flwr.clients"):
        spec = importlib.util.find_spec(name)
        for root in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(root).rglob("*.py")):
                digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
                digest.update(path.read_bytes())
    out = {"package": fedram_flwr.__version__, "source": digest.hexdigest()}
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
