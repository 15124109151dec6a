"""The query text: its translation into LadybugDB's dialect (``translate``, with the refusals of
what the engine cannot run alike or would run unbounded) and what it reaches (``world_only``).
What is refused as not a read query is ``guard``'s."""

from __future__ import annotations

import re

from worldgraph.errors import CypherQueryError
from worldgraph.kg.embedded.cypher.model import (
    ENGINE,
    LABELS,
    WORLD,
)

_BLANK_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`]|``)*`|//[^\n]*|/\*.*?\*/", re.S)
NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def blank(query: str) -> str:
    """The query with the insides of strings, quoted names and comments replaced by spaces (same
    length, so positions found in it are positions in the query)."""
    def keep(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith(("//", "/*")):
            return " " * len(s)
        return s[0] + " " * (len(s) - 2) + s[-1]
    return _BLANK_RE.sub(keep, query)


def _unsupported(feature: str, instead: str) -> CypherQueryError:
    return CypherQueryError(f"the embedded store's Cypher engine ({ENGINE}) does not support {feature}; {instead} "
                            "(or run the query on the Neo4j store: --graph neo4j)")


_LABELS_RE = re.compile(rf"\(\s*(?P<var>{NAME}|`[^`]*`)?\s*(?P<labels>(?::\s*(?:{NAME}|`[^`]*`)\s*)+)")
_BAD_LABEL_RE = re.compile(rf"\(\s*(?:{NAME})?\s*:\s*{NAME}\s*[|&!%]")
_REL_RE = re.compile(r"(?P<open><?-\s*)\[(?P<body>[^\[\]]*)\](?P<close>\s*->?)")
_CLAUSE_RE = re.compile(r"(?<![.$:\w])(OPTIONAL\s+MATCH|MATCH|WITH|RETURN|UNWIND|UNION(?:\s+ALL)?|WHERE|ORDER\s+BY|SKIP|"
                        r"LIMIT)\b", re.I)
_FUNCS = {"tostring": "to_string", "tointeger": "to_int64", "tofloat": "to_double", "toboolean": "to_bool",
          "type": "label"}
_FUNC_RE = re.compile(r"(?<![.$\w`])(?P<name>toString|toInteger|toFloat|toBoolean|type|labels)\s*\(", re.I)


_KEYWORDS = frozenset({"RETURN", "WITH", "IN", "AND", "OR", "NOT", "WHERE", "UNWIND", "THEN", "ELSE", "WHEN", "BY",
                       "AS", "DISTINCT", "XOR", "CASE", "COLLECT", "EXISTS", "COUNT"})


def _clauses(code: str) -> list[tuple[int, int, str, int, int]]:
    """The clause keywords of the query: (start, end of keyword, kind, bracket depth, end of clause).
    A clause ends at the next clause keyword of the same or a lower depth, or where its brackets
    close; keywords inside brackets (``[x IN l WHERE ...]``, ``EXISTS { MATCH ... }``) belong there.
    Linear: one pass for the brackets, one for the keywords, one (backwards) for the ends."""
    depth, depths, closes = 0, [], [len(code)] * (len(code) + 1)
    stack: list[int] = []
    inner = []  # the innermost bracket open at each position (its index), or -1
    for i, ch in enumerate(code):
        if ch in ")]}":
            depth -= 1
            if stack:
                closes[stack.pop()] = i
        depths.append(depth)
        inner.append(stack[-1] if stack else -1)
        if ch in "([{":
            depth += 1
            stack.append(i)
    found = []
    for m in _CLAUSE_RE.finditer(code):
        kind = m.group(1).upper()
        if kind == "WITH" and _word_before(code, m.start()).upper() in ("STARTS", "ENDS"):
            continue
        kind = "MATCH" if kind.endswith("MATCH") else kind.split()[0]
        found.append((m.start(), m.end(), kind, depths[m.start()]))
    out: list[tuple[int, int, str, int, int]] = []
    following: list[tuple[int, int]] = []  # (depth, start) of later keywords, depths increasing from the top
    for start, after, kind, d in reversed(found):
        while following and following[-1][0] > d:
            following.pop()
        opened = inner[start]
        end = closes[opened] if opened >= 0 else len(code)
        if following and following[-1][1] < end:
            end = following[-1][1]
        out.append((start, after, kind, d, end))
        following.append((d, start))
    return out[::-1]


def _word_before(code: str, i: int) -> str:
    """The word that ends, but for whitespace, right before ``i``."""
    j = i
    while j > 0 and code[j - 1].isspace():
        j -= 1
    k = j
    while k > 0 and (code[k - 1].isalnum() or code[k - 1] == "_"):
        k -= 1
    return code[k:j]


MAX_RANGE = 1_000_000


def _check_ranges(code: str) -> None:
    """``range(a, b)`` builds its whole list before the timeout is looked at (300M elements ran 69 s
    past a 0.5 s timeout): only integer literals spanning at most MAX_RANGE are accepted."""
    for m in re.finditer(r"(?<![.$\w`])range\s*\(", code, re.I):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            j += 1
        args = code[m.end():j - 1].split(",")
        if not 2 <= len(args) <= 3 or not all(re.fullmatch(r"\s*-?\d+\s*", a) for a in args):
            raise _unsupported("range() with bounds that are not integer literals",
                               f"write range(first, last) with numbers at most {MAX_RANGE:,} apart")
        first, last = int(args[0]), int(args[1])
        step = abs(int(args[2])) if len(args) == 3 else 1
        if step == 0 or abs(last - first) // step > MAX_RANGE:
            raise _unsupported(f"range() of more than {MAX_RANGE:,} numbers", "its list is built whole before "
                               "the timeout can stop it; use a smaller range")


# How big one expression may make a string or list. LadybugDB evaluates an expression whole before
# it looks at its timeout or an interrupt, outside the memory its buffer pool bounds: lpad to 400M
# characters took 2.3 GB, a list doubled 14 times by ``WITH l + l AS l`` ~3 GB and a minute.
MAX_BUILT = 1_000_000
_BUILDERS_RE = re.compile(r"(?<![.$\w`])(lpad|rpad|repeat)\s*\(", re.I)
_INT_RE = re.compile(r"\s*\d+\s*")
# a value added to itself (``l + l``, ``list_concat(l, l)``): each repetition doubles it
_DOUBLING_RE = re.compile(rf"(?<![.$\w`])({NAME})\s*\+\s*\1(?![\w`(.\[])"
                          rf"|(?<![.$\w`])(?:list_concat|list_cat|array_concat|array_cat|concat)\s*\(\s*({NAME})\s*,"
                          rf"\s*\2\s*\)", re.I)


def _items(code: str, start: int, end: int) -> list[tuple[int, int]]:
    """The bounds of the comma-separated items of ``code[start:end]`` (commas inside brackets do not
    separate)."""
    depth, item_start, bounds = 0, start, []
    for k in range(start, end):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            bounds.append((item_start, k))
            item_start = k + 1
    bounds.append((item_start, end))
    return bounds


def _arguments(code: str, open_at: int) -> list[str]:
    """The arguments of the call whose ``(`` ends at ``open_at``."""
    depth, j = 1, open_at
    while j < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[j], 0)
        j += 1
    return [code[a:b] for a, b in _items(code, open_at, j - 1)]


def _check_builders(code: str) -> None:
    """Refuse the expressions that build a huge string or list in one step (see MAX_BUILT): the
    length of ``lpad`` / ``rpad`` and the count of ``repeat`` must be integer literals (``repeat``
    of a string literal) making at most MAX_BUILT characters, and a value may not be added to
    itself. Refused, not run: the deadline ends the call, but the engine would run on, holding
    that memory, until the expression is built."""
    for m in _BUILDERS_RE.finditer(code):
        name, args = m.group(1).lower(), _arguments(code, m.end())
        if name == "repeat":
            text = args[0].strip() if args else ""
            count = args[1] if len(args) == 2 else ""
            quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""
            if not quoted or not _INT_RE.fullmatch(count) or (len(text) - 2) * int(count) > MAX_BUILT:
                raise _unsupported("repeat() beyond a string literal repeated by an integer literal to at most "
                                   f"{MAX_BUILT:,} characters", "its string is built whole before the timeout "
                                   "can stop it; repeat a literal fewer times")
        elif len(args) != 3 or not _INT_RE.fullmatch(args[1]) or int(args[1]) > MAX_BUILT:
            raise _unsupported(f"{name}() to a length that is not an integer literal of at most {MAX_BUILT:,}",
                               "its string is built whole before the timeout can stop it; pad to a smaller "
                               "literal length")
    found = _DOUBLING_RE.search(code)
    if found:
        raise _unsupported(f"adding a value to itself ({found.group(0).strip()})",
                           "repeated, it doubles a list or string in one step the timeout cannot stop "
                           "(a number: write 2 * x)")


def _label_tables(labels: list[str]) -> list[str]:
    tables: set[str] | None = None
    for label in labels:
        if label not in LABELS:
            raise CypherQueryError(f"the graph model has no label {label!r}; labels: {', '.join(sorted(LABELS))}")
        these = set(WORLD) if label == "WorldNode" else {label}
        tables = these if tables is None else tables & these
    return sorted(tables or ())


_HINT_NAME = rf"(?:{NAME}|`[^`]*`)"
# Neo4j's planner hints: USING INDEX [SEEK] v:Label(prop, ...), USING SCAN v:Label, USING JOIN ON v, ...
_HINT_RE = re.compile(rf"(?<![.$\w`])USING\s+(?:INDEX\s+(?:SEEK\s+)?{_HINT_NAME}\s*:\s*{_HINT_NAME}\s*"
                      rf"\(\s*{_HINT_NAME}(?:\s*,\s*{_HINT_NAME})*\s*\)|SCAN\s+{_HINT_NAME}\s*:\s*{_HINT_NAME}|"
                      rf"JOIN\s+ON\s+{_HINT_NAME}(?:\s*,\s*{_HINT_NAME})*)(?![\w`])", re.I)


def without_hints(query: str) -> str:
    """The query without Neo4j's planner hints (``USING INDEX a:Entity(tenant_id)``, ``USING SCAN``,
    ``USING JOIN ON``): they choose how Neo4j finds the rows, never which rows, and the projection
    holds one tenant, so the same text runs on both stores. A hint inside a string or a comment
    stays (it is found on the blanked text)."""
    hints = list(_HINT_RE.finditer(blank(query)))
    for m in reversed(hints):
        query = query[:m.start()] + " " + query[m.end():]
    return query


def translate(query: str) -> str:
    """The query in LadybugDB's dialect (module docstring); CypherQueryError for what cannot be."""
    code = blank(query)
    if re.search(r"(?<![.$\w])(?:shortestPath|allShortestPaths)\s*\(", code, re.I):
        raise _unsupported("shortestPath()", "bound the path instead: MATCH p = (a)-[:CONTAINS*1..5]-(b) "
                           "RETURN p ORDER BY length(p) LIMIT 1")
    _check_ranges(code)
    _check_builders(code)
    if re.search(r"(?<![.$\w`])(?:properties|keys)\s*\(", code, re.I):
        raise _unsupported("properties() and keys() as Neo4j returns them (it lists every property of the "
                           "node's table, set or not)", "return the node itself (RETURN x) or name the properties")
    if _BAD_LABEL_RE.search(code):
        raise _unsupported("label expressions with | & ! %", "write one label per pattern, or UNION two queries")
    # list subscripts and slices: 1-based in LadybugDB, 0-based in Neo4j (same text, other rows)
    for m in re.finditer(r"[\w)\]`]\s*\[", code):
        if _word_before(code, m.end() - 1).upper() in _KEYWORDS:
            continue
        raise _unsupported("list indexing and slicing (x[i], x[a..b])",
                           "its lists are 1-based, so the same text would return other values")
    edits: list[tuple[int, int, str]] = []
    for m in _LABELS_RE.finditer(code):
        labels = [s.strip().strip("`") for s in m.group("labels").split(":")[1:]]
        tables = _label_tables(labels)
        if not tables:  # no node has these labels together: keep the pattern, match nothing
            raise _unsupported(f"the label combination {':'.join(labels)}", "no node has all of these labels")
        edits.append((m.start("labels"), m.end("labels"), ":" + ":".join(tables) + " "))
    for m in _FUNC_RE.finditer(code):
        name = m.group("name").lower()
        if name == "labels":
            edits.append((m.start(), m.end(), "_wg_labels("))
            close = _closing(code, m.end())
            edits.append((close, close, ")], _wg_l -> CASE _wg_l WHEN 'Entity' THEN ['WorldNode', 'Entity'] WHEN "
                                        "'State' THEN ['WorldNode', 'State'] ELSE [_wg_l] END), 1"))
        else:
            edits.append((m.start("name"), m.end("name"), _FUNCS[name]))
    edits += _relationship_edits(code)
    edits += _column_names(query, code)
    edits += _shadowing_aliases(code)
    out = query
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + text + out[end:]
    # labels(x): the Neo4j store's labels of the node's table, its argument written once (a nested
    # labels() would otherwise double the text at each level)
    return out.replace("_wg_labels(", "list_extract(list_transform([label(")


def _closing(code: str, open_at: int) -> int:
    """Where the bracket opened just before ``open_at`` closes (the end of the text if it does not)."""
    depth, j = 1, open_at
    while j < len(code):
        depth += {"(": 1, ")": -1}.get(code[j], 0)
        if depth == 0:
            return j
        j += 1
    return len(code)


MAX_PATTERN_RELS = 32


def _relationship_edits(code: str) -> list[tuple[int, int, str]]:
    """Neo4j matches each relationship at most once per MATCH (its patterns, comma-separated ones
    too) and var-length paths as trails; LadybugDB matches walks. So: ``* TRAIL`` for each
    var-length relationship, a name for each anonymous one, and ``r1 <> r2`` for each pair of
    fixed-length relationships of one MATCH. A named var-length relationship (a list in Neo4j,
    a path in LadybugDB) is refused."""
    edits: list[tuple[int, int, str]] = []
    clauses = _clauses(code)
    n = 0
    for i, (start, _after, kind, _d, pattern_end) in enumerate(clauses):
        if kind != "MATCH":
            continue
        where_at, end = None, pattern_end
        nxt = clauses[i + 1] if i + 1 < len(clauses) else None
        if nxt is not None and nxt[2] == "WHERE" and nxt[0] == pattern_end:
            where_at, end = nxt[0], nxt[4]
        fixed: list[tuple[str, str]] = []  # (name, types)
        varlen: list[str] = []
        for m in _REL_RE.finditer(code, start, pattern_end):
            body = m.group("body")
            bm = re.match(rf"\s*(?P<var>{NAME})?\s*(?P<types>:[^*{{]*)?(?P<star>\*[^{{]*)?(?P<rest>.*)\Z", body, re.S)
            if bm is None:
                continue
            types = (bm.group("types") or "").replace(" ", "").lstrip(":")
            if bm.group("star") is not None:
                if bm.group("var"):
                    raise _unsupported(f"a named var-length relationship ([{bm.group('var')}{bm.group('types') or ''}*..])",
                                       "name the path instead: p = (a)-[:CONTAINS*1..3]->(b), relationships(p)")
                star = m.start("body") + bm.start("star")
                edits.append((star, star + 1, "* TRAIL "))
                varlen.append(types)
                continue
            var = bm.group("var")
            if var is None:
                n += 1
                var = f"_wg_r{n}"
                at = m.start("body") + (bm.start("types") if bm.group("types") else len(body) - len(body.lstrip()))
                edits.append((at, at, var))
            fixed.append((var, types))
        if len(fixed) > MAX_PATTERN_RELS:
            raise _unsupported(f"more than {MAX_PATTERN_RELS} relationships in one MATCH",
                               "split the pattern into several MATCH clauses (each relationship is kept "
                               "distinct from every other one of its MATCH, which costs their square)")
        pairs = [(a, b) for k, (a, ta) in enumerate(fixed) for (b, tb) in fixed[k + 1:]
                 if _may_share(ta, tb)]
        if varlen and any(_may_share(tv, t) for tv in varlen for _, t in fixed):
            raise _unsupported("a var-length relationship and a fixed one of the same type in one MATCH",
                               "split them into two MATCH clauses, or give them different types")
        if pairs:
            cond = " AND ".join(f"{a} <> {b}" for a, b in pairs)
            if where_at is not None:
                body_start = where_at + len("WHERE")
                edits.append((body_start, body_start, " ("))
                edits.append((end, end, f") AND {cond} "))
            else:
                edits.append((pattern_end, pattern_end, f" WHERE {cond} "))
    return edits


def _may_share(a: str, b: str) -> bool:
    """Whether relationships typed ``a`` and ``b`` (``T1|T2``, empty for any) can be the same one."""
    if not a or not b:
        return True
    return bool({t.strip(":") for t in a.split("|")} & {t.strip(":") for t in b.split("|")})


# A RETURN alias that ORDER BY names while a pattern variable has the same name
# (``RETURN a.name AS a ORDER BY a``): Neo4j orders by the alias, LadybugDB binds the variable and
# refuses ("Order by NODE"). The alias becomes ``_wgas_<name>`` in both places and execution
# names the column back.
ALIAS_PREFIX = "_wgas_"


def _shadowing_aliases(code: str) -> list[tuple[int, int, str]]:
    edits: list[tuple[int, int, str]] = []
    clauses = _clauses(code)
    first: dict[str, int] = {}  # where each name is first written (not as a property or parameter)
    for m in re.finditer(rf"(?<![.\w`$])({NAME})(?![\w`])", code):
        first.setdefault(m.group(1), m.start())
    for i, (start, after, kind, depth, end) in enumerate(clauses):
        if kind != "RETURN":
            continue
        aliases = {m.group(1): m for m in re.finditer(rf"\bAS\s+({NAME})\b", code[after:end], re.I)}
        shadowing = {a: m for a, m in aliases.items() if first.get(a, end) < start}
        if not shadowing:
            continue
        renamed: set[str] = set()
        for _o_start, o_after, o_kind, o_depth, o_end in clauses[i + 1:]:
            if o_depth != depth:
                continue
            if o_kind != "ORDER":
                if o_kind in ("RETURN", "WITH", "UNION", "MATCH", "UNWIND"):
                    break
                continue
            for a in shadowing:
                for m in re.finditer(rf"(?<![.\w`$]){a}(?![\w`.(])", code[o_after:o_end]):
                    edits.append((o_after + m.start(), o_after + m.end(), ALIAS_PREFIX + a))
                    renamed.add(a)
        for a in renamed:
            m = shadowing[a]
            edits.append((after + m.start(1), after + m.end(1), ALIAS_PREFIX + a))
    return edits


def _column_names(query: str, code: str) -> list[tuple[int, int, str]]:
    """Neo4j names an unaliased RETURN item by its text (``count(*)``, ``e.name``); LadybugDB by its
    own rendering. Each unaliased item of each RETURN gets ``AS `<its text>```."""
    edits: list[tuple[int, int, str]] = []
    for _start, after, kind, _d, end in _clauses(code):
        if kind != "RETURN":
            continue
        items_at = after
        dm = re.match(r"\s*DISTINCT\b", code[after:end], re.I)
        if dm:
            items_at += dm.end()
        for a, b in _items(code, items_at, end):
            text = code[a:b]
            if not text.strip() or text.strip() == "*" or re.search(r"\bAS\s+[\w`]", text, re.I):
                continue
            raw = query[a:b].strip()
            stop = a + len(query[a:b].rstrip())
            edits.append((stop, stop, " AS `" + raw.replace("`", "``") + "`"))
    return edits
