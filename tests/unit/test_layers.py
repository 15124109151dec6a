"""Dependencies point one way (docs/architecture.md, "Layers"), stated by package:

    front     worldgraph.cli, worldgraph.server, worldgraph.neo4j_local, worldgraph.integrations (the framework adapters)
    facade    worldgraph (the package's re-exports), worldgraph.service, worldgraph.facade, worldgraph.aio,
              worldgraph.access
    pipelines worldgraph.memory, worldgraph.world, worldgraph.export
    stores    worldgraph.kg
    ground    errors, config, clock, names, limits, locks, schema, gcpause, filemodes, bundled, prompts, lazy

A module imports only its own layer and the layers below it. A module of the package that is in
no layer fails the test: place it (a new package is a decision, written here and in the docs).

No module takes another module's private names (``_name``): not by ``from m import _name`` (however
the import is spread over lines), not as ``m._name`` of an imported module. What two modules share
is public in one of them, with a name that says what it is.

Every module of the package is parsed with ``ast`` (nothing is imported), and every import in it
counts: module level and inside functions alike, absolute and relative. For cycles, imports
under ``if TYPE_CHECKING:`` are left out (they never run, so they cannot form a runtime cycle);
for the layer check they count: a module below the service that names the facade even only in
its annotations takes the facade, which is what the layering forbids. The implicit import of a
parent package (``worldgraph/__init__.py`` runs before any ``worldgraph.x``) is left out: it is
Python's, not the module's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "worldgraph"

# Top to bottom. A name covers the module and everything under it (``worldgraph`` itself: only
# the package's __init__).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("front", ("worldgraph.cli", "worldgraph.server", "worldgraph.neo4j_local", "worldgraph.__main__",
               "worldgraph.integrations")),
    ("facade", ("worldgraph", "worldgraph.service", "worldgraph.facade", "worldgraph.aio", "worldgraph.access")),
    ("pipelines", ("worldgraph.memory", "worldgraph.world", "worldgraph.export")),
    ("stores", ("worldgraph.kg",)),
    ("ground", ("worldgraph.errors", "worldgraph.config", "worldgraph.clock", "worldgraph.names",
                "worldgraph.limits", "worldgraph.locks", "worldgraph.schema", "worldgraph.gcpause",
                "worldgraph.filemodes", "worldgraph.bundled", "worldgraph.prompts", "worldgraph.lazy")),
)


def layer_of(module: str) -> int | None:
    """The index of ``module``'s layer in LAYERS (0 = the top), None if it is in none."""
    best: tuple[int, int] | None = None  # (length of the matching name, layer): the longest name wins
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            hit = module == n if n == "worldgraph" else (module == n or module.startswith(n + "."))
            if hit and (best is None or len(n) > best[0]):
                best = (len(n), i)
    return None if best is None else best[1]


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
    """'a -> b (why)' for each import of a higher layer, and each module in no layer."""
    bad = []
    for module, targets in sorted(graph.items()):
        mine = layer_of(module)
        if mine is None:
            bad.append(f"{module} is in no layer (add its package to LAYERS in tests/unit/test_layers.py)")
            continue
        for target in sorted(targets):
            theirs = layer_of(target)
            if theirs is not None and theirs < mine:
                bad.append(f"{module} -> {target} (the {LAYERS[mine][0]} layer imports only itself and the layers "
                           f"below it, not {LAYERS[theirs][0]})")
    return bad


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph()
    assert "worldgraph.world.updater" in graph["worldgraph.service"]  # module level
    assert "worldgraph.world.summary" in graph["worldgraph.world.updater"]  # inside a function
    # the package's re-exports: imported on first use, named for the type checker
    assert "worldgraph.service" in import_graph(type_checking=True)["worldgraph"]
    assert len(graph) > 80


def test_no_import_cycles() -> None:
    cycles = import_cycles(import_graph())
    assert cycles == [], "import cycles inside the package (break them by moving the shared part down a layer):\n" + \
        "\n".join(" <-> ".join(c) for c in cycles)


def test_the_stores_have_no_import_cycle_even_in_annotations() -> None:
    # A cycle through ``if TYPE_CHECKING:`` imports does not break at run time, but says two store
    # modules need each other (as neo4j.world and neo4j.snapshot_import did): give the shared part
    # its own module, or hand one part to the other.
    cycles = [c for c in import_cycles(import_graph(type_checking=True)) if any(m.startswith("worldgraph.kg") for m in c)]
    assert cycles == [], "import cycles among the stores:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_every_module_imports_only_its_layer_and_below() -> None:
    bad = upward_imports(import_graph(type_checking=True))
    assert bad == [], "modules import a higher layer (pass them a store or a callable instead):\n" + "\n".join(bad)


def test_the_checks_catch_a_cycle_an_upward_import_and_a_stray_module(tmp_path: Path) -> None:
    pkg = tmp_path / "worldgraph"
    for sub in ("world", "kg"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "service.py").write_text("from worldgraph.world import updater\n")
    (pkg / "world" / "updater.py").write_text("def f():\n    from . import merge\n")
    (pkg / "world" / "merge.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                            "    from worldgraph import service\n"
                                            "def g():\n    import worldgraph.world.updater\n")
    graph = import_graph(pkg)
    assert import_cycles(graph) == [["worldgraph.world.merge", "worldgraph.world.updater"]]
    assert upward_imports(graph) == []  # the TYPE_CHECKING import is left out here...
    assert upward_imports(import_graph(pkg, type_checking=True)) == [
        "worldgraph.world.merge -> worldgraph.service (the pipelines layer imports only itself and the layers "
        "below it, not facade)"]
    (pkg / "kg" / "store.py").write_text("from worldgraph.world.merge import g\n")
    assert "worldgraph.kg.store -> worldgraph.world.merge (the stores layer imports only itself and the layers " \
           "below it, not pipelines)" in upward_imports(import_graph(pkg))
    (pkg / "stray.py").write_text("")
    assert "worldgraph.stray is in no layer (add its package to LAYERS in tests/unit/test_layers.py)" in \
        upward_imports(import_graph(pkg))


def test_layer_of_takes_the_longest_name() -> None:
    assert layer_of("worldgraph") == 1 and layer_of("worldgraph.service") == 1
    assert layer_of("worldgraph.kg.embedded.store") == 3
    assert layer_of("worldgraph.cli.demo") == 0 and layer_of("worldgraph.errors") == 4
    assert layer_of("worldgraph.nowhere") is None


# A name that starts with "_" belongs to its module: another module that needs it gets it made
# public (and well named) or moved, so that each module's private part can change on its own.


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(package: Path = PACKAGE) -> list[str]:
    """'module:line name' for each private name a module takes from another module of the package:
    ``from worldgraph.m import _x`` (absolute or relative) and ``m._x`` where ``m`` is a module of
    the package it imported."""
    modules = package_modules(package)
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        aliases: dict[str, str] = {}  # local name -> the package module it is bound to
        for node in _imports(tree, type_checking=True):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "worldgraph":
                        aliases[a.asname or a.name] = a.name
                continue
            base = node.module or ""
            if node.level:
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            if not (base == "worldgraph" or base.startswith("worldgraph.")):
                continue
            for a in node.names:
                if base + "." + a.name in modules:
                    aliases[a.asname or a.name] = base + "." + a.name
                if _private(a.name) and base != name:
                    found.append(f"{name}:{node.lineno} {a.name} (from {base})")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                dotted = ast.unparse(node.value)
                if dotted in aliases and aliases[dotted] != name:
                    found.append(f"{name}:{node.lineno} {node.attr} (of {aliases[dotted]})")
    return found


def test_no_module_takes_another_modules_private_names() -> None:
    bad = private_imports()
    assert bad == [], "modules take other modules' private names (make the shared thing public, or move it):\n" + \
        "\n".join(bad)


def test_the_private_name_check_sees_every_form(tmp_path: Path) -> None:
    pkg = tmp_path / "worldgraph"
    (pkg / "memory").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "memory" / "__init__.py").write_text("")
    (pkg / "memory" / "schema.py").write_text("_RETRIES = 5\ndef _check(): ...\n_check()\n__all__ = []\n")
    (pkg / "memory" / "tables.py").write_text("from worldgraph.memory.schema import (\n    __all__,\n"
                                              "    _RETRIES,\n)\nfrom . import schema\nschema._check()\n")
    (pkg / "memory" / "search.py").write_text("import worldgraph.memory.schema as s\nfrom .schema import _check\n"
                                              "s._RETRIES\n")
    assert sorted(private_imports(pkg)) == [
        "worldgraph.memory.search:2 _check (from worldgraph.memory.schema)",
        "worldgraph.memory.search:3 _RETRIES (of worldgraph.memory.schema)",
        "worldgraph.memory.tables:1 _RETRIES (from worldgraph.memory.schema)",
        "worldgraph.memory.tables:6 _check (of worldgraph.memory.schema)"]


# Statements are text in one place per backend (docs/architecture.md, "How a store is made"): a
# store module runs a named statement from its backend's query module and never writes one. For
# Neo4j the query modules are kg/neo4j/*queries.py, plus kg/neo4j/schema.py, which is the schema's
# own text (constraints, indexes, key migrations, the version node). kg/neo4j/cypher.py is not one:
# it runs the caller's query and manages its transaction (EXPLAIN + the query, SHOW / TERMINATE
# TRANSACTIONS), none of which is one of these data clauses. For SQLite the one place is the
# kg/embedded/sql/ package (a module per group of tables); the LadybugDB Cypher that
# kg/embedded/cypher/projection.py runs to keep its projection is that engine's, not SQLite's, and
# the SQL patterns below do not take it.
# Docstrings are prose and left out; every other string constant counts, f-string parts included.

CYPHER_STATEMENT = re.compile(r"(?m)^\s*(?:OPTIONAL\s+MATCH|MATCH|MERGE|CREATE|UNWIND|DETACH\s+DELETE)\s*[(\s$]")
SQL_STATEMENT = re.compile(r"(?m)^\s*(?:SELECT\s|INSERT\s+(?:OR\s+\w+\s+)?INTO\s|REPLACE\s+INTO\s|UPDATE\s+\w+\s+SET\s"
                           r"|DELETE\s+FROM\s|PRAGMA\s|CREATE\s+(?:TEMP\w*\s+|UNIQUE\s+|VIRTUAL\s+)?"
                           r"(?:TABLE|INDEX|VIEW|TRIGGER)\s)")
QUERY_MODULES = {
    "neo4j": lambda name: name.endswith("queries") or name == "worldgraph.kg.neo4j.schema",
    "embedded": lambda name: name == "worldgraph.kg.embedded.sql" or name.startswith("worldgraph.kg.embedded.sql."),
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def inline_statements(backend: str, package: Path = PACKAGE) -> list[str]:
    """'module:line text' for each string constant of a kg/<backend> module outside the backend's
    query modules that starts a clause of a statement (CYPHER_STATEMENT for neo4j, SQL_STATEMENT
    for embedded) at the start of one of its lines."""
    pattern = CYPHER_STATEMENT if backend == "neo4j" else SQL_STATEMENT
    prefix = f"worldgraph.kg.{backend}"
    found: list[tuple[str, int, str]] = []
    for name, path in package_modules(package).items():
        if not (name == prefix or name.startswith(prefix + ".")) or QUERY_MODULES[backend](name):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                    and pattern.search(node.value):
                found.append((name, node.lineno, f"{name}:{node.lineno} {node.value.strip()[:60]!r}"))
    return [text for _, _, text in sorted(found)]


def test_neo4j_statements_live_in_the_query_modules() -> None:
    bad = inline_statements("neo4j")
    assert bad == [], "Cypher statements outside kg/neo4j/*queries.py and schema.py (name them there):\n" + \
        "\n".join(bad)


def test_sqlite_statements_live_in_the_sql_package() -> None:
    bad = inline_statements("embedded")
    assert bad == [], "SQLite statements outside kg/embedded/sql/ (name them in its module of that table):\n" + \
        "\n".join(bad)


def test_the_statement_checks_see_inline_text_and_spare_the_query_modules(tmp_path: Path) -> None:
    pkg = tmp_path / "worldgraph"
    for sub in ("neo4j", "embedded"):
        (pkg / "kg" / sub).mkdir(parents=True)
        (pkg / "kg" / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "kg" / "__init__.py").write_text("")
    (pkg / "kg" / "neo4j" / "lifecycle.py").write_text(
        '"""MATCH in prose is no statement."""\n'
        'A = "MATCH (n) RETURN n"\n'
        'def f(w, tx):\n'
        '    """CREATE nothing."""\n'
        '    tx.run(f"\\n  UNWIND $ids AS id {w}")\n'
        '    tx.run(w + " DETACH DELETE n")\n'
        '    return "match the case", "MERGED", "EXPLAIN " + w\n')
    (pkg / "kg" / "neo4j" / "lifecycle_queries.py").write_text('A = "MATCH (n) RETURN n"\n')
    (pkg / "kg" / "neo4j" / "schema.py").write_text('C = "CREATE INDEX x IF NOT EXISTS FOR (n:N) ON (n.a)"\n')
    (pkg / "kg" / "embedded" / "load.py").write_text(
        'Q = {"a": "SELECT data FROM a WHERE id = ?"}\n'
        'def g(cur, t):\n'
        '    cur.execute(f"DELETE FROM {t} WHERE id = ?")\n'
        '    cur.execute("INSERT OR IGNORE INTO x VALUES (?)")\n'
        '    cur.execute("CREATE NODE TABLE n(id STRING, PRIMARY KEY (id))")\n'
        '    return "Select one", "UPDATE", "BEGIN IMMEDIATE"\n')
    (pkg / "kg" / "embedded" / "sql").mkdir()
    (pkg / "kg" / "embedded" / "sql" / "__init__.py").write_text('S = "SELECT 1"\n')
    (pkg / "kg" / "embedded" / "sql" / "schema.py").write_text('P = "PRAGMA data_version"\n')
    (pkg / "kg" / "embedded" / "sqlish.py").write_text('Q = "SELECT 2"\n')  # a name that only starts alike
    assert inline_statements("neo4j", pkg) == [
        "worldgraph.kg.neo4j.lifecycle:2 'MATCH (n) RETURN n'",
        "worldgraph.kg.neo4j.lifecycle:5 'UNWIND $ids AS id'",
        "worldgraph.kg.neo4j.lifecycle:6 'DETACH DELETE n'"]
    assert inline_statements("embedded", pkg) == [
        "worldgraph.kg.embedded.load:1 'SELECT data FROM a WHERE id = ?'",
        "worldgraph.kg.embedded.load:3 'DELETE FROM'",
        "worldgraph.kg.embedded.load:4 'INSERT OR IGNORE INTO x VALUES (?)'",
        "worldgraph.kg.embedded.sqlish:1 'SELECT 2'"]


def test_the_framework_adapters_use_the_public_api_only() -> None:
    """worldgraph.integrations (docs/frameworks/) sits above the facade and takes only what a user
    of the package takes: ``from worldgraph import ...`` (and its own shared module)."""
    bad = []
    for name, path in package_modules().items():
        if not name.startswith("worldgraph.integrations"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("worldgraph") \
                    and node.module not in ("worldgraph", "worldgraph.integrations.common"):
                bad.append(f"{name}: from {node.module} import ...")
            if isinstance(node, ast.Import):
                bad += [f"{name}: import {a.name}" for a in node.names if a.name.startswith("worldgraph")]
    assert bad == [], "the adapters import past the public API:\n" + "\n".join(bad)
