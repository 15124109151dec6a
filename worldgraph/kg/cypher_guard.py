"""Why ``cypher()`` cannot see other tenants: the query plan is the proof.

A tenant's exploration query is never trusted for what its text says. Before it runs, Neo4j
plans it (``EXPLAIN`` with the same parameters, in the same READ transaction) and this module
walks the plan tree. The query runs only if every operator is on an allow-list:

* **Where rows start.** The only operators that may read the graph from nothing are node index
  seeks on an index of a worldgraph label (``neo4j.queries.TENANT_LABELS``) whose first property is
  ``tenant_id``, with that property bound by equality to exactly ``$tenant_id`` -- not a literal,
  a variable, an expression, a range, a prefix or an ``IN`` list. ``$tenant_id`` is always the
  caller's tenant: ``bind_params`` puts it there and refuses params that try to set it. So every
  node such a seek yields belongs to the caller.
  A seek's ``Details`` read ``UNIQUE e:Episode(tenant_id, id) WHERE tenant_id = $tenant_id AND
  id = $x, cache[e.id]``; it is parsed from the start (Neo4j quotes odd variable names in
  backticks and doubles the ones inside, so a variable cannot imitate the rest), and the tenant
  predicate must be followed by nothing, ``, cache[`` or `` AND <next index property> ``.
* **Or a scan the next step pins.** A node index or label scan, or a relationship type scan,
  whose parent is a Filter with the top-level term ``v.tenant_id = $tenant_id`` for the scanned
  node (or an end of the scanned relationship): only the caller's rows leave the Filter. Neo4j
  plans a scoped pattern so when its statistics give the tenant index a single value (a
  database holding one tenant, or a fresh one), where a seek costs the same as the scan.
* **How rows grow.** Everything else must be an operator that reads the graph only through the
  nodes and relationships already in its rows: expansions (``Expand``, ``VarLengthExpand``,
  ``ShortestPath``, ``Repeat(Trail)``, ...), filters, projections, joins, unions, sorts,
  aggregations, ``Apply`` and its variants (whose right side starts from ``Argument``, the row of
  the left side). No relationship joins two tenants (see ``neo4j.queries``; a test checks it on
  stored data), so an expansion from a node of the caller stays inside the caller's tenant.
  By induction every node and relationship a row can hold is the caller's, and every other value
  is computed from them, from literals and from parameters.
* **What is refused.** Label, all-node, relationship and full index scans; seeks by id or
  elementId (an id says nothing about its tenant); count-store reads (``NodeCountFromCountStore``
  counts every tenant); procedures (``db.*``, ``dbms.*``, ``apoc.*``: they run code the plan does
  not show); ``LOAD CSV``; ``SHOW`` and administration commands; writes; any operator not on the
  list, so an operator a later Neo4j adds is refused until someone reads what it does.
* **What the tree does not show.** A subquery expression that cannot be planned as an ``Apply``
  (``COUNT {}``, ``EXISTS {}``, ``COLLECT {}`` or a pattern comprehension inside ``CASE``,
  ``coalesce``, a list predicate ...) becomes a nested plan that appears only as text in its
  operator's ``Details``; such text is refused, since its seeks cannot be checked. User-defined
  functions (``apoc.cypher.runFirstColumn`` runs arbitrary Cypher) appear only as calls in
  ``Details`` too: a namespaced call must be a built-in function (Neo4j puts every user-defined
  function in a namespace). Operators must run on the session's database (the ``@db`` suffix).

Any other plan of the same query computes the same rows (the planner may only choose a seek for
a predicate the query states), so re-planning between the check and the run does not matter.
The READ transaction stays as a second wall against writes, the results are checked once more
(a node or relationship of another tenant refuses the whole result), and ``check_text`` refuses
the obvious cases with a clearer message before anything is sent. It is not the proof.

What this costs, and what it does not cover: a query whose planner chose another index for a node (e.g. ``Episode(ts)`` for
``WHERE f.ts > e.ts``) is refused although it filters on ``$tenant_id`` later; the message says to
add ``USING INDEX f:Episode(tenant_id)``. Whether a plan is accepted depends on database-wide
statistics only through the planner's choice of index, and ``id()`` / ``elementId()`` of the
caller's own nodes are database-wide counters: both hint at the size of the database, never at a
record. A tenant can still spend the server's time and memory on its own data, and on scanning
(never seeing) other tenants' nodes of a label by forcing a pinned scan (``USING SCAN``); the
timeout and the row cap bound the time, Neo4j's ``db.memory.transaction.max`` (server config)
the memory.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from worldgraph.errors import ReadOnlyQueryError, TenantScopeError
from worldgraph.kg.cypher_lexer import LexError, tokens, words
from worldgraph.kg.neo4j import queries as q

TENANT_PARAM = "tenant_id"
HOW = ("give every labelled node of a pattern {tenant_id: $tenant_id}, e.g. "
       "MATCH (e:Episode {tenant_id: $tenant_id})-[:PERFORMED_BY]->(a:Agent {tenant_id: $tenant_id})")


# ----------------------------------------------------------------------------- parameters
def bind_params(tenant_id: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The query's parameters with ``$tenant_id`` bound to the caller; a caller may not set it.

    A key that only looks like ``tenant_id`` (other case, full-width letters, spaces) is refused
    too: it names another parameter, and a query using it would only be refused later."""
    out = dict(params or {})
    for key in out:
        if not isinstance(key, str):
            raise ReadOnlyQueryError(f"params keys must be strings, got {key!r}")
        if key == TENANT_PARAM:
            if out[key] != tenant_id:
                raise TenantScopeError(
                    f"params may not set tenant_id: it is always the caller's tenant ({tenant_id!r}), "
                    "passed as $tenant_id")
        elif unicodedata.normalize("NFKC", key).strip().casefold() == TENANT_PARAM:
            raise TenantScopeError(f"params may not hold {key!r}: the tenant is $tenant_id, which is bound for you")
    out[TENANT_PARAM] = tenant_id
    return out


# ----------------------------------------------------------------------------- text (early, clear refusals)
_WRITE_WORDS = ("CREATE", "MERGE", "DELETE", "DETACH", "SET", "REMOVE", "DROP", "FOREACH", "LOAD",
                "TRANSACTIONS", "ALTER", "RENAME", "GRANT", "DENY", "REVOKE", "TERMINATE", "SHOW", "USE",
                "EXPLAIN", "PROFILE", "CYPHER")


def check_text(query: str) -> None:
    """Refuse, before anything is sent, what is plainly not a tenant's read: a write, an
    administration or file clause, a procedure call, an EXPLAIN / PROFILE / CYPHER prefix.

    The words are the query's tokens (``cypher_lexer``, as the engine splits them: ``1CREATE`` is
    ``1`` then ``CREATE``); strings, backticked names, comments, properties (``n.set``), labels and
    parameters are names, not keywords. A convenience (a clear message naming the clause), not
    the proof: ``check_plan`` decides."""
    if not isinstance(query, str) or not query.strip():
        raise ReadOnlyQueryError("query must be a non-empty Cypher string")
    try:
        toks = words(tokens(query, strict=False))
    except LexError as exc:
        raise ReadOnlyQueryError(f"cypher() cannot read this query: {exc}") from None
    for i, tok in enumerate(toks):
        before = toks[i - 1].text if i else ""
        after = toks[i + 1].text if i + 1 < len(toks) else ""
        if tok.kind != "name" or before in (".", ":", "$") or after == ":":
            continue  # a property, a label, a map key: a name
        word = tok.text.upper()
        if word in _WRITE_WORDS:
            if word in ("EXPLAIN", "PROFILE", "CYPHER"):
                raise ReadOnlyQueryError(
                    f"cypher() plans and runs the query itself: drop the {word} prefix (options and "
                    "plans are not available to exploration queries)")
            what = "LOAD CSV" if word == "LOAD" else ("CALL ... IN TRANSACTIONS" if word == "TRANSACTIONS" else word)
            raise ReadOnlyQueryError(
                f"cypher() is read-only: {what} is not allowed (clauses that write, load files or administer "
                "the database are refused). Use the WorldModel API to change data.")
        if word == "CALL" and after not in ("{", "("):  # CALL { ... } / CALL (x) { ... }: checked by the plan
            raise ReadOnlyQueryError(
                f"cypher() runs no procedures (got CALL {after or '?'}): they read the database outside "
                "the caller's tenant, and the plan cannot show what they do")


# ----------------------------------------------------------------------------- the plan (the proof)
# Operators that read the graph only through entities already in their rows, or not at all.
_ROW_OPERATORS = frozenset({
    "ProduceResults", "Projection", "Filter", "Limit", "ExhaustiveLimit", "Skip", "Sort", "PartialSort", "Top",
    "Top1WithTies", "PartialTop", "Distinct", "OrderedDistinct", "EagerAggregation", "OrderedAggregation",
    "Unwind", "CacheProperties", "Eager", "EmptyResult", "Argument", "Optional", "Anti", "NullifyMetadata",
    "Apply", "SemiApply", "AntiSemiApply", "LetSemiApply", "LetAntiSemiApply", "SelectOrSemiApply",
    "SelectOrAntiSemiApply", "LetSelectOrSemiApply", "LetSelectOrAntiSemiApply", "ConditionalApply",
    "AntiConditionalApply", "RollUpApply", "CartesianProduct", "NodeHashJoin", "ValueHashJoin",
    "NodeLeftOuterHashJoin", "NodeRightOuterHashJoin", "Union", "OrderedUnion", "ProjectEndpoints",
    "TriadicSelection", "TriadicBuild", "TriadicFilter",
})
# Expansions from bound nodes; any variant: Expand(All), VarLengthExpand(Pruning,BFS,All), ...
_EXPANSIONS = frozenset({"Expand", "OptionalExpand", "VarLengthExpand", "ShortestPath", "StatefulShortestPath",
                         "Repeat", "BFSPruningVarExpand"})
_SEEKS = frozenset({"NodeIndexSeek", "NodeUniqueIndexSeek", "NodeIndexSeekByRange", "NodeUniqueIndexSeekByRange"})
# "RANGE INDEX e:Episode(tenant_id, id) WHERE tenant_id = $tenant_id AND id = $x, cache[e.id]"
_SEEK_RE = re.compile(r"(?:UNIQUE|RANGE INDEX|INDEX) (?P<var>[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`):"
                      r"(?P<label>[A-Za-z_][A-Za-z0-9_]*)\((?P<props>[A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*)\)"
                      r" WHERE (?P<preds>.*)\Z", re.S)
_SCANNED_RE = re.compile(r"(?P<var>[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)+`)(?::(?P<label>[A-Za-z_][A-Za-z0-9_]*))?\Z")
_NESTED_RE = re.compile(r"\b(?:EXISTS|COUNT|COLLECT)\s*\{|\bMATCH\b|NestedPlan", re.I)
_NAME = r"(?:[A-Za-z_][A-Za-z0-9_]*|`(?:[^`]|``)*`)"
_CALL_IN_DETAILS_RE = re.compile(rf"(?<![\w.`$]){_NAME}(?:\s*\.\s*{_NAME})*(?=\s*\()")
# Namespaced built-in functions of Neo4j 5.26 (SHOW FUNCTIONS); none of them reads the graph.
_BUILTIN_NAMESPACED = frozenset(
    [f"{ns}.{fn}" for ns in ("date", "localtime", "time", "localdatetime", "datetime")
     for fn in ("realtime", "statement", "transaction", "truncate")]
    + ["datetime.fromepoch", "datetime.fromepochmillis", "duration.between", "duration.indays",
       "duration.inmonths", "duration.inseconds", "point.distance", "point.withinbbox",
       "vector.similarity.cosine", "vector.similarity.euclidean"])
_WHY = {
    "NodeByLabelScan": "reads every node of a label, of every tenant",
    "AllNodesScan": "reads every node of the database",
    "NodeIndexScan": "reads a whole index, of every tenant",
    "NodeIndexContainsScan": "reads a whole index, of every tenant",
    "NodeIndexEndsWithScan": "reads a whole index, of every tenant",
    "NodeByIdSeek": "finds nodes by id, which says nothing about their tenant",
    "NodeByElementIdSeek": "finds nodes by elementId, which says nothing about their tenant",
    "NodeCountFromCountStore": "counts from the database-wide count store (every tenant)",
    "RelationshipCountFromCountStore": "counts from the database-wide count store (every tenant)",
    "ProcedureCall": "calls a procedure, which reads outside the caller's tenant",
    "LoadCSV": "loads a file",
}


# Scans a Filter right above them may pin to the caller (``_pinned_scans``). Not AllNodesScan
# nor scans of every relationship: a pattern without a label or type is refused, as it says.
_NODE_SCANS = frozenset({"NodeIndexScan", "NodeByLabelScan", "NodeIndexContainsScan", "NodeIndexEndsWithScan"})
_REL_SCANS = frozenset({"DirectedRelationshipTypeScan", "UndirectedRelationshipTypeScan"})
# "(a)-[anon_0:NEXT]->(b)", "(a)-[r:NEXT]-(b)"
_REL_SCANNED_RE = re.compile(rf"\((?P<a>{_NAME})\)-\[{_NAME}:[A-Za-z_][A-Za-z0-9_]*\]->?\((?P<b>{_NAME})\)\Z")


def _pinned_scans(plan: Mapping[str, Any]) -> set[int]:
    """The scans (``id()`` of their operator) whose every row goes straight into a Filter that keeps
    only the caller's: the Filter is the scan's parent, and one of its top-level ``AND`` terms is
    ``v.tenant_id = $tenant_id`` for the scanned node, of a label in ``TENANT_LABELS`` (or for
    either end of a scanned relationship: no relationship joins two tenants, as for expansions).
    The rows above the Filter are then the caller's as surely as a seek's. This is how Neo4j
    plans a scoped pattern when its statistics say the tenant index holds a single value (a
    database with one tenant, or a fresh one): an index or type scan and a Filter, not a seek.
    A predicate with a top-level ``OR`` / ``XOR`` pins nothing."""
    pinned: set[int] = set()
    for op in _walk(plan):
        children: list[Mapping[str, Any]] = list(op.get("children") or ())
        if _operator(op)[0] != "Filter" or len(children) != 1:
            continue
        child = children[0]
        name, details = _operator(child)[0], _details(child)
        if name in _NODE_SCANS:
            m = _SEEK_RE.match(details) if name != "NodeByLabelScan" else _SCANNED_RE.match(details)
            # as for seeks, only the labels a tenant explores (not ApiKey, say)
            ends = [m.group("var")] if m is not None and m.group("label") in q.TENANT_LABELS else []
        elif name in _REL_SCANS:
            m = _REL_SCANNED_RE.match(details)
            ends = [m.group("a"), m.group("b")] if m is not None else []
        else:
            continue
        terms = _conjuncts(_details(op))
        if terms and any(term in terms for v in ends for term in (
                f"{v}.{TENANT_PARAM} = ${TENANT_PARAM}", f"cache[{v}.{TENANT_PARAM}] = ${TENANT_PARAM}",
                f"${TENANT_PARAM} = {v}.{TENANT_PARAM}", f"${TENANT_PARAM} = cache[{v}.{TENANT_PARAM}]")):
            pinned.add(id(child))
    return pinned


_KEYWORD_RE = re.compile(r"(?:AND|X?OR)(?![\w$])", re.I)


def _conjuncts(predicate: str) -> set[str]:
    """The top-level ``AND`` terms of a Filter's predicate; none if it has a top-level ``OR`` or
    ``XOR`` (which bind looser than ``AND``). Brackets, quoted strings and backticked names are
    skipped whole, so words inside them do not count."""
    terms, depth, start, i, n = set(), 0, 0, 0, len(predicate)
    while i < n:
        ch = predicate[i]
        if ch in "'\"`":
            i += 1
            while i < n and predicate[i] != ch:
                i += 2 if predicate[i] == "\\" and ch != "`" else 1
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and ch.isspace():
            word = _KEYWORD_RE.match(predicate, i + 1)  # matched in place: the walk stays linear
            if word is not None and word.group(0).upper() in ("OR", "XOR"):
                return set()
            if word is not None:  # AND
                terms.add(predicate[start:i].strip())
                start = word.end()
                i = word.end() - 1
        i += 1
    terms.add(predicate[start:].strip())
    return terms


def check_plan(plan: Mapping[str, Any] | None, database: str, query_type: str | None = "r") -> None:
    """Refuse the query unless its plan provably reads only the caller's tenant (module docstring).

    ``plan`` is ``ResultSummary.plan`` of the query's EXPLAIN, ``query_type`` its ``query_type``."""
    if query_type != "r":
        raise ReadOnlyQueryError(f"cypher() runs only read queries; Neo4j classes this one as {query_type!r} "
                                 "(w: write, rw: read-write, s: schema or administration)")
    if not plan:
        raise TenantScopeError("Neo4j gave no plan for this query, so cypher() cannot check it; " + HOW)
    pinned = _pinned_scans(plan)
    for op in _walk(plan):
        name, db = _operator(op)
        if db is not None and db != database:
            raise TenantScopeError(f"the query runs on database {db!r}; cypher() runs only on {database!r} "
                                   "(drop the USE clause)")
        details = _details(op)
        row_operator = name in _ROW_OPERATORS or name.split("(")[0] in _EXPANSIONS or id(op) in pinned
        if not row_operator and name not in _SEEKS:
            raise TenantScopeError(f"the query's plan step {name} ({_short(details) or 'no details'}) "
                                   f"{_why(name)}; {_fix(name, details)}")
        if _NESTED_RE.search(details):
            raise TenantScopeError(
                f"{name} evaluates a subquery the plan does not show ({_short(details)}); cypher() cannot "
                "check it. Move it into CALL (x) { ... } or an OPTIONAL MATCH, or write it outside "
                "CASE / coalesce / list predicates so Neo4j plans it as a step")
        for call in _CALL_IN_DETAILS_RE.findall(details):
            fn = re.sub(r"[`\s]", "", call).lower()
            if "." in fn and fn not in _BUILTIN_NAMESPACED:
                raise TenantScopeError(f"cypher() calls only built-in functions; {call}() is not one "
                                       "(user-defined functions can run any query)")
        if name in _SEEKS:
            _check_seek(name, details)


def _why(name: str) -> str:
    if name.endswith("Scan") or "RelationshipBy" in name or "RelationshipIndex" in name:
        return _WHY.get(name, "scans the database across tenants")
    if name.startswith(("Show", "Terminate")) or name == "AdministrationCommand":
        return "is an administration command"
    return _WHY.get(name, "is not on cypher()'s allow-list of read operators")


def _fix(name: str, details: str) -> str:
    """What to write instead; for a scanned node, that node scoped."""
    if "IdSeek" in name:
        return "look nodes up by their id property instead: (e:Episode {tenant_id: $tenant_id, id: $id})"
    if "CountFromCountStore" in name:
        return "count the rows of a scoped pattern: MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e)"
    if name in ("ProcedureCall", "LoadCSV") or name.startswith(("Show", "Terminate")) or name == "AdministrationCommand":
        return "cypher() only reads the caller's graph with MATCH (the graph model: docs/cypher.md)"
    m = _SCANNED_RE.match(details) if name in ("NodeByLabelScan", "AllNodesScan") else None
    if m is None:
        return HOW
    var, label = m.group("var"), m.group("label")
    if label is None:
        return (f"give {var} a label and {{tenant_id: $tenant_id}}, as in ({var}:Episode {{tenant_id: $tenant_id}}), "
                "or reach it from such a node")
    return (f"give {var} {{tenant_id: $tenant_id}}, as in ({var}:{label} {{tenant_id: $tenant_id}}): Neo4j may "
            "start from any labelled node of a pattern, so scope each one")


def _check_seek(name: str, details: str) -> None:
    m = _SEEK_RE.match(details)
    if m is None:
        raise TenantScopeError(f"cannot read the index seek {name} ({_short(details)}); {HOW}")
    var, label, props = m.group("var"), m.group("label"), m.group("props").split(", ")
    if label not in q.TENANT_LABELS or props[0] != TENANT_PARAM:
        raise TenantScopeError(
            f"{var} is found through the index {label}({', '.join(props)}), which is not scoped by tenant; "
            f"{HOW}. If it already has {{tenant_id: $tenant_id}}, tell the planner: USING INDEX "
            f"{var}:{label}(tenant_id)")
    # The tenant predicate comes first (index order), then the next property's, then cached values.
    after = r"(?:\Z|, cache\[" + (rf"| AND {re.escape(props[1])} " if len(props) > 1 else "") + ")"
    if not re.match(r"tenant_id = \$tenant_id" + after, m.group("preds")):
        raise TenantScopeError(
            f"{var}:{label} is sought by tenant_id, but not by exactly $tenant_id ({_short(m.group('preds'))}); "
            f"compare tenant_id only with $tenant_id, which is bound for you, e.g. ({var}:{label} "
            "{tenant_id: $tenant_id})")


def _walk(plan: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield plan
    for child in plan.get("children") or ():
        yield from _walk(child)


def _operator(op: Mapping[str, Any]) -> tuple[str, str | None]:
    """("Expand(All)", "neo4j") from "Expand(All)@neo4j"."""
    name, _, db = str(op.get("operatorType", "")).partition("@")
    return name, (db or None)


def _details(op: Mapping[str, Any]) -> str:
    args = op.get("args") or op.get("arguments") or {}
    details = args.get("Details")
    return "" if details is None else str(details)


def _short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


# ----------------------------------------------------------------------------- results
def plain(value: Any, tenant_id: str) -> Any:
    """A driver value as plain JSON-able data. A node or relationship of another tenant refuses the
    result (the plan check makes it impossible; this is a second wall)."""
    # The driver's graph types, looked up rather than imported: a value can only be one once the
    # driver has loaded them, and the embedded store, which also calls this, is spared importing
    # the driver (~0.4 s of every process's start that runs an embedded Cypher query).
    graph = sys.modules.get("neo4j.graph")
    if graph is not None and isinstance(value, (graph.Node, graph.Relationship)):
        props = dict(value.items())
        owner = props.get("tenant_id")
        if owner is not None and owner != tenant_id:
            raise TenantScopeError("cypher() result reaches outside the caller's tenant: " + HOW)
        if isinstance(props.get("record"), str):
            try:
                props["record"] = json.loads(props["record"])
            except ValueError:
                pass
            if isinstance(value, graph.Node) and "Episode" in value.labels and isinstance(props["record"], dict):
                props["record"].update({k: props.get(k) for k in q.EPISODE_STATE})
        return {k: plain(v, tenant_id) for k, v in props.items()}
    if graph is not None and isinstance(value, graph.Path):
        out: list[Any] = [plain(value.start_node, tenant_id)]
        for rel in value.relationships:
            out += [plain(rel, tenant_id), plain(rel.end_node, tenant_id)]
        return out
    if isinstance(value, dict):
        return {k: plain(v, tenant_id) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, tenant_id) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "iso_format"):  # neo4j.time Date / Time / DateTime / Duration
        return value.iso_format()
    if hasattr(value, "to_native") and not hasattr(value, "srid"):  # e.g. neo4j.vector.Vector
        return plain(value.to_native(), tenant_id)
    if hasattr(value, "srid"):  # neo4j.spatial points
        return {"srid": value.srid, "coordinates": list(value)}
    return str(value)
