"""Settings come from one pydantic-settings model: keywords, then WORLDGRAPH_* variables, then the
usual NEO4J_* names, then the defaults; a bad value names the variable (or keyword) to fix."""

from __future__ import annotations

import pytest

from worldgraph import InvalidInputError, WorldGraphConfig


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
