"""The tokens of a Cypher query, split as the engines' lexers split them.

What matters for a guard is to see the query's words where the engine sees them: a word hidden in
what the guard takes for a string or a comment, or glued to what it takes for one token, is a
word the guard never checks. So this lexer follows the openCypher grammar both engines' lexers
derive from (Neo4j's, and LadybugDB's ANTLR grammar), token by token:

- a number is digits, an optional fraction (``.5``, ``1.5``: ``1.`` is ``1`` then ``.``) and an
  optional exponent only when digits follow it (``1e5``); anything after it starts a new token,
  so ``1LOAD`` is ``1`` then ``LOAD``, and ``1EXPLAIN`` is ``1`` then ``EXPLAIN``;
- a name is ``[A-Za-z_][A-Za-z0-9_]*`` (``strict``) or also any other letter or digit
  (``strict=False``, Neo4j's Unicode names), and a backticked name is ``` `...` ``` with ``````
  for a backtick inside;
- a string is ``'...'`` or ``"..."`` whose backslash escapes are those the grammar has
  (``\\\\ \\' \\" \\b \\f \\n \\r \\t \\uXXXX \\UXXXXXXXX``); any other escape, or a string or
  block comment that does not end, is refused, never guessed at;
- a comment is ``// ...`` to the end of the line or ``/* ... */``; whitespace is the grammar's
  (space, tab, the line and form feeds, carriage return, FS/GS/RS/US; with ``strict=False`` any
  Unicode space too);
- with ``strict``, any other character outside strings, backticked names and comments (a
  non-ASCII letter, a Unicode space, a control character) is refused with its code point: that
  is where two lexers are most likely to disagree.

One pass, each token matched in place by one compiled pattern: linear in the query's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Token", "LexError", "tokens", "words"]

_STRICT = re.compile(r"""
  (?P<ws>[ \t\n\r\x0b\x0c\x1c-\x1f]+)
| (?P<comment>//[^\n\r]*|/\*(?:[^*]|\*(?!/))*\*/)
| (?P<string>'(?:[^'\\]|\\(?:[\\'"bfnrt]|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}))*'
            |"(?:[^"\\]|\\(?:[\\'"bfnrt]|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}))*")
| (?P<quoted>`(?:[^`]|``)*`)
| (?P<number>[0-9]*\.[0-9]+(?:[eE]-?[0-9]+)?|[0-9]+(?:[eE]-?[0-9]+)?)
| (?P<param>\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+|`(?:[^`]|``)*`))
| (?P<name>[A-Za-z_][A-Za-z0-9_]*)
| (?P<op><>|<=|>=|=~|->|<-|\.\.|::|[-+*/%^=<>(){}\[\],.:;|!&~?])
""", re.X)
_LOOSE = re.compile(_STRICT.pattern.replace(r"(?P<ws>[ \t\n\r\x0b\x0c\x1c-\x1f]+)", r"(?P<ws>\s+)")
                    .replace(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)", r"(?P<name>[^\W\d]\w*)")
                    .replace(r"(?P<param>\$(?:[A-Za-z_][A-Za-z0-9_]*", r"(?P<param>\$(?:[^\W\d]\w*"), re.X)


@dataclass(frozen=True)
class Token:
    kind: str  # ws, comment, string, quoted, number, param, name, op
    text: str
    start: int


class LexError(ValueError):
    """The query holds what the lexer does not read as the engine would: ``start`` is where."""

    def __init__(self, message: str, start: int) -> None:
        super().__init__(message)
        self.start = start


def tokens(query: str, strict: bool = True) -> list[Token]:
    """Every token of ``query``, whitespace and comments included (module docstring)."""
    pattern = _STRICT if strict else _LOOSE
    out: list[Token] = []
    i, n = 0, len(query)
    while i < n:
        m = pattern.match(query, i)
        if m is None or m.end() == i:
            raise LexError(_why(query, i), i)
        kind = m.lastgroup
        assert kind is not None
        if kind == "op" and query.startswith("/*", i):  # a comment that does not end
            raise LexError(_why(query, i), i)
        out.append(Token(kind, m.group(), i))
        i = m.end()
    return out


def words(toks: list[Token]) -> list[Token]:
    """The tokens the engine reads (no whitespace, no comments)."""
    return [t for t in toks if t.kind not in ("ws", "comment")]


def _why(query: str, i: int) -> str:
    ch = query[i]
    at = f"at character {i}"
    if ch in "'\"":
        return (f"a string {at} does not end, or holds a backslash escape Cypher does not have (\\\\ \\' \\\" \\b "
                "\\f \\n \\r \\t \\uXXXX \\UXXXXXXXX)")
    if ch == "`":
        return f"a backticked name {at} does not end"
    if query.startswith("/*", i):
        return f"a comment {at} does not end (*/)"
    return (f"the character {ch!r} (U+{ord(ch):04X}) {at} is not read alike by every Cypher engine outside a string or "
            "a backticked name: write names in ASCII or in backticks, and text in quotes")
