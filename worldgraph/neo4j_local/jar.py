"""Building the local Neo4j launcher (``tools/neo4j-local``, a small Maven project) into a runnable jar.

In a checkout the project is built where it is (``tools/neo4j-local/target``). An installed wheel
carries the project's sources (``worldgraph/_bundled/neo4j-local``); site-packages may not be
writable, so that copy is built in a per-user build cache (``$XDG_CACHE_HOME/worldgraph``, default
``~/.cache/worldgraph``): only the jar lives there, never a server's state or data.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from worldgraph.bundled import is_checkout, neo4j_project_dir
from worldgraph.config import LauncherSettings
from worldgraph.neo4j_local.process import ALTERNATIVES, Neo4jLocalError, locked, require_tool


def project_dir() -> Path:
    """The Maven project (env ``WORLDGRAPH_NEO4J_PROJECT``, else ``tools/neo4j-local`` of the
    checkout, else the copy shipped in the wheel)."""
    env = LauncherSettings.from_env().project
    if env:
        return Path(env).expanduser().resolve()
    return neo4j_project_dir()


def build_dir() -> Path:
    """Where the project is built: itself in a checkout, else a copy in the user's build cache."""
    project = project_dir()
    settings = LauncherSettings.from_env()
    if settings.project or is_checkout(project):
        return project
    cache = settings.cache_home / "worldgraph" / "neo4j-local-build"
    return cache


def jar_path() -> Path:
    """The runnable jar produced by the build (its dependencies are in ``lib/`` next to it)."""
    return build_dir() / "target" / "neo4j-local.jar"


def needs_build(project: Path) -> bool:
    jar = project / "target" / "neo4j-local.jar"
    lib = project / "target" / "lib"
    if not jar.is_file() or not lib.is_dir() or not any(lib.glob("neo4j-*.jar")):
        return True
    built = jar.stat().st_mtime
    sources = [project / "pom.xml", *(project / "src").rglob("*")]
    return any(p.is_file() and p.stat().st_mtime > built for p in sources)


def build(force: bool = False) -> Path:
    """Build ``tools/neo4j-local`` with Maven if the jar is missing or older than its sources.

    The first build downloads Neo4j and its dependencies (~175 MB into ``~/.m2``, about 2 minutes);
    later builds are local. Returns the path of the runnable jar.

    Raises:
        Neo4jLocalError: if ``mvn``/``java`` are not on PATH, the project is missing, or Maven fails.
    """
    project = project_dir()
    if not (project / "pom.xml").is_file():
        raise Neo4jLocalError(
            f"Maven project not found at {project} (set WORLDGRAPH_NEO4J_PROJECT to the "
            f"tools/neo4j-local directory of a worldgraph checkout), {ALTERNATIVES}."
        )
    require_tool("java", "run the local Neo4j")
    where = build_dir()
    jar = where / "target" / "neo4j-local.jar"
    with locked(where / "target" / ".build.lock"):
        if where != project:
            _sync_sources(project, where)
        if not force and not needs_build(where):
            return jar
        mvn = require_tool("mvn", "build tools/neo4j-local")
        cmd = [mvn, "-q", "-B", "package"]
        proc = subprocess.run(
            cmd, cwd=where, stdin=subprocess.DEVNULL, capture_output=True, text=True
        )
        if proc.returncode != 0 or not jar.is_file():
            out = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
            raise Neo4jLocalError(
                f"building the local Neo4j failed (`{' '.join(cmd)}` in {where}, exit "
                f"{proc.returncode}); Maven needs access to Maven Central the first time, "
                f"{ALTERNATIVES}.\n{out}"
            )
        jar.touch()  # the jar plugin keeps an up-to-date jar's old mtime; mark it as fresh
        return jar


def _sync_sources(project: Path, where: Path) -> None:
    """Copy the shipped project's pom.xml and src/ into the build folder where they differ (a
    newer worldgraph ships newer sources; their mtimes then trigger a rebuild)."""
    for src in [project / "pom.xml", *sorted((project / "src").rglob("*"))]:
        if not src.is_file():
            continue
        dest = where / src.relative_to(project)
        if not dest.is_file() or dest.read_bytes() != src.read_bytes():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)  # a fresh mtime: needs_build sees the change
