"""The error tree drawn in worldgraph/errors.py's docstring is the real one: every class that
module defines is drawn once, under its real parent, with the built-in base it really has."""

from __future__ import annotations

import inspect
import re

from worldgraph import errors


def _drawn() -> dict[str, tuple[str | None, str | None]]:
    """name -> (parent drawn above it, built-in named in parentheses)."""
    doc = errors.__doc__ or ""
    out: dict[str, tuple[str | None, str | None]] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        m = re.match(r"^(\s*)[*+-] (\w+)(?: \((\w+)\))?", line)
        if not m:
            continue
        depth, name, builtin = len(m.group(1)), m.group(2), m.group(3)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        assert name not in out, f"{name} is drawn twice"
        out[name] = (stack[-1][1] if stack else None, builtin)
        stack.append((depth, name))
    return out


def test_the_drawn_error_tree_matches_the_classes() -> None:
    drawn = _drawn()
    classes = {name: cls for name, cls in inspect.getmembers(errors, inspect.isclass)
               if issubclass(cls, BaseException) and cls.__module__ == errors.__name__}
    assert set(drawn) == set(classes), "draw every error class in errors.py's docstring, and only those"
    for name, (parent, builtin) in drawn.items():
        cls = classes[name]
        ours = [b for b in cls.__bases__ if b.__module__ == errors.__name__]
        builtins = [b.__name__ for b in cls.__bases__ if b.__module__ == "builtins" and b is not Exception]
        assert [b.__name__ for b in ours] == ([parent] if parent else []), f"{name}'s parent"
        assert builtins == ([builtin] if builtin else []), f"{name}'s built-in base"

