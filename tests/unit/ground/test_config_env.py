"""Settings come from one pydantic-settings model: keywords, then WORLDGRAPH_* variables, then the
usual NEO4J_* names, then the defaults; a bad value names the variable (or keyword) to fix.

worldgraph/config/environment.py is the only module that reads or sets the environment: every other
module asks it (the settings' sources, the CLI's defaults, the Neo4j launcher's variables, a child
process's environment)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import worldgraph
from worldgraph import InvalidInputError, WorldGraphConfig
from worldgraph.config import LauncherSettings, child_environment, cli_defaults, set_library_defaults

# The names by which Python reads or changes the process environment (os.environ and its bytes
# twin, getenv, putenv, unsetenv): in the package, only config/environment.py may use them.
ENVIRONMENT_NAMES = frozenset({"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"})
ENVIRONMENT_READER = "config/environment.py"


def test_variables_are_typed_and_keywords_win() -> None:
    env = {"WORLDGRAPH_MAX_QUERY_BYTES": "16384", "WORLDGRAPH_MIN_SIMILARITY_THRESHOLD": "0.3",
           "WORLDGRAPH_WORLD_BACKGROUND_UPDATES": "false", "WORLDGRAPH_RELEVANCE_SIGNAL": "vector",
           "WORLDGRAPH_NEO4J_PASSWORD": "123456", "WORLDGRAPH_NEO4J_HOME": "/not/a/setting"}
    cfg = WorldGraphConfig.from_env(env)
    assert (cfg.max_query_bytes, cfg.min_similarity_threshold, cfg.world_background_updates) == (16384, 0.3, False)
    assert cfg.relevance_signal == "vector" and cfg.min_similarity == 0.3
    assert cfg.neo4j_password == "123456"  # a digits-only password stays a string
    assert WorldGraphConfig.from_env(env, max_query_bytes=100).max_query_bytes == 100
    assert WorldGraphConfig.from_env({"WORLDGRAPH_MIN_SIMILARITY_THRESHOLD": "null"}).min_similarity_threshold is None
    assert WorldGraphConfig.from_env({}).max_query_bytes == 4096


def test_the_usual_neo4j_names_come_after_their_worldgraph_names() -> None:
    cfg = WorldGraphConfig.from_env({"NEO4J_URI": "bolt://a:1", "NEO4J_USERNAME": "u", "NEO4J_DATABASE": "d"})
    assert (cfg.neo4j_uri, cfg.neo4j_user, cfg.neo4j_database) == ("bolt://a:1", "u", "d")
    both = {"NEO4J_URI": "bolt://a:1", "WORLDGRAPH_NEO4J_URI": "bolt://b:2"}
    assert WorldGraphConfig.from_env(both).neo4j_uri == "bolt://b:2"
    assert WorldGraphConfig.from_env(both, neo4j_uri="bolt://c:3").neo4j_uri == "bolt://c:3"


def test_the_process_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLDGRAPH_CANDIDATE_POOL", "42")
    assert WorldGraphConfig.from_env().candidate_pool == 42
    assert WorldGraphConfig.from_env({}).candidate_pool == 100  # a given mapping replaces os.environ


@pytest.mark.parametrize(("env", "kw", "field", "says"), [
    ({"WORLDGRAPH_MAX_QUERY_BYTES": "-1"}, {}, "config.max_query_bytes",
     "greater than 0 (the environment variable WORLDGRAPH_MAX_QUERY_BYTES='-1': fix or unset it)"),
    ({"WORLDGRAPH_RELEVANCE_SIGNAL": "magic"}, {}, "config.relevance_signal", "WORLDGRAPH_RELEVANCE_SIGNAL='magic'"),
    ({}, {"max_query_bytes": 0}, "config.max_query_bytes", "(the keyword argument max_query_bytes=0)"),
    ({"NEO4J_URI": ""}, {"cypher_max_rows": "many"}, "config.cypher_max_rows", "keyword argument cypher_max_rows"),
    ({}, {"max_qurey_bytes": 1}, "config.max_qurey_bytes", "is not a setting of WorldGraphConfig"),
])
def test_a_bad_value_names_where_it_came_from(env: dict[str, str], kw: dict[str, object], field: str,
                                              says: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        WorldGraphConfig.from_env(env, **kw)
    assert info.value.field == field and says in info.value.rule


def environment_uses(package: Path) -> list[str]:
    """'file:line name' for each use of an ENVIRONMENT_NAMES name (``os.environ``, ``from os
    import getenv``, ...) in a module of ``package`` other than its config/environment.py. The modules are
    parsed, not imported; comments and docstrings do not count."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == ENVIRONMENT_READER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT_NAMES:
                found.append(f"{rel}:{node.lineno} {node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module in ("os", "posix", "nt"):
                found += [f"{rel}:{node.lineno} {a.name}" for a in node.names if a.name in ENVIRONMENT_NAMES]
    return found


def test_only_config_reads_or_sets_the_environment() -> None:
    uses = environment_uses(Path(worldgraph.__file__).resolve().parent)
    assert uses == [], ("only worldgraph/config/environment.py reads or sets the environment; ask it instead (a "
                        "setting of WorldGraphConfig, or a documented function there):\n" + "\n".join(uses))


def test_the_environment_check_finds_every_form(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "environment.py").write_text("import os\nX = os.environ.get('A')\n")
    (tmp_path / "config" / "settings.py").write_text("import os\nX = os.getenv('A')\n")  # config's other modules ask it
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text('"""os.environ in a docstring is fine"""\nimport os\n'
                                           "# os.getenv in a comment too\nos.environ.setdefault('A', 'b')\n")
    (tmp_path / "sub" / "b.py").write_text("from os import getenv, path\nimport os as o\no.putenv('A', 'b')\n")
    assert environment_uses(tmp_path) == ["config/settings.py:2 getenv", "sub/a.py:4 environ", "sub/b.py:1 getenv",
                                          "sub/b.py:3 putenv"]


def test_the_command_line_defaults_come_from_their_variables() -> None:
    assert cli_defaults({}) == {"data": "./data", "graph": "embedded", "tenant": "default"}
    env = {"WORLDGRAPH_DATA": "/d", "WORLDGRAPH_GRAPH": "neo4j", "WORLDGRAPH_TENANT": "acme"}
    assert cli_defaults(env) == {"data": "/d", "graph": "neo4j", "tenant": "acme"}


def test_the_launcher_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    unset = LauncherSettings.from_env({})
    assert (unset.home, unset.project, unset.java_opts, unset.pagecache) == (None, None, None, None)
    assert unset.cache_home == Path("/home/someone/.cache")
    empty = LauncherSettings.from_env({"WORLDGRAPH_NEO4J_HOME": "", "WORLDGRAPH_NEO4J_PROJECT": "",
                                       "WORLDGRAPH_NEO4J_JAVA_OPTS": "", "XDG_CACHE_HOME": ""})
    # an empty home or project is unset; empty JVM options mean none (the launcher's default is not used)
    assert (empty.home, empty.project, empty.java_opts, empty.cache_home) == (None, None, "", Path("/home/someone/.cache"))
    given = LauncherSettings.from_env({"WORLDGRAPH_NEO4J_HOME": "~/n", "WORLDGRAPH_NEO4J_PROJECT": "/p",
                                       "WORLDGRAPH_NEO4J_JAVA_OPTS": "-Xmx2g", "WORLDGRAPH_NEO4J_PAGECACHE": "3g",
                                       "XDG_CACHE_HOME": "/c"})
    assert given == LauncherSettings("~/n", "/p", "-Xmx2g", "3g", Path("/c"))
    monkeypatch.setenv("WORLDGRAPH_NEO4J_PAGECACHE", "1g")
    assert LauncherSettings.from_env().pagecache == "1g"  # the process environment, read at each call


def test_a_child_process_gets_this_environment_and_our_package_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    env = child_environment(pythonpath_first="/pkg")
    assert env["AWS_REGION"] == "eu-west-1" and env["PYTHONPATH"] == "/pkg"
    monkeypatch.setenv("PYTHONPATH", "/other")
    assert child_environment(pythonpath_first="/pkg")["PYTHONPATH"] == "/pkg" + os.pathsep + "/other"
    assert child_environment()["PYTHONPATH"] == "/other"


def test_library_defaults_leave_an_operators_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANCE_INCLUDE_VECTOR_CENTROIDS", raising=False)
    set_library_defaults()
    assert os.environ["LANCE_INCLUDE_VECTOR_CENTROIDS"] == "false"
    monkeypatch.setenv("LANCE_INCLUDE_VECTOR_CENTROIDS", "true")
    set_library_defaults()
    assert os.environ["LANCE_INCLUDE_VECTOR_CENTROIDS"] == "true"
