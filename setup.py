"""Builds the wheel with the demo samples and the Neo4j launcher project inside the package.

Everything else is in pyproject.toml. ``examples/`` and ``tools/neo4j-local/`` stay where they are
in the checkout (the layout is a contract); the build copies what the installed package needs into
``worldgraph/_bundled/`` of the build tree (see worldgraph/bundled.py, which finds either copy).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# (source in the checkout, destination under worldgraph/_bundled, files to copy)
BUNDLES = [
    ("examples", "examples", ["experiences.jsonl", "text_adventure.jsonl", "README.md"]),
    ("tools/neo4j-local", "neo4j-local", ["pom.xml", "README.md", "src/**/*"]),  # never target/ (built jars)
]


class BuildPyWithBundles(build_py):  # type: ignore[misc]  # setuptools is untyped here
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's own files
            return
        for src, dest, patterns in BUNDLES:
            for pattern in patterns:
                for path in sorted((ROOT / src).glob(pattern)):
                    if path.is_file():
                        target = Path(self.build_lib) / "worldgraph" / "_bundled" / dest / path.relative_to(ROOT / src)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(path, target)


setup(cmdclass={"build_py": BuildPyWithBundles})
