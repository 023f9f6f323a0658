"""The first-party import graph has no cycle.

Every module of ``fedram_flwr``, ``strategies/`` (``fedram_flwr.strategies``) and
``clients/`` (``fedram_flwr.clients``) is parsed with :mod:`ast`; every import counts,
function-level and ``TYPE_CHECKING`` ones included, relative ones resolved, and
``from x import y`` points at module ``x.y`` when there is one. Importing ``a.b.c`` also
runs the packages ``a.b`` and ``a`` first: those count too, except the importer's own
ancestors (already being imported when it runs).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from fedram_flwr.app_config import APP_ROOT

ROOTS = {
    "fedram_flwr": APP_ROOT / "fedram_flwr",
    "fedram_flwr.strategies": APP_ROOT / "strategies",
    "fedram_flwr.clients": APP_ROOT / "clients",
}

Graph = dict[str, dict[str, int]]
"""module -> {imported module: line of the first such import}"""


def modules() -> dict[str, Path]:
    """Dotted name -> file of every first-party module (a package is its __init__.py)."""
    found: dict[str, Path] = {}
    for prefix, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([prefix, *parts])] = path
    return found


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imported_names(module: str, is_package: bool, tree: ast.AST) -> list[tuple[str, int]]:
    """(dotted name, line) of every import in ``tree``, relative ones resolved."""
    package = module if is_package else module.rpartition(".")[0]
    names: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.append((base, node.lineno))
            names += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return names


def import_graph(sources: dict[str, tuple[str, bool]]) -> Graph:
    """Edges between first-party modules, from {module: (source, is a package)} (see
    the module docstring)."""
    graph: Graph = {}
    for module, (source, is_package) in sources.items():
        edges = graph.setdefault(module, {})
        own = set(_ancestors(module)) | {module}
        for name, line in imported_names(module, is_package, ast.parse(source)):
            for target in [*_ancestors(name), name]:
                if target in sources and target not in own:
                    edges.setdefault(target, line)
    return graph


def first_party_sources(files: dict[str, Path]) -> dict[str, tuple[str, bool]]:
    return {m: (p.read_text(), p.name == "__init__.py") for m, p in files.items()}


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def describe(cycle: list[str], graph: Graph, files: dict[str, Path]) -> str:
    return "\n".join(
        f"  {a} -> {b}  ({files[a].relative_to(APP_ROOT)}:{graph[a][b]})"
        for a, b in zip(cycle, cycle[1:])
    )


def test_first_party_import_graph_has_no_cycle() -> None:
    files = modules()
    graph = import_graph(first_party_sources(files))
    assert len(files) > 20 and sum(map(len, graph.values())) > 20, "the walk found too little"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle:\n" + describe(cycle, graph, files)


def test_function_level_and_relative_imports_count() -> None:
    """The walk sees what a cycle hides behind: imports inside functions, relative
    imports, and ``from package import module``."""
    source = (
        "from . import sibling\nfrom ..other import thing\ndef f():\n    import pkg.deep.leaf\n"
    )
    names = {n for n, _ in imported_names("pkg.sub.mod", False, ast.parse(source))}
    assert {"pkg.sub.sibling", "pkg.other", "pkg.other.thing", "pkg.deep.leaf"} <= names
    graph = {"pkg.sub.mod": {"pkg.deep.leaf": 4}, "pkg.deep.leaf": {"pkg.sub.mod": 1}}
    assert find_cycle(graph) == ["pkg.deep.leaf", "pkg.sub.mod", "pkg.deep.leaf"]
    assert find_cycle({"a": {"b": 1}, "b": {}}) is None


def test_package_inits_count_but_not_the_importers_own() -> None:
    """``a.x`` importing ``a.y.z`` runs ``a.y`` first (an edge), never ``a`` (already
    running); so ``a.y`` importing ``a.x`` closes a cycle through the package."""
    sources = {"a": "", "a.x": "import a.y.z\n", "a.y": "from a import x\n", "a.y.z": ""}
    graph = import_graph({m: (text, m in ("a", "a.y")) for m, text in sources.items()})
    assert graph["a.x"] == {"a.y": 1, "a.y.z": 1}
    assert find_cycle(graph) == ["a.x", "a.y", "a.x"]


# The layers of the README's layout section, bottom first: a module may import only its own
# layer and the layers before it.
LAYERS = (
    "fedram_flwr.flower_line",
    "fedram_flwr.protocol",
    "fedram_flwr.partition_query",
    "fedram_flwr.partition_directory",
    "fedram_flwr.objectives",
    "fedram_flwr.rng",
    "fedram_flwr.schema",
    "fedram_flwr.extras",
    "fedram_flwr.sweep",
    "fedram_flwr.time_config",
    "fedram_flwr.config",
    "fedram_flwr.clock",
    "fedram_flwr.data",
    "fedram_flwr.models",
    "fedram_flwr.lr_schedule",
    "fedram_flwr.optimizers",
    "fedram_flwr.client_data",
    "fedram_flwr.training",
    "fedram_flwr.evaluation",
    "fedram_flwr.strategies",
    "fedram_flwr.availability",
    "fedram_flwr.message_api",
    "fedram_flwr.clients",
    "fedram_flwr.paths",
    "fedram_flwr.run_config",
    "fedram_flwr.registry",
    "fedram_flwr.node",
    "fedram_flwr.experiment",
    "fedram_flwr.rundir",
    "fedram_flwr.outputs",
    "fedram_flwr.plot_inputs",
    "fedram_flwr.app_config",
    "fedram_flwr.client_app",
    "fedram_flwr.engines",
    "fedram_flwr.server_app",
    "fedram_flwr.plots",
    "fedram_flwr.report",
    "fedram_flwr.run_checks",
    "fedram_flwr.interrupt",
    "fedram_flwr.cli_args",
    "fedram_flwr.cli",
)


def layer_of(module: str) -> int | None:
    """The index in LAYERS of the layer ``module`` belongs to (None: the package root)."""
    hits = [i for i, name in enumerate(LAYERS) if module == name or module.startswith(name + ".")]
    return hits[-1] if hits else None


def test_every_module_imports_only_its_layer_and_the_layers_below() -> None:
    files = modules()
    graph = import_graph(first_party_sources(files))
    unplaced = sorted(m for m in graph if layer_of(m) is None and m != "fedram_flwr")
    assert not unplaced, f"modules in no layer (add them to LAYERS and the README): {unplaced}"
    upward = [
        f"  {m} -> {d}  ({files[m].relative_to(APP_ROOT)}:{line})"
        for m, deps in graph.items()
        for d, line in deps.items()
        if m != "fedram_flwr" and layer_of(d) is not None and layer_of(d) > layer_of(m)
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


# The client side: the project's ClientApp (a fresh process per message under the
# Deployment Engine, so every module it imports costs CPU in every message) and the
# blocks a user's ClientApp imports. It never imports the server side: strategies,
# Message-API strategies, the registry (any module of it: a node's data depends on who is
# rarely available, so it reads the oracle specs from their own home,
# fedram_flwr.availability.specs, never through the registry's re-exports), the
# composition root, the engines.
CLIENT_SIDE = ("fedram_flwr.clients", "fedram_flwr.client_app")
SERVER_SIDE = (
    "fedram_flwr.strategies",
    "fedram_flwr.message_api",
    "fedram_flwr.registry",
    "fedram_flwr.experiment",
    "fedram_flwr.engines",
    "fedram_flwr.server_app",
)


def chains_into(graph: Graph, roots: tuple[str, ...], banned: tuple[str, ...]) -> list[list[str]]:
    """For each module of ``banned`` (a prefix) reachable from ``roots``, one import chain
    [root, ..., module] that reaches it (breadth first: a shortest one)."""
    parent: dict[str, str | None] = dict.fromkeys(roots)
    queue = list(roots)
    for node in queue:
        for nxt in sorted(graph.get(node, {})):
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    chains = []
    for node in sorted(m for m in parent if m.startswith(banned)):
        chain = [node]
        while (up := parent[chain[-1]]) is not None:
            chain.append(up)
        chains.append(chain[::-1])
    return chains


def test_the_client_side_imports_no_server_module() -> None:
    files = modules()
    graph = import_graph(first_party_sources(files))
    assert set(CLIENT_SIDE) <= set(graph), "a root of the client side was not found"
    chains = chains_into(graph, CLIENT_SIDE, SERVER_SIDE)
    assert not chains, "the client side imports the server side:\n" + "\n".join(
        describe(chain, graph, files) for chain in chains
    )


def test_a_server_module_the_client_side_reaches_is_named_with_its_chain() -> None:
    graph = {"c": {"c.wire": 1}, "c.wire": {"s.reg": 3, "ok": 4}, "s.reg": {"s.strat": 1}}
    assert chains_into(graph, ("c",), ("s.",)) == [
        ["c", "c.wire", "s.reg"],
        ["c", "c.wire", "s.reg", "s.strat"],
    ]
    assert chains_into(graph, ("c",), ("x",)) == []


def test_a_client_app_process_loads_no_server_module() -> None:
    """What the static walk says, in a real interpreter (what ``flwr-clientapp`` loads)."""
    code = "import sys, fedram_flwr.client_app, fedram_flwr.clients; print(*sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "fedram_flwr.client_app" in loaded
    assert "fedram_flwr.availability.specs.oracles" in loaded, "the walk would miss the specs"
    assert not [m for m in loaded if m.startswith(SERVER_SIDE)]


def test_the_oracle_specs_old_registry_paths_still_work() -> None:
    """The oracle specs moved to ``fedram_flwr.availability.specs``; each old module path
    of the registry is the moved module itself, and the registry re-exports its names."""
    import importlib

    import fedram_flwr.availability.specs as specs
    import fedram_flwr.registry as registry

    for name in ("ORACLES", "OracleSpec", "OracleParams", "oracle_params", "oracle_spec"):
        assert getattr(registry, name) is getattr(specs, name)
    assert registry.least_available is specs.least_available
    for name in ("oracles", "observed", "nonstationary", "labels", "checks", "oracle_spec"):
        old = importlib.import_module(f"fedram_flwr.registry.{name}")
        assert old is importlib.import_module(f"fedram_flwr.availability.specs.{name}")
