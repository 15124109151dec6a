"""Files that live outside the package in a checkout but ship inside the wheel.

In a source checkout the demo samples are ``examples/`` and the Neo4j launcher's Maven project is
``tools/neo4j-local/``. The wheel carries copies under ``worldgraph/_bundled/`` (``setup.py``'s
build step puts them there), so ``pip install worldgraph`` then ``worldgraph demo`` works from any
folder. These functions return whichever exists: the checkout's copy first (an editable install
sees edits at once), else the bundled one.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent
BUNDLED = PACKAGE / "_bundled"


def examples_dir() -> Path:
    """The folder holding ``experiences.jsonl`` and ``text_adventure.jsonl``."""
    return _first(CHECKOUT / "examples", BUNDLED / "examples", "experiences.jsonl")


def neo4j_project_dir() -> Path:
    """The Maven project of the local Neo4j launcher (``pom.xml`` and ``src/``)."""
    return _first(CHECKOUT / "tools" / "neo4j-local", BUNDLED / "neo4j-local", "pom.xml")


def is_checkout(path: Path) -> bool:
    """True if ``path`` is inside the source checkout (not the installed package)."""
    return not path.resolve().is_relative_to(BUNDLED)


def _first(checkout: Path, bundled: Path, marker: str) -> Path:
    if (checkout / marker).is_file():
        return checkout
    return bundled
