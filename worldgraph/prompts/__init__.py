"""LLM prompt templates and JSON Schemas, shipped as package data.

Templates use ``string.Template`` placeholders (``$name``) so the JSON examples in them need
no brace escaping.
"""

from __future__ import annotations

from importlib import resources


def load_prompt(name: str) -> str:
    """The text of ``worldgraph/prompts/<name>`` (``.txt`` added when no suffix is given)."""
    filename = name if "." in name else f"{name}.txt"
    return resources.files(__name__).joinpath(filename).read_text(encoding="utf-8")
