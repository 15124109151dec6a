"""The built wheel works on its own: installed (not editable) into a fresh venv, `worldgraph demo`
runs from a folder outside the checkout, with the demo samples and the Neo4j launcher project
coming from inside the package.

The fresh venv gets worldgraph from the wheel and nothing else; its dependencies are the test
environment's, reached through a .pth file (as --system-site-packages would reach the system's),
so nothing is downloaded but the build backend (setuptools, from pip's cache or the index).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# top-level entries that are not part of the package's build (and may be large)
NOT_SOURCES = {".venv", ".git", "build", "dist", "data", "bench", "tests", "clients", "worldgraph-demo",
               ".neo4j-local", ".ci-neo4j", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis"}

pytestmark = pytest.mark.slow


def _copy_sources(dest: Path) -> None:
    """The checkout as the build sees it, without caches, built jars or stale build/ output."""
    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n in ("__pycache__", "target", "node_modules") or n.endswith(".egg-info")}
        return skip | (NOT_SOURCES & set(names) if Path(folder) == ROOT else set())

    shutil.copytree(ROOT, dest, ignore=ignore)


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc  # type: ignore[no-any-return]


def test_wheel_installs_and_runs_the_demo_outside_the_checkout(tmp_path: Path) -> None:
    src, dist, venv, work = tmp_path / "src", tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    _copy_sources(src)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)])
    wheel = next(dist.glob("worldgraph-*.whl"))

    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    purelib = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if Path(p).is_dir()]
    (purelib / "zz_test_dependencies.pth").write_text("\n".join(deps) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)])

    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORLDGRAPH_", "PYTHONPATH"))}
    where = _run([str(py), "-c", "import worldgraph, worldgraph.neo4j_local.jar as b, worldgraph.bundled as d; "
                  "print(worldgraph.__file__); print(b.project_dir()); print(d.examples_dir())"], cwd=work, env=env)
    module, project, examples = (Path(line) for line in where.stdout.split())
    assert module.is_relative_to(purelib), "worldgraph was not imported from the installed wheel"
    assert (project / "pom.xml").is_file() and project.is_relative_to(purelib)
    assert (examples / "experiences.jsonl").is_file() and examples.is_relative_to(purelib)

    # the shipped Maven project is built in the user's build cache, not in site-packages
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    built = _run([str(py), "-c", "import worldgraph.neo4j_local.jar as b; "
                  "b._sync_sources(b.project_dir(), b.build_dir()); print(b.build_dir())"], cwd=work, env=env)
    build_dir = Path(built.stdout.strip())
    assert build_dir.is_relative_to(tmp_path / "cache") and (build_dir / "pom.xml").read_bytes() == (
        ROOT / "tools" / "neo4j-local" / "pom.xml").read_bytes()

    assert _run([str(venv / "bin" / "worldgraph"), "--version"], cwd=work, env=env).stdout.startswith("worldgraph 0.")
    demo = _run([str(venv / "bin" / "worldgraph"), "demo"], cwd=work, env=env)
    assert "done in" in demo.stdout and "Traceback" not in demo.stderr
    snapshot = next((work / "worldgraph-demo" / "export").rglob("meta.json")).parent
    assert sorted(p.name for p in snapshot.iterdir()) == ["edges.jsonl", "meta.json", "nodes.jsonl", "rules.jsonl",
                                                          "scenes.jsonl"]
