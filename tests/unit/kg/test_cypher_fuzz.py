"""The text guard against characters glued to a refused keyword: every ASCII character class
(letters, digits, underscore, each whitespace and control character the engines' lexers treat
apart, each punctuation mark) and a set of Unicode characters (spaces, zero-width and
direction marks, look-alike letters, full-width forms, a combining mark, a lone surrogate),
directly before and directly after every word the guard refuses, in queries that put the
keyword where a clause would start. In full through Python and REST, a sample of 50 through the
CLI and MCP. Each query is refused, or runs harmlessly (the sandbox's test, test_cypher_sandbox.py,
shows what would stop it): nothing is written, nothing of another tenant or file is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from worldgraph import WorldModel
from worldgraph.cli.main import main
from worldgraph.errors import WorldGraphError
from worldgraph.kg.embedded.cypher.dialect import DENIED
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp

# one of each class the lexers read apart, and every punctuation mark
ASCII = ["a", "Z", "0", "9", "_", " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x00", "\x01", "\x1c", "\x1f", "\x7f",
         *"!\"#$%&'()*+,-./:;<=>?@[\\]^`{|}~"]
UNICODE = ["\u00a0", "\u1680", "\u2000", "\u2007", "\u200b", "\u200d", "\u2028", "\u202e", "\u3000", "\ufeff",
           "\u0435", "\uff43", "\u0301", "\u00e9", "\ud800"]
CHARS = ASCII + UNICODE
# where a clause would start: after an expression, after a clause, at the start
TEMPLATES = [
    "MATCH (e:Episode) WHERE e.id = 1{before}{word}{after}(x:Episode {{id: 'p'}}) RETURN e",
    "MATCH (e:Episode){before}{word}{after}FROM '/etc/passwd' RETURN *",
    "{before}{word}{after}show_tables() RETURN *",
]
SECRET = "fuzz-victim-secret"


def cases() -> list[str]:
    out = []
    for word in sorted(DENIED):
        for i, c in enumerate(CHARS):
            template = TEMPLATES[i % len(TEMPLATES)]
            out.append(template.format(before=c, word=word, after=" "))
            out.append(template.format(before=" ", word=word, after=c))
    return out


@pytest.fixture(scope="module")
def wm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorldModel]:
    model = WorldModel.open(tmp_path_factory.mktemp("fuzz") / "data", embedder=HashingEmbedder(64),
                            cypher_timeout_seconds=2.0)
    for tenant, text in (("attacker", "own"), ("victim", SECRET)):
        model.record_experiences(tenant, [{"agent_id": "a", "agent_role": "r", "task_type": "t",
                                           "task_description": f"{text} {i}", "outcome": "success"} for i in range(2)])
    try:
        yield model
    finally:
        model.close()


def _count(wm: WorldModel) -> int:
    return int(wm.cypher("attacker", "MATCH (e:Episode) RETURN count(e) AS n")[0]["n"])


def _harmless(result: Any) -> None:
    assert SECRET not in json.dumps(result, default=str) and "root:x:0" not in json.dumps(result, default=str)


def test_python_every_case(wm: WorldModel) -> None:
    refused = ran = 0
    for query in cases():
        try:
            _harmless(wm.cypher("attacker", query))
            ran += 1
        except (WorldGraphError, ValueError):
            refused += 1
    assert _count(wm) == 2
    assert refused >= 0.98 * len(cases()), (refused, ran)


def test_rest_every_case(wm: WorldModel) -> None:
    key, _ = ApiKeys(wm.store).create("attacker")
    statuses: dict[int, int] = {}
    with TestClient(create_app(wm), raise_server_exceptions=False) as client:
        for query in cases():
            r = client.post("/v1/cypher", content=json.dumps({"query": query}),  # (a lone surrogate as \\ud800)
                            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code in (200, 400, 403, 422), (query, r.status_code, r.text[:300])
            _harmless(r.json())
    assert 500 not in statuses and _count(wm) == 2, statuses


def test_cli_and_mcp_a_sample(wm: WorldModel, monkeypatch: pytest.MonkeyPatch) -> None:
    sample = random.Random(30).sample(cases(), 50)
    data = Path(wm.path)
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    for query in sample:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["--data", str(data), "--tenant", "attacker", "cypher", query, "--json"])
        answer = json.loads(out.getvalue() or "{}")
        assert code != 0 or "rows" in answer or isinstance(answer, list), (query, out.getvalue()[:300])
        _harmless(answer)

    async def mcp_calls() -> list[Any]:
        async with Client(build_mcp(lambda: wm, tenant="attacker")) as client:
            return [await client.call_tool("cypher", {"query": q}) for q in sample]
    for result in asyncio.run(mcp_calls()):
        _harmless([c.text for c in result.content])
    assert _count(wm) == 2
