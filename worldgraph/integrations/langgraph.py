"""worldgraph as a LangGraph store: ``WorldgraphStore``, a ``langgraph.store.base.BaseStore``
(``pip install 'worldgraph[langgraph]'``), so ``create_react_agent(..., store=WorldgraphStore(...))``
and LangMem's memory tools keep their memories in worldgraph, searched as worldgraph recalls.

    from worldgraph import WorldModel
    from worldgraph.integrations.langgraph import WorldgraphStore

    store = WorldgraphStore(WorldModel.open("./data"), tenant_id="acme")
    store.put(("memories", "user-1"), "m1", {"text": "prefers window seats"})
    store.search(("memories", "user-1"), query="seating preference")

How an item is kept (docs/frameworks/langgraph.md): one episode per (namespace, key), its id
derived from them (``stable_id``), so a put over an existing key is a ``record_experience(...,
replace=True)``: the old value is forgotten as ``forget_episode`` forgets (its words gone after
purge), and a delete is a forget. The namespace is the episode's agent (``agent_id`` = its labels
joined by ".", which LangGraph forbids inside a label), ``agent_role`` the store's role; the value
is the episode's metadata, verbatim, beside the namespace and the key. The text embedded is the
value's ``fields`` (LangGraph's paths; ``"$"``, the default, is the whole value as JSON), or the
put's ``index``; ``index=False`` keeps the item out of searches with a query.

``search`` with a query is ``recall_experiences`` (ranked by worldgraph's score; ``score`` is the
relevance score), with the namespace prefix and the filter pushed into the search as metadata
conditions; without one, the newest items first. The tenant is the one given here: no namespace
can reach another tenant's data.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import get_text_at_path, tokenize_path

from worldgraph import AsyncWorldModel, InvalidInputError, NotFoundError, WorldModel
from worldgraph.integrations.common import Steps, arun, bind, call, run, stable_id

__all__ = ["ROLE", "TASK_TYPE", "WorldgraphStore"]

ROLE = "langgraph"  # the agent_role of a store's items (one store per role: WorldgraphStore(agent_role=))
TASK_TYPE = "langgraph_item"
TEXT_MAX_CHARS = 16_000  # the text embedded of one item (a long value is cut; the value itself is whole)
RECALL_MAX = 1_000  # offset + limit of a search with a query (recall's own limit)
PAGE = 1_000  # episodes read per step of a search without a query


class WorldgraphStore(BaseStore):
    """A LangGraph ``BaseStore`` over one tenant of a worldgraph model (see the module docstring).

    Args:
        model: a ``WorldModel`` or an ``AsyncWorldModel`` (the async methods await the latter).
        tenant_id: every item of this store belongs to it.
        agent_role: the role of the store's items; two stores with other roles in one tenant are
            apart (their namespaces, searches and listings).
        fields: the paths of a value whose text is embedded (LangGraph's ``IndexConfig.fields``).
    """

    supports_ttl = False

    def __init__(self, model: WorldModel | AsyncWorldModel, tenant_id: str, *, agent_role: str = ROLE,
                 fields: Iterable[str] = ("$",)) -> None:
        self.model, self.amodel, self.tenant_id = bind(model, tenant_id)
        if not isinstance(agent_role, str) or not agent_role:
            raise InvalidInputError("agent_role", "must be a non-empty string")
        self.agent_role = agent_role
        self.fields = [(f, f if f == "$" else tokenize_path(f)) for f in fields]

    # ------------------------------------------------------------------ the protocol
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return run(self._batch(list(ops)), self.model)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await arun(self._batch(list(ops)), self.amodel)

    def _batch(self, ops: list[Op]) -> Steps[list[Result]]:
        """Every op in order; consecutive puts are written together (one record call)."""
        results: list[Result] = []
        puts: list[PutOp] = []
        for op in [*ops, None]:
            if isinstance(op, PutOp):
                puts.append(op)
                results.append(None)
                continue
            if puts:
                yield from self._put(puts)
                puts = []
            if op is None:
                break
            if isinstance(op, GetOp):
                results.append((yield from self._get(op)))
            elif isinstance(op, SearchOp):
                results.append((yield from self._search(op)))
            elif isinstance(op, ListNamespacesOp):
                results.append((yield from self._list_namespaces(op)))
            else:
                raise InvalidInputError("ops", f"unknown operation {type(op).__name__}")
        return results

    # ------------------------------------------------------------------ get / put / delete
    def _get(self, op: GetOp) -> Steps[Item | None]:
        episode_id = self._episode_id(op.namespace, op.key)
        try:
            episode = yield call("get_episode", self.tenant_id, episode_id)
        except NotFoundError:
            return None
        item = self._item(episode)
        return item if item is not None and (item.namespace, item.key) == (tuple(op.namespace), op.key) else None

    def _put(self, ops: list[PutOp]) -> Steps[None]:
        last = {(tuple(op.namespace), op.key): op for op in ops}  # the last put of a key wins
        writes = [self._experience(op) for op in last.values() if op.value is not None]
        for op in last.values():
            if op.value is None:
                try:
                    yield call("forget_episode", self.tenant_id, self._episode_id(op.namespace, op.key),
                               forgotten_by="langgraph store delete")
                except NotFoundError:
                    pass  # deleting what is not there is done
        if writes:
            yield call("record_experiences", self.tenant_id, writes, replace=True)

    def _experience(self, op: PutOp) -> dict[str, Any]:
        namespace = check_namespace(op.namespace)
        if not isinstance(op.key, str):
            raise InvalidInputError("key", f"must be a string, got {type(op.key).__name__}")
        if not isinstance(op.value, dict):
            raise InvalidInputError("value", f"must be a dict, got {type(op.value).__name__}")
        texts: list[str] = []
        if op.index is not False:
            paths = self.fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
            for _, path in paths:
                texts.extend(t for t in get_text_at_path(op.value, path) if t)
        text = "\n".join(texts)[:TEXT_MAX_CHARS]
        return {"episode_id": self._episode_id(namespace, op.key), "agent_id": ".".join(namespace),
                "agent_role": self.agent_role, "task_type": TASK_TYPE, "outcome": "success",
                "task_description": text.strip() or f"{'.'.join(namespace)} {op.key}",
                "metadata": {"namespace": list(namespace), "ns": {str(i): label for i, label in enumerate(namespace)},
                             "key": op.key, "value": op.value, "indexed": bool(text.strip())}}

    # ------------------------------------------------------------------ search
    def _search(self, op: SearchOp) -> Steps[list[SearchItem]]:
        prefix = tuple(op.namespace_prefix)
        if op.limit <= 0 or op.offset < 0:
            return []
        conditions: dict[str, Any] = {"value": value_filter(op.filter)} if op.filter else {}
        if op.query and any(ch.isalnum() for ch in op.query):
            if op.offset + op.limit > RECALL_MAX:
                raise InvalidInputError("offset", f"offset + limit is at most {RECALL_MAX} for a search with a query")
            if prefix:
                conditions["ns"] = {str(i): label for i, label in enumerate(prefix)}
            conditions["indexed"] = True
            hits = yield call("recall_experiences", self.tenant_id, self.agent_role, op.query, op.offset + op.limit,
                              options={"metadata": conditions, "min_similarity": -1.0})
            return [self._item(h, score=h["relevance_score"]) for h in hits[op.offset:]]
        # Without a query: the newest items of every namespace under the prefix (each namespace is
        # an agent: its episodes are read newest first by the store's own index), merged.
        namespaces = [ns for ns in (yield from self._namespaces()) if ns[:len(prefix)] == prefix]
        found: list[Any] = []
        for ns in namespaces:
            found.extend((yield from self._newest(".".join(ns), conditions, op.offset + op.limit)))
        found.sort(key=lambda e: (e["ts"], e["id"]), reverse=True)
        return [self._item(e) for e in found[op.offset:op.offset + op.limit]]

    def _newest(self, agent_id: str, conditions: dict[str, Any], n: int) -> Steps[list[Any]]:
        out: list[Any] = []
        cursor = None
        while len(out) < n:
            page = yield call("list_episodes", self.tenant_id, agent_id=agent_id, limit=min(PAGE, n - len(out)),
                              cursor=cursor, metadata=conditions or None)
            out.extend(e for e in page.items if e.get("task_type") == TASK_TYPE)
            cursor = page.next_cursor
            if cursor is None:
                break
        return out

    # ------------------------------------------------------------------ namespaces
    def _namespaces(self) -> Steps[list[tuple[str, ...]]]:
        agents = yield call("list_agents", self.tenant_id)
        return sorted(tuple(a["agent_id"].split(".")) for a in agents if a["agent_role"] == self.agent_role)

    def _list_namespaces(self, op: ListNamespacesOp) -> Steps[list[tuple[str, ...]]]:
        namespaces = [ns for ns in (yield from self._namespaces())
                      if all(matches(condition, ns) for condition in op.match_conditions or ())]
        if op.max_depth is not None:
            namespaces = sorted({ns[:op.max_depth] for ns in namespaces})
        return namespaces[op.offset:op.offset + op.limit]

    # ------------------------------------------------------------------ items
    def _episode_id(self, namespace: tuple[str, ...], key: str) -> str:
        return stable_id("lg", self.agent_role, *namespace, str(key))

    @staticmethod
    def _item(episode: Any, score: float | None = None) -> Any:
        meta = episode.get("metadata") or {}
        if "namespace" not in meta or "key" not in meta:
            return None
        at = datetime.fromisoformat(episode["timestamp"])
        fields = {"namespace": tuple(meta["namespace"]), "key": meta["key"], "value": meta.get("value") or {},
                  "created_at": at, "updated_at": at}
        return Item(**fields) if score is None else SearchItem(**fields, score=float(score))


def check_namespace(namespace: Any) -> tuple[str, ...]:
    """A namespace an item may be written to: a non-empty tuple of non-empty labels without "."
    (they are joined by "." into the episode's agent id)."""
    if not isinstance(namespace, tuple) or not namespace:
        raise InvalidInputError("namespace", "must be a non-empty tuple of strings, e.g. ('memories', 'user-1')")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label:
            raise InvalidInputError("namespace", f"labels must be non-empty strings without '.', got {label!r}")
    return namespace


def value_filter(flt: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's filter as a metadata condition on the value: a dotted key ("user.level") is a
    nested field; operators and nested objects are worldgraph's (the same as LangGraph's)."""
    out: dict[str, Any] = {}
    for key, cond in flt.items():
        parts = key.split(".") if isinstance(key, str) and not key.startswith("$") else [key]
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InvalidInputError(f"filter.{key}", "conflicts with another condition on the same field")
        node[parts[-1]] = cond
    return out


def matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's namespace match: a prefix or suffix whose "*" labels match any label."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    labels = namespace[:len(path)] if condition.match_type == "prefix" else namespace[len(namespace) - len(path):]
    return all(p == "*" or p == label for p, label in zip(path, labels))
