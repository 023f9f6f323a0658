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

from fedram_flwr.registry.app_config import APP_ROOT

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


# The layers of docs/architecture.md, bottom first: a module may import only its own layer
# and the layers below it. A layer is one or more subpackages (or root modules) that sit
# side by side; the longest prefix places a module (``engines.flwr`` below ``engines``).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("fedram_flwr.protocol", "fedram_flwr.objectives", "fedram_flwr.rng"),
    ("fedram_flwr.scenario",),
    ("fedram_flwr.clock", "fedram_flwr.data"),
    ("fedram_flwr.availability",),
    ("fedram_flwr.clients", "fedram_flwr.strategies", "fedram_flwr.rundir"),
    ("fedram_flwr.message_api", "fedram_flwr.report", "fedram_flwr.tracking"),
    ("fedram_flwr.registry",),
    ("fedram_flwr.engines.flwr",),
    ("fedram_flwr.engines",),
    ("fedram_flwr.server_app", "fedram_flwr.cli"),
)


def layer_of(module: str) -> int | None:
    """The index in LAYERS of the layer ``module`` belongs to (None: the package root)."""
    hits = [
        (len(name), i)
        for i, layer in enumerate(LAYERS)
        for name in layer
        if module == name or module.startswith(name + ".")
    ]
    return max(hits)[1] if hits else None


def test_every_module_imports_only_its_layer_and_the_layers_below() -> None:
    files = modules()
    graph = import_graph(first_party_sources(files))
    unplaced = sorted(m for m in graph if layer_of(m) is None and m != "fedram_flwr")
    assert not unplaced, f"modules in no layer (add them to LAYERS and the docs): {unplaced}"
    upward = [
        f"  {m} -> {d}  ({files[m].relative_to(APP_ROOT)}:{line})"
        for m, deps in graph.items()
        for d, line in deps.items()
        if m != "fedram_flwr" and layer_of(d) is not None and layer_of(d) > layer_of(m)
    ]
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_the_package_root_holds_its_face_and_the_shared_foundation_only() -> None:
    """Every other module lives in the subpackage of its role (docs/architecture.md)."""
    loose = sorted(p.name for p in (APP_ROOT / "fedram_flwr").glob("*.py"))
    assert loose == ["__init__.py", "objectives.py", "protocol.py", "rng.py", "server_app.py"]


def test_a_layer_test_fails_on_an_upward_import() -> None:
    """The layer walk sees an import from a lower layer to a higher one."""
    assert layer_of("fedram_flwr.engines.flwr.run") < layer_of("fedram_flwr.engines.in_process")
    assert layer_of("fedram_flwr.clients.node") == layer_of("fedram_flwr.strategies.fedavg")
    assert layer_of("fedram_flwr.scenario.config") < layer_of("fedram_flwr.clients.node")
    assert layer_of("fedram_flwr") is None


# The client side: the project's ClientApp (a fresh process per message under the
# Deployment Engine, so every module it imports costs CPU in every message) and the
# blocks a user's ClientApp imports, all in ``clients/``. It imports only the shared
# foundation (protocol, objectives, rng), the scenario, the data sets and the oracle specs
# (a node's data depends on who is rarely available, so it reads the oracle specs from
# their own home, fedram_flwr.availability.specs, never through the registry), never the
# server side: strategies, Message-API strategies, the registry, run folders, reports,
# tracking, the engines, the CLI.
CLIENT_SIDE = ("fedram_flwr.clients",)
SERVER_SIDE = (
    "fedram_flwr.strategies",
    "fedram_flwr.message_api",
    "fedram_flwr.registry",
    "fedram_flwr.rundir",
    "fedram_flwr.report",
    "fedram_flwr.tracking",
    "fedram_flwr.engines",
    "fedram_flwr.server_app",
    "fedram_flwr.cli",
)


def under(module: str, packages: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one (``a.clients`` is not in
    ``a.cli``)."""
    return any(module == p or module.startswith(p + ".") for p in packages)


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
    for node in sorted(m for m in parent if under(m, banned)):
        chain = [node]
        while (up := parent[chain[-1]]) is not None:
            chain.append(up)
        chains.append(chain[::-1])
    return chains


def test_the_client_side_imports_no_server_module() -> None:
    files = modules()
    graph = import_graph(first_party_sources(files))
    roots = tuple(m for m in graph if under(m, CLIENT_SIDE))
    assert "fedram_flwr.clients.app" in roots, "the ClientApp was not found on the client side"
    chains = chains_into(graph, roots, SERVER_SIDE)
    assert not chains, "the client side imports the server side:\n" + "\n".join(
        describe(chain, graph, files) for chain in chains
    )


def test_the_algorithm_cores_and_the_client_side_do_not_import_each_other() -> None:
    """Server cores and client objectives meet only on the wire (the protocol) and in the
    shared math (objectives); both sit on one layer, and neither reaches the other."""
    graph = import_graph(first_party_sources(modules()))
    cores, clients = "fedram_flwr.strategies", "fedram_flwr.clients"
    for a, b in ((cores, clients), (clients, cores)):
        roots = tuple(m for m in graph if under(m, (a,)))
        assert not chains_into(graph, roots, (b,)), f"{a} reaches {b}"


def test_a_server_module_the_client_side_reaches_is_named_with_its_chain() -> None:
    graph = {"c": {"c.wire": 1}, "c.wire": {"s.reg": 3, "ok": 4}, "s.reg": {"s.strat": 1}}
    assert chains_into(graph, ("c",), ("s",)) == [
        ["c", "c.wire", "s.reg"],
        ["c", "c.wire", "s.reg", "s.strat"],
    ]
    assert under("a.clients.app", ("a.clients",)) and not under("a.clients", ("a.cli",))
    assert chains_into(graph, ("c",), ("x",)) == []


def test_a_client_app_process_loads_no_server_module() -> None:
    """What the static walk says, in a real interpreter (what ``flwr-clientapp`` loads)."""
    code = "import sys, fedram_flwr.clients.app, fedram_flwr.clients; print(*sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "fedram_flwr.clients.app" in loaded
    assert "fedram_flwr.availability.specs.oracles" in loaded, "the walk would miss the specs"
    assert not [m for m in loaded if under(m, SERVER_SIDE)]


def flower_names_in_cores(source: str) -> list[tuple[str, str]]:
    """(definition, Flower name) for each name imported from ``flwr`` that an algorithm's
    core uses: a class whose name ends in ``Core`` or ``State``, or a module-level function
    (the math). The Flower adapters beside them (the legacy Strategy classes) may use it."""
    tree = ast.parse(source)
    flower: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "flwr":
            flower |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            flower |= {a.asname or a.name for a in node.names if a.name.split(".")[0] == "flwr"}
    found = []
    for node in tree.body:
        is_core = isinstance(node, ast.ClassDef) and node.name.endswith(("Core", "State"))
        if is_core or isinstance(node, ast.FunctionDef):
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} & flower
            found += [(node.name, name) for name in sorted(used)]
    return found


FLOWER_GLUE = (
    "fedram_flwr.strategies.base",
    "fedram_flwr.strategies.wire",
    "fedram_flwr.strategies.reply_aggregation",
)
"""The legacy adapters' shared Flower glue: their base class, the conversions between
Flower's types and the cores' (parameters, fit results, failures), Flower's own q-FFL
reply handling."""


def test_the_algorithm_cores_use_nothing_of_flower() -> None:
    """An algorithm's math and core (its state value and pure functions) are Flower-free;
    only the thin adapters beside them speak Flower. Modules that hold no adapter import
    nothing of Flower at all."""
    files = modules()
    sources = first_party_sources(files)
    graph = import_graph(sources)
    used = [
        f"  {module}: {definition} uses {name}"
        for module, path in files.items()
        if under(module, ("fedram_flwr.strategies", "fedram_flwr.clock"))
        and module not in FLOWER_GLUE
        for definition, name in flower_names_in_cores(path.read_text())
    ]
    assert not used, "Flower in an algorithm's core:\n" + "\n".join(used)
    flower_free = ("fedram_flwr.clock", "fedram_flwr.objectives", "fedram_flwr.scenario")
    cores = [m for m in graph if under(m, flower_free)] + [
        f"fedram_flwr.strategies.{name}"
        for name in (
            "core",
            "hyper",
            "round_driver",
            "rounds",
            "ca_fed_math",
            "rc_fl_math",
            "availability_estimates",
            "fedbuff",
            "fedbuff_jobs",
            "fedbuff_loop",
        )
    ]
    direct = {
        m
        for m, (text, is_package) in sources.items()
        if any(n.split(".")[0] == "flwr" for n, _ in imported_names(m, is_package, ast.parse(text)))
    }
    reached = [chain for c in cores for chain in chains_into(graph, (c,), tuple(direct))]
    assert not reached, f"Flower-free modules that import Flower: {reached}"


def test_flower_in_a_core_is_found() -> None:
    source = (
        "from flwr.common import NDArrays\nclass FooCore:\n    def f(self) -> NDArrays: ...\n"
        "class Foo(Strategy):\n    x: NDArrays\ndef g(a: NDArrays): ...\n"
    )
    assert flower_names_in_cores(source) == [("FooCore", "NDArrays"), ("g", "NDArrays")]
