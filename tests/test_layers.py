"""Dependencies point one way (ARCHITECTURE.md): cli / server -> service -> memory, kg, export ->
stores -> records, ids, errors, config.

Every module of the package is parsed with ``ast`` (nothing is imported), and every import in it
counts: module level and inside functions alike, absolute and relative. For cycles, imports
under ``if TYPE_CHECKING:`` are left out (they never run, so they cannot form a runtime cycle);
for the upward check they count: a module below the service that names the facade even only in
its annotations takes the facade, which is what the layering forbids. The implicit import of a
parent package (``worldgraph/__init__.py`` runs before any ``worldgraph.x``) is left out: it is
Python's, not the module's.

The test fails on any import cycle inside the package, and on any module below the service
importing the service, the CLI or the server.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "worldgraph"

# The layer above the service (front ends) and the service layer itself; everything else is below.
FRONT = ("worldgraph.cli", "worldgraph.console", "worldgraph.demo", "worldgraph.worker_cli",
         "worldgraph.neo4j_local", "worldgraph.server", "worldgraph.commands", "worldgraph.__main__")
SERVICE = ("worldgraph", "worldgraph.service", "worldgraph.replay")
# The ground floor: imported by every layer, importing none of them.
BASE = ("worldgraph.errors", "worldgraph.config", "worldgraph.clock", "worldgraph.names", "worldgraph.schema",
        "worldgraph.locks", "worldgraph.gcpause", "worldgraph.limits")
# The stores and what they are made of: below memory, the world updater, merge and export.
STORES = ("worldgraph.kg.store", "worldgraph.kg.embedded", "worldgraph.kg.embedded_episodes",
          "worldgraph.kg.embedded_world", "worldgraph.kg.embedded_leases", "worldgraph.kg.embedded_sql",
          "worldgraph.kg.neo4j_store", "worldgraph.kg.neo4j_leases", "worldgraph.kg.neo4j_queries",
          "worldgraph.kg.cypher_guard", "worldgraph.kg.cypher_limits", "worldgraph.kg.neo4j_cypher",
          "worldgraph.kg.sqlite_open", "worldgraph.kg.codec", "worldgraph.kg.sessions",
          "worldgraph.kg.lease", "worldgraph.kg.records", "worldgraph.kg.ids",
          # the parts of the Neo4j store (neo4j_store assembles them; neo4j_queries re-exports the Cypher)
          "worldgraph.kg.neo4j_base", "worldgraph.kg.neo4j_episodes", "worldgraph.kg.neo4j_world",
          "worldgraph.kg.neo4j_import", "worldgraph.kg.neo4j_rows", "worldgraph.kg.neo4j_schema",
          "worldgraph.kg.neo4j_episode_queries", "worldgraph.kg.neo4j_world_queries",
          # browse and forget: each store's part and what they share
          "worldgraph.kg.lifecycle_base", "worldgraph.kg.embedded_lifecycle", "worldgraph.kg.neo4j_lifecycle")


def _in(module: str, names: tuple[str, ...]) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names if n != "worldgraph") or (
        "worldgraph" in names and module == "worldgraph")


def package_modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package."""
    root = package.parent
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_checking: bool) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth; those under ``if TYPE_CHECKING:`` only if asked."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_checking and _type_checking_block(node):
            stack.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph(package: Path = PACKAGE, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from a import b`` counts ``a.b`` when that is
    a module, else ``a``); ``type_checking``: imports under ``if TYPE_CHECKING:`` too."""
    modules = package_modules(package)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: set[str] = set()
        for node in _imports(tree, type_checking):
            if isinstance(node, ast.Import):
                bases = [a.name for a in node.names]
                members: list[str] = []
            else:
                base = node.module or ""
                if node.level:
                    anchor = here[:len(here) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                bases = [base]
                members = [base + "." + a.name for a in node.names]
            for full in members:
                if full.startswith("worldgraph") and full in modules:
                    targets.add(full)
            if not members or any(m not in modules for m in members):
                for base in bases:
                    if base == "worldgraph" or base.startswith("worldgraph."):
                        target = resolve(base)
                        if target is not None:
                            targets.add(target)
        targets.discard(name)
        graph[name] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    cycles.append(sorted(comp))
    return cycles


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for each module below the service importing the service layer or a front end,
    each ground-floor module importing anything above the ground floor, and each store module
    importing anything but stores and the ground floor."""
    bad = []
    for module, targets in sorted(graph.items()):
        below_service = not _in(module, FRONT) and not _in(module, SERVICE)
        for target in sorted(targets):
            if below_service and (_in(target, FRONT) or _in(target, SERVICE)):
                bad.append(f"{module} -> {target}")
            elif _in(module, BASE) and not _in(target, BASE):
                bad.append(f"{module} -> {target} (the ground floor imports only the ground floor)")
            elif _in(module, STORES) and not (_in(target, STORES) or _in(target, BASE)):
                bad.append(f"{module} -> {target} (a store imports only stores and the ground floor)")
    return bad


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "worldgraph.kg.world" in graph["worldgraph.service"]  # module level
    assert "worldgraph.kg.summary" in graph["worldgraph.kg.world"]  # inside a function
    assert "worldgraph.service" in graph["worldgraph"]  # the package's re-exports
    assert len(graph) > 80


def test_no_import_cycles() -> None:
    cycles = import_cycles(import_graph())
    assert cycles == [], "import cycles inside the package (break them by moving the shared part down a layer):\n" + \
        "\n".join(" <-> ".join(c) for c in cycles)


def test_nothing_below_the_service_imports_upward() -> None:
    bad = upward_imports(import_graph(type_checking=True))
    assert bad == [], "modules import a higher layer (pass them a store or a callable instead):\n" + "\n".join(bad)


def test_the_checks_catch_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "worldgraph"
    (pkg / "kg").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kg" / "__init__.py").write_text("")
    (pkg / "service.py").write_text("from worldgraph.kg import world\n")
    (pkg / "kg" / "world.py").write_text("def f():\n    from . import merge\n")
    (pkg / "kg" / "merge.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from worldgraph import service\n"
                                         "def g():\n    import worldgraph.kg.world\n")
    graph = import_graph(pkg)
    assert import_cycles(graph) == [["worldgraph.kg.merge", "worldgraph.kg.world"]]
    assert upward_imports(graph) == []  # the TYPE_CHECKING import is left out here...
    assert upward_imports(import_graph(pkg, type_checking=True)) == ["worldgraph.kg.merge -> worldgraph.service"]
    (pkg / "kg" / "merge.py").write_text("def g():\n    from worldgraph.service import WorldModel\n")
    assert upward_imports(import_graph(pkg)) == ["worldgraph.kg.merge -> worldgraph.service"]
    (pkg / "kg" / "store.py").write_text("from worldgraph.kg.merge import g\n")
    assert "worldgraph.kg.store -> worldgraph.kg.merge (a store imports only stores and the ground floor)" in \
        upward_imports(import_graph(pkg))
