"""The embedded store's text guard: the first line in front of the query child, at token level.

It refuses, before anything runs and with a message naming the word, what is not one read
query of the projection. It is not the proof: the query child is (``child``, ``docs/cypher.md``).
On the tokens of ``cypher_lexer`` (strict: ASCII outside strings, backticked names and comments;
a digit before a word is two tokens, as in the engine):

1. **One statement.** A ``;`` is allowed only as the last token.
2. **Read clauses only** (allow-lists, ``dialect``): the statement, and each part after
   ``UNION [ALL]``, starts with MATCH, OPTIONAL MATCH, WITH, UNWIND or RETURN; a word that
   follows the end of an expression (a name, a literal, a closing bracket) is a read clause or
   an infix keyword; a name followed by ``(`` is one of the engine's functions (``FUNCTIONS``)
   or a keyword. So ``1LOAD FROM``, ``x CREATE``, ``COMMENT ON TABLE`` and ``show_tables()`` are
   refused, as is every table function.
3. **No write, file, extension, setting or transaction word** anywhere as a bare word
   (``DENIED``: CREATE, SET, LOAD, COPY, CALL, INSTALL, ATTACH, EXPORT ...).
4. The Neo4j dialect's own refusals (``cypher_guard.check_text``), and the query's length
   (``MAX_QUERY_CHARS``).
"""

from __future__ import annotations

import difflib

from worldgraph.errors import CypherInputError, CypherQueryError, ReadOnlyQueryError
from worldgraph.kg import cypher_guard
from worldgraph.kg.cypher_lexer import LexError, Token, tokens, words
from worldgraph.kg.embedded.cypher.dialect import (
    AFTER_EXPRESSION,
    DENIED,
    FUNCTIONS,
    KEYWORD_CALLS,
    STARTS,
    TABLE_FUNCTIONS,
    TRANSLATED,
)
from worldgraph.kg.embedded.cypher.model import ENGINE

__all__ = ["MAX_QUERY_CHARS", "check_text"]

# A query text longer than this is refused before the engine parses it. WorldModel.cypher has
# already applied the config's cypher_max_query_bytes (kg/cypher_limits.py); this bounds direct
# callers of the store too.
MAX_QUERY_CHARS = 100_000
_ENDS_EXPRESSION = frozenset({"name", "quoted", "number", "string", "param"})
_VALUE_WORDS = frozenset({"NULL", "TRUE", "FALSE", "END"})
_NOT_ENDING = KEYWORD_CALLS | {"BY", "ALL", "DISTINCT", "OPTIONAL"}  # keywords after which an expression starts
_CALLABLE = FUNCTIONS | TRANSLATED
_READ_ONLY = ("cypher() is read-only: {what} is not allowed (statements that write, read files, load extensions "
              "or change the engine's settings are refused). Use the WorldModel API to change data.")


def check_text(query: str) -> None:
    """Refuse what is not one read query of the projection (module docstring)."""
    cypher_guard.check_text(query)
    if len(query) > MAX_QUERY_CHARS:
        raise CypherInputError("query", f"is {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
    try:
        toks = words(tokens(query))
    except LexError as exc:
        raise ReadOnlyQueryError(f"cypher() cannot read this query as the engine would: {exc}") from None
    if any(t.text == ";" for t in toks[:-1]):
        raise ReadOnlyQueryError("cypher() runs one statement at a time: remove the ';' between statements")
    if toks and toks[-1].text == ";":
        toks = toks[:-1]
    for i, tok in enumerate(toks):
        before = toks[i - 1] if i else None
        after = toks[i + 1] if i + 1 < len(toks) else None
        if tok.kind != "name" or (before is not None and before.text == ":"):
            continue  # a label or a type: a name whatever its spelling
        if before is not None and before.text == ".":  # a property, unless called (a namespaced function)
            if after is not None and after.text == "(":
                raise ReadOnlyQueryError(f"cypher() calls no namespaced function or procedure (.{tok.text}())")
            continue
        word = tok.text.upper()
        if word in DENIED:
            raise ReadOnlyQueryError(_READ_ONLY.format(what=word))
        if before is None or (before.kind == "name" and before.text.upper() == "UNION") or (
                before.text.upper() == "ALL" and i >= 2 and toks[i - 2].text.upper() == "UNION"):
            if word not in STARTS and not (before is not None and word == "ALL"):
                _refuse_misspelt(tok.text, STARTS)
                raise ReadOnlyQueryError(f"cypher() runs read queries, which start with MATCH, OPTIONAL MATCH, WITH, "
                                         f"UNWIND or RETURN; this one has {tok.text} there")
        elif _ends_expression(before, toks[i - 2] if i >= 2 else None) and word not in AFTER_EXPRESSION:
            _refuse_misspelt(tok.text, AFTER_EXPRESSION)
            raise ReadOnlyQueryError(f"cypher() allows only read clauses: {tok.text!r} after {before.text!r} starts "
                                     "a clause it does not run (write it in backticks if it is a name)")
        name = tok.text.lower()
        if after is not None and after.text == "(" and word not in KEYWORD_CALLS and name not in _CALLABLE:
            if name in TABLE_FUNCTIONS or (before is not None and before.text == "."):
                raise ReadOnlyQueryError(f"cypher() calls no table function or procedure ({tok.text}()): only the "
                                         "engine's scalar and aggregate functions")
            raise CypherQueryError(f"the embedded store's Cypher engine ({ENGINE}) has no function {word}() that "
                                   "cypher() calls (its scalar and aggregate functions are allowed); write the query "
                                   "without it, or run it on the Neo4j store (--graph neo4j)")


def _refuse_misspelt(text: str, expected: frozenset[str]) -> None:
    """A word where a clause goes that is no keyword of the engine but one letter or two away from
    an allowed one (``RETRN``): a typo, answered as an invalid query naming the keyword meant
    rather than as a refused write. The query is refused before it runs either way."""
    word = text.upper()
    if word in DENIED or word in KEYWORD_CALLS or len(word) < 3:
        return
    close = difflib.get_close_matches(word, sorted(expected), n=1, cutoff=0.75)
    if close:
        raise CypherQueryError(f"{text!r} is not a Cypher keyword: did you mean {close[0]}? (a name there goes "
                               "in backticks)")


def _ends_expression(tok: Token | None, before: Token | None) -> bool:
    """Whether ``tok`` ends an expression (so a word after it is a clause or infix keyword)."""
    if tok is None:
        return False
    if tok.text in (")", "]", "}"):
        return True
    if tok.text == "*":  # WITH * / RETURN *: the clause's items end there; else a product goes on
        return before is not None and before.text.upper() in ("WITH", "RETURN", "DISTINCT")
    if tok.kind == "name":
        word = tok.text.upper()
        if before is not None and before.text in (".", ":"):
            return True
        return word in _VALUE_WORDS or word not in _NOT_ENDING
    return tok.kind in _ENDS_EXPRESSION
