"""The world package's modules use each other only through public names, and the merge engine is
functions over one merge state (docs/architecture.md, "The merge engine"):

- no module of ``worldgraph/world/`` imports another module's private (``_name``) names, neither
  ``from m import _x`` nor ``m._x`` on an imported module;
- no class of ``worldgraph/world/merge/`` derives from another class: the steps are functions over
  ``MergeState``, not a chain of mixins that reach each other's methods through ``self``.

Every module is parsed with ``ast`` (nothing is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

WORLD = Path(__file__).resolve().parents[3] / "worldgraph" / "world"


def private_imports(source: str) -> list[str]:
    """``"line: what"`` for each private name the source takes from another module."""
    tree = ast.parse(source)
    modules: set[str] = set()  # local names bound to imported modules
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    out.append(f"{node.lineno}: from {'.' * node.level}{node.module or ''} import {a.name}")
                elif node.module is None or a.name[:1].islower():  # maybe a module: `from pkg import mod`
                    modules.add(a.asname or a.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            out.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return out


def derived_classes(source: str) -> list[str]:
    """``"line: class X(Base)"`` for each class of the source that has a base class."""
    return [f"{n.lineno}: class {n.name}({', '.join(ast.unparse(b) for b in n.bases)})"
            for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.bases]


def test_the_checks_find_what_they_look_for() -> None:
    assert private_imports("from worldgraph.world.merge.state import _mark, covers\n") == [
        "1: from worldgraph.world.merge.state import _mark"]
    assert private_imports("from . import state\nstate._touch(1)\n") == ["2: state._touch"]
    assert private_imports("import worldgraph.world.merge.refs as refs\nrefs._shouting('A')\n") == ["2: refs._shouting"]
    assert private_imports("def f(x):\n    return x._private, __name__\n") == []  # not a module
    assert derived_classes("class RefsMixin(MergeBase):\n    pass\n") == ["1: class RefsMixin(MergeBase)"]
    assert derived_classes("@dataclass\nclass MergeState:\n    at: str\n") == []


def test_no_module_of_world_imports_a_private_name() -> None:
    found = {str(p.relative_to(WORLD.parent.parent)): hits for p in sorted(WORLD.rglob("*.py"))
             if (hits := private_imports(p.read_text(encoding="utf-8")))}
    assert found == {}, ("these modules take private names of other modules; make the name public "
                         f"(it is part of that module's interface) or move the code: {found}")


def test_the_merge_engine_is_functions_over_a_merge_state() -> None:
    found = {str(p.relative_to(WORLD.parent.parent)): hits for p in sorted((WORLD / "merge").rglob("*.py"))
             if (hits := derived_classes(p.read_text(encoding="utf-8")))}
    assert found == {}, ("merge steps are functions over merge.state.MergeState, not classes stacked on each "
                         f"other: {found}")
