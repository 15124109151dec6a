"""One erasure test that knows every copy of the user's words (docs/forget.md).

A marker (a unique word, mixed case) goes into every field of every input type, each marked with
the forget that must take it away: ``episode``, ``turn`` (the middle turn of a conversation),
``agent``, ``session``, ``environment``, ``tenant``, or ``kept`` (nothing forgets it: it must
still be there at the end). The words are then read on every path that keeps a copy (Cypher, so
projections are saved; recall; export; a running server), forgotten one way after another, each
followed by a purge, and looked for everywhere (``PLACES``): every byte of the data folder (in
UTF-8, UTF-16 and lower case), every object of the S3 bucket of an index there, every remaining
version of every LanceDB table, row by row and through its full-text index, every read path of
the API and of a running server, and the files the server and its children hold open. A word of
a forget already done may be in none of them; every other word must still be found. After the
last forget the folder is opened again by a new process and looked at once more.

**Adding a copy of the user's words is one function.** A feature that stores user words somewhere
new adds what it needs here, next to what is there:

- a new input (a new kind of write, as ``idempotent_answers`` added the kept answers of retried
  writes): a function decorated ``@records(name, case, ...)`` that writes it with ``e.mark(case, field)`` words in
  every field and says, with ``e.forget(case, key, how)``, what forgets it (see ``experience``);
- a new field of an existing input (metadata on episodes): one more ``"field": m("field")`` line
  in that input's function;
- a new place where words may be kept (a new read path, a store of its own outside the data
  folder): a function decorated ``@place(name)`` yielding ``(where, text)`` pairs (see
  ``read_paths``). Files under the data folder, the S3 bucket and every LanceDB table (a world-fact
  index, a faster vector index: any table, any version) are already searched.

Neo4j keeps its own store files on its server, outside the data folder: there the test checks every
read path and the LanceDB index (docs/forget.md says what Neo4j's files keep and how to compact them).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live.test_purge_release import open_files, process_tree
from tests.support.live_server import LiveServer
from worldgraph import WorldModel

CASES = ("turn", "episode", "agent", "session", "environment", "tenant")  # forgotten in this order
ENV, OTHER_ENV = "Cellar", "Attic"  # the episode case's rounds; the environment case's world


# ------------------------------------------------------------------------------------------ the context
@dataclass
class Erasure:
    """What the inputs write with (``wm``, ``mark``) and what the test forgets and looks for."""

    wm: WorldModel
    tenant: str  # every case's tenant but the tenant case's
    gone_tenant: str  # the tenant case's
    markers: dict[str, tuple[str, str]] = field(default_factory=dict)  # marker -> (case, field)
    forgets: dict[str, dict[str, Callable[[WorldModel], Any]]] = field(default_factory=dict)  # case -> key -> how

    def mark(self, case: str, where: str) -> str:
        """A new word for ``where`` that the forget ``case`` (or nothing: ``kept``) takes away."""
        assert case in (*CASES, "kept"), case
        word = f"Zq{uuid.uuid4().hex[:12]}X"  # one full-text term, mixed case (searched lower-cased too)
        self.markers[word] = (case, where)
        return word

    def tenant_of(self, case: str) -> str:
        return self.gone_tenant if case == "tenant" else self.tenant

    def agent_of(self, case: str) -> str:
        return f"agent-{case}" if case in ("agent", "tenant") else "agent-kept"

    def session_of(self, case: str) -> str:
        return f"session-{case}"

    def forget(self, case: str, key: str, how: Callable[[WorldModel], Any]) -> None:
        """``how(wm)`` is (part of) forgetting by ``case``; once per ``key`` (two inputs of one
        session are forgotten by one forget_session)."""
        self.forgets.setdefault(case, {}).setdefault(key, how)

    def forget_as_recorded(self, case: str, episode_id: str) -> None:
        """How ``case`` forgets what was recorded as ``episode_id``: that episode, its agent, its
        session or its tenant."""
        t = self.tenant_of(case)
        ways: dict[str, tuple[str, Callable[[WorldModel], Any]]] = {
            "episode": (episode_id, lambda wm: wm.forget_episode(t, episode_id)),
            "agent": (self.agent_of(case), lambda wm: wm.forget_agent(t, self.agent_of(case))),
            "session": (self.session_of(case), lambda wm: wm.forget_session(t, self.session_of(case))),
            "tenant": (t, lambda wm: wm.forget_tenant(t))}
        self.forget(case, *ways[case])


Writer = Callable[[Erasure, str], None]
INPUTS: list[tuple[str, tuple[str, ...], Writer]] = []
Place = Callable[["Look"], Iterator[tuple[str, str]]]
PLACES: list[tuple[str, Place]] = []


def records(name: str, *cases: str) -> Callable[[Writer], Writer]:
    """Register an input: ``write(e, case)`` writes it once for each of ``cases``."""
    def register(write: Writer) -> Writer:
        INPUTS.append((name, cases, write))
        return write
    return register


def place(name: str) -> Callable[[Place], Place]:
    """Register a place where words may be kept: ``look(l)`` yields ``(where, text)`` pairs."""
    def register(look: Place) -> Place:
        PLACES.append((name, look))
        return look
    return register


# ------------------------------------------------------------------------------------------ the inputs
@records("experience, canvas and feedback", "episode", "agent", "session", "tenant")
def experience(e: Erasure, case: str) -> None:
    def m(where: str) -> str:
        return e.mark(case, f"experience.{where}")
    t = e.tenant_of(case)
    canvas = {"id": f"canvas-{case}", "name": m("canvas.name"), "components": [{"id": "c1", "label": m("canvas.component")}],
              "state": {"note": m("canvas.state")},
              "actions": [{"id": f"act-{case}", "type": m("canvas.action.type"), "component_id": m("canvas.action.component_id"),
                           "details": {"text": m("canvas.action.details")}}]}
    eid = e.wm.record_experience(t, {
        "agent_id": e.agent_of(case), "agent_role": m("agent_role"), "task_type": m("task_type"),
        "task_description": m("task_description"), "input_summary": m("input_summary"),
        "approach_taken": m("approach_taken"), "actions_taken": [m("actions_taken")], "outcome": "failure",
        "error_message": m("error_message"), "confidence_score": 0.7, "constitutional_violations": [m("violations")],
        "human_intervention_required": True, "learnings": [m("learnings"), m("learnings.second")],
        "metacognitive_insights": {"what_worked": [m("what_worked")], "what_failed": [m("what_failed")],
                                   "uncertainty": m("uncertainty")},
        "reasoning_chain": {"steps": [{"step": m("reasoning.step"), "thought": m("reasoning.thought")}],
                            "conclusion": m("reasoning.conclusion")},
        "metadata": {"note": m("metadata.value"), m("metadata.key"): {"nested": [m("metadata.nested")]}},
        "session_id": e.session_of(case), "timestamp": "2026-02-01T10:00:00Z"}, canvas=canvas)
    e.wm.submit_feedback(t, eid, 0.5, notes=m("feedback.notes"), category=m("feedback.category"),
                         created_by=m("feedback.created_by"))
    e.forget_as_recorded(case, eid)


@records("conversation turns", "turn", "agent", "session", "tenant")
def conversation(e: Erasure, case: str) -> None:
    t, session = e.tenant_of(case), e.session_of(case)
    speakers = ["Ann", e.agent_of(case) if case == "agent" else "Bo", "Ann"]
    # the turn case forgets the middle turn; the agent case the middle speaker's turns; the others all
    fates = {"turn": ("kept", "turn", "kept"), "agent": ("kept", "agent", "kept")}.get(case, (case,) * 3)
    ids = e.wm.record_conversation(t, session, [
        {"speaker": who, "text": f"{e.mark(fate, f'turn.{i}.text')} said here", "timestamp": f"2026-02-02T10:0{i}:00Z",
         "learnings": [e.mark(fate, f"turn.{i}.learnings")], "role": "user" if who == "Ann" else "assistant",
         "metadata": {"tool_calls": [{"args": e.mark(fate, f"turn.{i}.metadata")}]}}
        for i, (who, fate) in enumerate(zip(speakers, fates))])
    if case == "turn":
        e.forget(case, ids[1], lambda wm: wm.forget_episode(t, ids[1]))
    elif case != "agent":  # the agent case's forget is the experience's (the same agent)
        e.forget_as_recorded(case, ids[0])


def _round(e: Erasure, case: str, n: int, fates: dict[str, str]) -> dict[str, Any]:
    def m(where: str) -> str:
        return e.mark(fates.get(where, case), f"round.{n}.{where}")
    return {"round": n, "action": f"open {m('action')}", "before_observation": m("before_observation"),
            "after_observation": m("after_observation"), "feedback": m("feedback"),
            "admissible_commands": [m("admissible_commands")],
            "response": f"{m('response')}\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: {m('reason')}"}


def _delta(e: Erasure, names: str, evidence: str) -> dict[str, Any]:
    def n(where: str) -> str:
        return e.mark(names, f"delta.{where}")
    def ev(where: str) -> str:
        return e.mark(evidence, f"delta.{where}.evidence")
    return {"entities": [{"ref": "c", "name": n("entity.name"), "type": "container", "evidence": ev("entity"),
                          "attributes": {"color": n("entity.attribute")}},
                         {"ref": "b", "name": n("item.name"), "type": "item", "evidence": ev("item")}],
            "states": [{"ref": "s", "name": n("state.name"), "type": "lid", "entity_ref": "c", "evidence": ev("state")}],
            "edges": [{"relation": "containment", "src_ref": "c", "dst_ref": "b", "evidence": ev("edge")}],
            "rules": [{"condition": n("rule.condition"), "outcome": n("rule.outcome"), "linked_refs": ["c"],
                       "evidence": ev("rule")}]}


@records("a round, its scene, and a delta learned from it", "episode", "environment", "tenant")
def rounds(e: Erasure, case: str) -> None:
    t = e.tenant_of(case)
    env = OTHER_ENV if case == "environment" else ENV
    # forgetting the round's episode takes its scene, its evidence and its line in later scenes, and
    # leaves what was learned (the delta's names); forgetting the environment leaves the round's
    # episode (its action, its observation before, its reason) and takes the rest
    kept = {"episode": {}, "environment": dict.fromkeys(("action", "before_observation", "reason"), "kept")}
    names = {"episode": "kept", "environment": "environment", "tenant": "tenant"}[case]
    first = e.wm.observe_round(t, env, _round(e, case, 1, kept.get(case, {})))
    assert first is not None
    e.wm.apply_delta(t, env, _delta(e, names, case), scene=first)
    # a later round, kept (by the episode case): its scene quotes the first round in its history,
    # and so does the kept answer of its idempotency key
    later = e.wm.observe_round(t, env, _round(e, "kept" if case == "episode" else case, 2,
                                              kept.get(case, {})), idempotency_key=f"later-round-{case}")
    assert later is not None
    if case == "episode":
        e.forget(case, first["episode_id"], lambda wm: wm.forget_episode(t, first["episode_id"]))
    elif case == "environment":
        e.forget(case, env, lambda wm: wm.forget_environment(t, env))
    else:
        e.forget_as_recorded(case, first["episode_id"])


@records("a delta merged without a scene", "environment", "tenant")
def sceneless_delta(e: Erasure, case: str) -> None:
    t = e.tenant_of(case)
    e.wm.apply_delta(t, OTHER_ENV if case == "environment" else "Loft", _delta(e, case, case))
    if case == "tenant":
        e.forget_as_recorded(case, "")
    else:
        e.forget(case, OTHER_ENV, lambda wm: wm.forget_environment(t, OTHER_ENV))


@records("the kept answers of idempotent writes", "episode", "agent", "session", "tenant")
def idempotent_answers(e: Erasure, case: str) -> None:
    def m(where: str) -> str:
        return e.mark(case, f"idempotent.{where}")
    t = e.tenant_of(case)
    eid = e.wm.record_experience(t, {"agent_id": e.agent_of(case), "task_type": "retried",
                                     "task_description": m("task_description"), "outcome": "success",
                                     "session_id": e.session_of(case), "timestamp": "2026-01-15T10:00:00Z"},
                                 idempotency_key=f"record-{case}")
    # the kept answer of a feedback quotes its notes: it goes with the episode it names
    e.wm.submit_feedback(t, eid, 0.5, notes=m("feedback.notes"), idempotency_key=f"rate-{case}")
    e.forget_as_recorded(case, eid)


@records("an API key's name", "tenant")
def api_key(e: Erasure, case: str) -> None:
    from worldgraph.server.keys import ApiKeys

    ApiKeys(e.wm.store).create(e.tenant_of(case), name=e.mark(case, "api_key.name"))


@records("an upsert: the episode record_experience(replace=True) replaces, a turn of a conversation", "episode")
def upsert(e: Erasure, case: str) -> None:
    """The replaced version's words go with the upsert (as forget_episode takes an episode); the new
    version's stay. The turn after the replaced one quoted it, and quotes the turn before once the
    upsert is done (its full-text row written again)."""
    t, session = e.tenant_of(case), "session-upserted"
    ids = e.wm.record_conversation(t, session, [
        {"speaker": "Ann", "text": f"{e.mark('kept', 'upsert.turn.0')} asked", "timestamp": "2026-02-03T10:00:00Z"},
        {"speaker": "Bo", "text": f"{e.mark(case, 'upsert.turn.1')} answered", "timestamp": "2026-02-03T10:01:00Z",
         "metadata": {"note": e.mark(case, "upsert.turn.1.metadata")}},
        {"speaker": "Ann", "text": f"{e.mark('kept', 'upsert.turn.2')} thanked", "timestamp": "2026-02-03T10:02:00Z"}])

    def replace(wm: WorldModel) -> None:  # the new version's words are marked when it is written
        wm.record_experience(t, {"episode_id": ids[1], "agent_id": "Bo", "task_type": "conversation",
                                 "task_description": f"{e.mark('kept', 'upsert.new.text')} answered again",
                                 "outcome": "success", "session_id": session, "timestamp": "2026-02-03T10:01:00Z",
                                 "metadata": {"note": e.mark("kept", "upsert.new.metadata")}}, replace=True)
    e.forget(case, f"upsert {ids[1]}", replace)


def _framework(module: str) -> bool:
    """Whether an adapter's framework is installed (worldgraph[frameworks]); under CI it must be."""
    if importlib.util.find_spec(module) is not None:
        return True
    assert os.environ.get("CI") != "true", f"{module} is not installed: scripts/setup.sh installs the extras"
    return False


@records("LangGraph store items (WorldgraphStore): the value, a put over its key, a delete", "episode", "agent", "tenant")
def langgraph_items(e: Erasure, case: str) -> None:
    if not _framework("langgraph"):
        return
    from worldgraph.integrations.langgraph import WorldgraphStore

    def m(where: str) -> str:
        return e.mark(case, f"langgraph.{where}")
    t, ns = e.tenant_of(case), (e.agent_of(case),)  # the namespace is the agent
    store = WorldgraphStore(e.wm, tenant_id=t)
    store.put(ns, f"pref-{case}", {"text": m("value"), m("value.key"): {"nested": [m("value.nested")]}})
    store.put(ns, f"note-{case}", {"text": m("value.deleted")}, index=["text"])
    if case == "episode":  # a put over the key replaces (an upsert); a delete forgets
        e.forget(case, "langgraph put", lambda wm: WorldgraphStore(wm, tenant_id=t).put(
            ns, f"pref-{case}", {"text": e.mark("kept", "langgraph.value.new")}))
        e.forget(case, "langgraph delete", lambda wm: WorldgraphStore(wm, tenant_id=t).delete(ns, f"note-{case}"))
    else:
        e.forget_as_recorded(case, "")


@records("LangChain chat messages (WorldgraphChatMessageHistory): clear", "session", "tenant")
def langchain_messages(e: Erasure, case: str) -> None:
    if not _framework("langchain_core"):
        return
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from worldgraph.integrations.langchain import WorldgraphChatMessageHistory

    def m(where: str) -> str:
        return e.mark(case, f"langchain.{where}")
    t, chat = e.tenant_of(case), f"langchain-{case}"
    WorldgraphChatMessageHistory(e.wm, t, chat).add_messages([
        HumanMessage(m("human"), name=m("human.name")),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": m("tool_call.args")}, "id": "call-1"}]),
        ToolMessage(m("tool"), tool_call_id="call-1"), AIMessage(m("ai"), additional_kwargs={"x": m("ai.kwargs")})])
    if case == "tenant":
        e.forget_as_recorded(case, "")
    else:
        e.forget(case, chat, lambda wm: WorldgraphChatMessageHistory(wm, t, chat).clear())


@records("Agents SDK session items (WorldgraphSession): pop_item, clear_session", "episode", "session", "tenant")
def agents_items(e: Erasure, case: str) -> None:
    if not _framework("agents"):
        return
    from worldgraph.integrations.openai_agents import WorldgraphSession

    def m(where: str) -> str:
        return e.mark(case, f"agents.{where}")
    t, sid = e.tenant_of(case), f"agents-{case}"
    popped = [{"type": "function_call_output", "call_id": "c1", "output": m("tool_output")}]
    items = [{"role": "user", "content": m("user") if case != "episode" else e.mark("kept", "agents.user")},
             {"type": "function_call", "name": "lookup", "call_id": "c1",
              "arguments": json.dumps({"q": m("call.arguments") if case != "episode" else e.mark("kept", "agents.call")})},
             *popped]
    asyncio.run(WorldgraphSession(e.wm, t, sid).add_items(items))
    how = "pop_item" if case == "episode" else "clear_session"
    if case == "tenant":
        e.forget_as_recorded(case, "")
    else:
        e.forget(case, sid, lambda wm: asyncio.run(getattr(WorldgraphSession(wm, t, sid), how)()))


@records("LlamaIndex memory block messages (WorldgraphMemoryBlock)", "session", "tenant")
def llama_index_messages(e: Erasure, case: str) -> None:
    if not _framework("llama_index"):
        return
    from llama_index.core.llms import ChatMessage

    from worldgraph.integrations.llama_index import WorldgraphMemoryBlock

    t, sid = e.tenant_of(case), f"llamaindex-{case}"
    block = WorldgraphMemoryBlock(model=e.wm, tenant_id=t, session_id=sid)
    asyncio.run(block.aput([ChatMessage(role="user", content=e.mark(case, "llamaindex.user")),
                            ChatMessage(role="assistant", content=e.mark(case, "llamaindex.assistant"))]))
    if case == "tenant":
        e.forget_as_recorded(case, "")
    else:
        e.forget(case, sid, lambda wm: wm.forget_session(t, sid))


# ------------------------------------------------------------------------------------------ the places
@dataclass
class Look:
    """What the places look at: the model, the tenants, a scratch folder, the server, the bucket."""

    wm: WorldModel
    tenants: tuple[str, str]
    data: Path | None  # the data folder (None: nothing of it to read, e.g. a bucket-only index)
    scratch: Path
    server: LiveServer | None = None
    bucket: Callable[[], dict[str, bytes]] | None = None
    markers: list[str] = field(default_factory=list)  # the words looked for


@place("files of the data folder")
def data_files(look: Look) -> Iterator[tuple[str, str]]:
    if look.data is not None:
        for p in look.data.rglob("*"):
            if p.is_file():
                yield str(p.relative_to(look.data)), _text(p.read_bytes())


@place("objects of the index's S3 bucket")
def bucket_objects(look: Look) -> Iterator[tuple[str, str]]:
    if look.bucket is not None:
        for key, blob in look.bucket().items():
            yield f"s3:{key}", _text(blob)


@place("every version of every LanceDB table, rows and full-text index")
def lance_versions(look: Look) -> Iterator[tuple[str, str]]:
    import lance
    import lancedb

    from worldgraph.memory.index import objectstore

    path = look.wm.index.path
    options = objectstore.storage_options(path, 30.0)
    db = lancedb.connect(path, storage_options=options)
    names, token = [], None
    while True:
        page = db.list_tables(page_token=token)
        names += page.tables or []
        token = page.page_token
        if not token:
            break
    for name in names:
        uri = db.open_table(name).to_lance().uri
        for version in lance.dataset(uri, storage_options=options).versions():
            ds = lance.dataset(uri, version=version["version"], storage_options=options)
            table = ds.to_table()
            text_columns = [f.name for f in table.schema if "string" in str(f.type)]
            yield f"{name}@v{version['version']}", json.dumps(table.select(text_columns).to_pylist(), default=str)
            yield f"{name}@v{version['version']} full-text", _full_text(ds, look.markers)


@place("read paths: episodes, agents, API keys, recall, Cypher, world graphs, export")
def read_paths(look: Look) -> Iterator[tuple[str, str]]:
    from worldgraph.server.keys import ApiKeys

    wm = look.wm
    for t in look.tenants:
        episodes = wm.list_episodes(t, limit=1000).items
        yield f"{t} episodes", json.dumps(episodes)
        yield f"{t} neighbourhoods", json.dumps(wm.store.neighborhood(t, [e["id"] for e in episodes]), default=str)
        yield f"{t} agents", json.dumps(wm.list_agents(t))
        yield f"{t} api keys", json.dumps(ApiKeys(wm.store).list(t))
        for n, query in enumerate(_queries(look.markers)):
            hits = wm.recall_experiences(t, None, query, limit=100, options={"min_similarity": 0.0})
            yield f"{t} recall {n}", json.dumps(hits, default=str)
        for label in ("Episode", "Agent", "Canvas", "CanvasAudit", "Feedback", "Scene", "Environment", "Entity",
                      "State", "Rule", "Session"):
            rows = wm.cypher(t, f"MATCH (n:{label} {{tenant_id: $tenant_id}}) RETURN n")
            yield f"{t} cypher {label}", json.dumps(rows, default=str)
        rows = wm.cypher(t, "MATCH (n:WorldNode {tenant_id: $tenant_id})-[r]->(m) RETURN r")
        yield f"{t} cypher relationships", json.dumps(rows, default=str)
        for env in [x["env_name"] for x in wm.list_environments(t)]:
            yield f"{t} world {env}", json.dumps(wm.world_graph(t, env), default=str)
            out = wm.export(t, env, look.scratch / f"export-{uuid.uuid4().hex[:6]}")
            for p in out.iterdir():
                yield f"{t} export {env}/{p.name}", p.read_text(encoding="utf-8")


@place("world search and context: every hit of every environment, and the block")
def world_search(look: Look) -> Iterator[tuple[str, str]]:
    wm = look.wm
    query = " ".join(sorted(look.markers))[:4000]  # within max_query_bytes
    for t in look.tenants:
        hits = wm.search_world(t, query, k=100)
        yield f"{t} search_world", json.dumps([h.model_dump() for h in hits], default=str)
        for h in hits:
            yield f"{t} search_world {h.id} neighbourhood", json.dumps([n.model_dump() for n in h.neighbourhood])
        yield f"{t} context", str(wm.context(t, query, max_tokens=100_000))


@place("the terms a process keeps of the episodes a feedback filter passes (memory/index/passing_text.py)")
def passing_texts(look: Look) -> Iterator[tuple[str, str]]:
    from worldgraph.memory.index.schema import table_name

    wm = look.wm
    for t in look.tenants:  # a recall with a feedback filter first: what it keeps is looked at
        for query in _queries(look.markers):
            wm.recall_experiences(t, None, query, limit=100, options={"min_similarity": 0.0, "min_feedback_score": 0.0})
        texts = wm.index._texts.held(table_name(t))
        if texts is not None:
            yield f"{t} kept terms", " ".join(texts.vocab)


@place("the words a process leaves out of a big table's full-text queries (memory/index/common_terms.py)")
def common_words(look: Look) -> Iterator[tuple[str, str]]:
    from worldgraph.memory.index.schema import table_name

    for t in look.tenants:  # sampled by the recalls before (the mirror case: any word of 2+ rows is common)
        held = look.wm.index._common.held(table_name(t))
        if held:
            yield f"{t} common terms", " ".join(held)


@place("the kept answers of idempotent writes, in the store (on Neo4j outside the data folder)")
def idempotent_records(look: Look) -> Iterator[tuple[str, str]]:
    store = look.wm.store
    if store.name == "neo4j":
        rows = store.db.read(lambda tx: [dict(r["k"]) for r in tx.run(
            "MATCH (k:IdempotencyKey) WHERE k.tenant_id IN $tenants RETURN k", tenants=list(look.tenants))])
    else:
        rows = store.db.query("SELECT tenant_id, key, answer, refs FROM idempotency")
    yield "idempotency", json.dumps(rows, default=str)


@place("a running server: its REST reads and the files it and its children hold open")
def running_server(look: Look) -> Iterator[tuple[str, str]]:
    srv = look.server
    if srv is None:
        return
    key = srv.key
    recalls = [("/v1/recall", {"query": q, "limit": 100, "options": {"min_similarity": 0}})
               for q in _queries(look.markers)]
    for path, body in (("/v1/episodes?limit=1000", None), ("/v1/agents", None), ("/v1/envs", None), *recalls,
                       ("/v1/cypher", {"query": "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e"}),
                       ("/v1/cypher", {"query": "MATCH (n:WorldNode {tenant_id: $tenant_id}) RETURN n"}),
                       ("/v1/envs/Cellar/graph", None)):
        r = (httpx.post(srv.url + path, json=body, headers=srv.headers(key), timeout=120) if body is not None
             else httpx.get(srv.url + path, headers=srv.headers(key), timeout=120))
        yield f"server {path}", r.text
    if srv.proc is not None and Path("/proc/self/fd").is_dir():
        for pid, target, blob in open_files(process_tree(srv.proc.pid), srv.data):
            yield f"server pid {pid} holds {target}", _text(blob)


def _queries(markers: list[str]) -> list[str]:
    """The markers as recall queries, each within max_query_bytes (4 KiB)."""
    per = 150  # 17-byte words and their spaces: 2.7 KiB a query
    return [" ".join(markers[i:i + per]) for i in range(0, len(markers), per)]


def _text(blob: bytes) -> str:
    """Bytes as text a marker is looked for in: as UTF-8, as UTF-16 (either byte order), lower case."""
    parts = [blob.decode("utf-8", "replace")]
    for codec in ("utf-16-le", "utf-16-be"):
        parts.append(blob.decode(codec, "replace"))
        parts.append(blob[1:].decode(codec, "replace"))  # a UTF-16 string at an odd offset
    return "\n".join(parts)


def _full_text(ds: Any, markers: list[str]) -> str:
    """The rows a dataset's full-text index finds for the markers (lower-cased as it indexes them)."""
    found = []
    for word in markers:
        try:
            rows = ds.to_table(full_text_query=word.lower(), columns=["text"]).column("text").to_pylist()
        except Exception:  # noqa: BLE001 - a table without a full-text index
            return ""
        if rows:
            found.append(f"{word}: {rows}")
    return "\n".join(found)


# ------------------------------------------------------------------------------------------ the test
def look_everywhere(look: Look) -> dict[str, list[str]]:
    """marker -> the places (name: where) that hold it."""
    seen: dict[str, list[str]] = {m: [] for m in look.markers}
    for name, look_at in PLACES:
        for where, text in look_at(look):
            low = text.lower()
            for m in look.markers:
                if m.lower() in low:
                    seen[m].append(f"{name}: {where}")
    return seen


def check(e: Erasure, look: Look, forgotten: set[str], moment: str) -> None:
    look.markers = list(e.markers)
    seen = look_everywhere(look)
    leaks = {f"{m} ({e.markers[m][1]}, forgotten by {e.markers[m][0]})": places[:3]
             for m, places in seen.items() if e.markers[m][0] in forgotten and places}
    assert not leaks, f"{moment}: forgotten words still found: {leaks}"
    lost = [f"{m} ({e.markers[m][1]}, {e.markers[m][0]})" for m, places in seen.items()
            if e.markers[m][0] not in forgotten and not places]
    assert not lost, f"{moment}: words not forgotten are gone: {lost}"


@pytest.fixture(params=["embedded", "mirror", "s3", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    if request.param == "mirror":  # every table searched through its mirror, an id filter's text in process
        from worldgraph.memory.index import common_terms, search

        monkeypatch.setattr(search, "WIDE_TEXT_FETCH", 0)
        monkeypatch.setattr(common_terms, "MIN_SAMPLED", 1)  # and each word of 2+ rows left out (common_terms.py)
        return {"mirror_min_rows": 1, "fulltext_common_rows": 1}
    if request.param == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        return {"graph": "neo4j", "neo4j_uri": server["uri"], "neo4j_user": server["user"],
                "neo4j_password": server["password"]}
    if request.param == "s3":
        return {"s3": request.getfixturevalue("s3_env")}
    return {}


@pytest.mark.slow
@pytest.mark.timeout(900)  # every place looked at 8 times (the S3 bucket and Neo4j too): minutes on a loaded host
def test_every_copy_of_the_words_goes_with_every_forget(tmp_path: Path, store: dict[str, Any],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.kg.embedded.cypher import opener

    monkeypatch.setattr(opener, "SAVE_MIN_ROWS", 0)  # a small tenant's projection is saved to a file too
    s3 = store.pop("s3", None)
    kw: dict[str, Any] = {**store, "embedding_provider": "hashing"}
    if s3 is not None:
        kw["lancedb_path"] = s3["uri"]
    data = tmp_path / "data"
    tenant, gone = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    wm = WorldModel.open(data, **kw)
    server = None
    try:
        e = Erasure(wm, tenant, gone)
        for _name, cases, write in INPUTS:
            for case in cases:
                write(e, case)
        assert set(e.forgets) == set(CASES), "every way of forgetting has something to forget"
        wm.index.ensure_indexes(vector=False)  # the full-text index holds the words too
        if not store and s3 is None:  # a running server on the same folder, with its key for the tenant
            env = {"WORLDGRAPH_EMBEDDING_PROVIDER": "hashing"}
            server = LiveServer(tmp_path, tenant=tenant, env=env).__enter__()
        look = Look(wm, (tenant, gone), data, tmp_path, server,
                    _bucket(s3) if s3 is not None else None)
        check(e, look, set(), "before any forget")  # every word is found: the places see them
        forgotten: set[str] = set()
        for case in CASES:
            for how in e.forgets[case].values():
                how(wm)
            wm.purge()
            forgotten.add(case)
            check(e, look, forgotten, f"after forgetting by {case} and purging")
        if server is not None:
            server.stop()
            server = None
        wm.close()
        wm = WorldModel.open(data, **kw)  # a new process opens the folder: nothing comes back
        e.wm = look.wm = wm
        look.server = None
        check(e, look, forgotten, "after opening the folder again")
    finally:
        if server is not None:
            server.stop()
        wm.close()


def _bucket(s3: dict[str, Any]) -> Callable[[], dict[str, bytes]]:
    from tests.unit.service.test_forget import _bucket_objects

    return lambda: _bucket_objects(s3)


def test_the_registry_covers_every_input_and_forget() -> None:
    """Each way of forgetting has an input; each input names its cases."""
    assert {c for _, cases, _ in INPUTS for c in cases} == set(CASES)
    assert {name for name, _ in PLACES} >= {"files of the data folder", "objects of the index's S3 bucket",
                                            "every version of every LanceDB table, rows and full-text index"}
    assert os.name != "posix" or Path("/proc/self/fd").is_dir()
