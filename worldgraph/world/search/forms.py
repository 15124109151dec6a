"""What a question asks for, read from its form: a soft preference between the kinds of fact
(``search_world``'s step 4).

Two facts about one thing read alike to the embedder and to BM25 ("the safe is locked", "the safe
is located in the vault"; "the vase is located in the shelf", "the shelf is located in the
study"), and both gain the relevance of the thing the query names. The question's form tells them
apart:

- **where** (``where is X``, ``where can I find X``, ``the location of X``, ``which room / place``):
  a fact that places its subject, whose subject is X: a containment (its subject is the child) or
  a fact whose predicate's words say a place (``located_in``, ``lives_at``, ``near``: its subject
  is the source);
- **holds** (``what is in / on / inside X``, ``what does X contain / hold / carry``): such a fact
  whose holder is X (a containment's parent; a place fact's target);
- **state** (a yes/no question, ``is X locked?``, ``are the lights on?``; ``the state of X``,
  ``what state is X in``): a state that holds of X (a state record whose entity the query is
  relevant to) before what changed it and the rules about it. A yes/no question about a place
  (``is the key in the chest?``) is a where question; ``is there ... in C?`` a holds question;
- **action** (``what did doing A do``, ``what happens if ...``, ``the effect of ...``): a change
  or a rule: a transition, a row saying what an action moved, a rule (if ..., then ...), before
  a row saying only what was seen after an action (``texts.is_sighting``: a thing first seen
  then was not changed by it) and the facts that hold now.

For where and holds, which end is X is not parsed from the question: it is the end the query is more relevant to (its
relevance as a candidate, 0 when it is none), and it must be relevant at all; a history row (what
came after an action) and a fact that does not hold at the asked moment never answer them. A fact of the preferred kind gains
``world_search_form_weight``. The words are English question words and prepositions of
place, never a world's own vocabulary, so the preference is the same for any world.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from worldgraph.world.search.texts import is_sighting

WHERE = "where"
HOLDS = "holds"
ACTION = "action"
STATE = "state"

_WHERE = re.compile(r"\bwhere\b|\blocation of\b|\b(?:which|what) (?:room|place|container)\b", re.I)
_HOLDS = re.compile(r"\bwhat(?:'s|\s+is|\s+are|\s+was|\s+were|\s+else\s+is)\s+(?:in|on|inside|within|under|at)\b"
                    r"|\b(?:contain|contains|containing|hold|holds|holding|carry|carries|carrying)\b"
                    r"|\binside of\b", re.I)
_ACTION = re.compile(r"\bwhat (?:happens|happened|would happen|will happen)\b"
                     r"|\bwhat (?:did|does|do|will|would)\b.*\b(?:do|did)\W*$"
                     r"|\b(?:effects?|results?|outcomes?) of\b", re.I)
_YES_NO = re.compile(r"^\W*(?:is|are|was|were|isn't|aren't|wasn't|weren't)\s", re.I)
_THERE = re.compile(r"^\W*(?:is|are|was|were)\s+there\b", re.I)
# a place preposition with an object after it ("in the chest"; not the state word of "is the lamp on?")
_PLACE = re.compile(r"\b(?:in|on|inside|into|within|at|under|near|beside|behind)\s+\w", re.I)
_STATE = re.compile(r"\b(?:state|status|condition) of\b|\bwhat (?:state|status|condition)\b", re.I)
# the words of a predicate that say a place (a fact with one of them places its subject)
PLACE_WORDS = frozenset({"in", "at", "on", "inside", "into", "within", "near", "under", "beside", "located",
                         "location", "lives", "stored", "kept", "placed"})


def form(query: str) -> str | None:
    """The form of a question: ``WHERE``, ``HOLDS``, ``ACTION``, ``STATE`` or None (no preference)."""
    if _WHERE.search(query):
        return WHERE
    if _ACTION.search(query):
        return ACTION
    if _HOLDS.search(query) or _THERE.search(query):
        return HOLDS
    if _YES_NO.search(query):
        return WHERE if _PLACE.search(query) else STATE
    if _STATE.search(query):
        return STATE
    return None


def place_ends(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(subject, holder) of a fact that places its subject (None for any other record): a
    containment's child and parent; a place fact's source and target."""
    relation = record.get("relation")
    src, dst = str(record.get("src_id") or ""), str(record.get("dst_id") or "")
    if not src or not dst:
        return None
    if relation == "containment":
        return dst, src
    if relation in ("transition", "episodic"):
        return None
    said = set(re.split(r"[\W_]+", str(record.get("predicate") or relation or "").lower()))
    return (src, dst) if said & PLACE_WORDS else None


def may_prefer(asked: str | None, kind: str, history: bool, links: Sequence[str],
               relevance: Mapping[str, float]) -> bool:
    """Whether a row may be preferred, by what the index says of it before its record is read
    (``preferred`` is then False for every row this is False for)."""
    if asked == ACTION:
        return kind in ("fact", "rule")
    if asked == STATE:
        return kind == "state" and not history and any(relevance.get(n, 0.0) > 0 for n in links)
    return asked is not None and kind == "fact" and not history and any(relevance.get(n, 0.0) > 0 for n in links)


def preferred(asked: str | None, kind: str, record: Mapping[str, Any], text: str, history: bool, valid: bool,
              relevance: Mapping[str, float]) -> bool:
    """Whether a row (its kind, record, sentence, whether it is history, whether its record holds
    at the asked moment) is of the kind the question's form asks for (see the module doc);
    ``relevance``: node id -> its relevance to the query (the candidates')."""
    if asked == ACTION:
        return kind == "rule" or record.get("relation") == "transition" or (history and not is_sighting(text))
    if asked is None or history or not valid:
        return False
    if asked == STATE:  # a state that holds of the thing asked about
        return kind == "state" and relevance.get(str(record.get("entity_id") or ""), 0.0) > 0.0
    ends = place_ends(record)
    if ends is None:
        return False
    subject, holder = ends
    mine, other = (subject, holder) if asked == WHERE else (holder, subject)
    want = relevance.get(mine, 0.0)
    return want > 0.0 and want >= relevance.get(other, 0.0)
