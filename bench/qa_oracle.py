"""The pieces of bench/world_qa.py that need no TextWorld: questions from a game's true facts, the
fact that answers each, and whether a hit or a text block holds that fact.

Questions come from the TRUE facts of the game (``fidelity_oracle``'s vocabulary: containment,
the open / closed / locked state of doors and containers, the state changes and moves an action
caused), never from the learned graph, and only about things the agent saw (``known``): nobody
can answer about a thing never seen. Four sets:

- ``where``: where is X now? (every seen thing in the final state: its container, supporter,
  room, or the player who carries it); answered by the containment fact (parent, X). Those
  about a thing that is no longer where the agent first saw it are also counted apart
  (``moved``): there, what the agent saw first is the wrong answer;
- ``holds``: what is in / on C? (every seen container, supporter and the player's inventory
  holding seen things); answered by any of its containment facts (C, child);
- ``state``: is D open, closed or locked? (every seen door and container); answered by D's state;
- ``action``: what did doing A in P do? (every distinct effect the agent saw an action cause: a
  state change, or a thing moved; P the room the player was in when doing it); answered by the
  transition, or the containment that began then. The place is asked because an agent asks
  about the action it is about to repeat where it stands: "go east" or "drop the teaspoon" does
  one thing in the kitchen and another in the garden, and "what did doing 'go east' do?" alone
  has one answer per room, of which a search's first hit can give one (the question would be
  unanswerable, not the search wrong). The place is the true one (the player's room before the
  action), so the question stays derived from the game's true state. Effects that still share a
  question's text (one action in one room that did two things, or the same thing twice) are one
  question whose answer is any of them.

The matching rule, one for every method (hits of ``search_world``, episodes of recall, a text
block such as ``context()``):

- a unit (a hit, an episode, a line of a block) holds the fact when it names the id of a learned
  record that expresses the true fact (``answer_ids``: found by names in the final graph: a
  containment edge between the two named things, a state node of the thing whose name has the
  state's word, a transition between such states with the action), or when one sentence of its
  text names the fact's ends: the two things of a containment (the player holding a thing as
  "player", "inventory" or "carrying"; the player in a place as "player" or "you"), the thing and
  its state's word (open / opened, closed / shut, locked), the thing and the change's verb for a
  transition. A place (a room) and what is in it may be named anywhere in one unit: a text
  about a place (a room's description) lists what is there in sentences that do not repeat
  its name;
- the question itself, or its action, repeated in a unit does not count (it echoes the question);
- for the questions about now (where, holds, state), a unit that says it is closed history (a
  hit with ``current`` false, a line saying "closed" / "until" / "was in") does not count, and
  only the ids of current records do;
- a block is cut to the token budget before it is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from fidelity_oracle import PLAYER, containment, kinds, states, visible, where_player

from worldgraph.kg.ids import normalise_name

KINDS = ("where", "holds", "state", "action")
HOLDERS = ("container", "supporter", "character")  # what a "holds" question asks about (character: the player)
STATE_WORDS = {"open": ("open", "opened"), "closed": ("closed", "shut"), "locked": ("locked",)}
# the verbs of a change, (from, to) -> words that say it happened
CHANGE_WORDS = {("closed", "open"): ("open", "opened", "opens"), ("locked", "open"): ("open", "opened", "opens"),
                ("open", "closed"): ("close", "closed", "closes", "shut"),
                ("locked", "closed"): ("unlock", "unlocked", "unlocks"),
                ("closed", "locked"): ("lock", "locked", "locks"), ("open", "locked"): ("lock", "locked", "locks")}
PLAYER_HOLDS = (PLAYER, "inventory", "carrying")  # the player as the holder of a thing
PLAYER_IS = (PLAYER, "you")  # the player as the one in a place
PLACES = ("room",)  # the kinds of thing that are places
PAST = re.compile(r"\b(closed \d|until|was in|were in|no longer|used to)\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+|;\s*")


@dataclass(frozen=True)
class Fact:
    """What answers a question: ``relation`` containment (ends: parent, child), state (thing,
    state word) or transition (thing, from word, to word), with the action for action questions;
    ``place``: the parent is a place (the two ends may stand in different sentences of a unit)."""

    relation: str
    ends: tuple[str, ...]
    action: str | None = None
    place: bool = False


@dataclass
class Question:
    kind: str  # where | holds | state | action
    text: str  # as an agent would ask it
    answer: str  # the true answer, in words
    facts: list[Fact] = field(default_factory=list)  # any of them answers it
    moved: bool = False  # where: the thing is not where the agent first saw it

    @property
    def now(self) -> bool:
        """A question about the present (its answer must be current)."""
        return self.kind != "action"


# ---------------------------------------------------------------------------------- questions
def questions(rounds: list[dict[str, Any]]) -> list[Question]:
    """The questions of one played game (``rounds``: each with its action and the true facts
    before and after it), from its true final state and the changes the agent saw."""
    final = rounds[-1]["after"]
    known: set[str] = set()
    first_parent: dict[str, str] = {}
    for r in rounds:
        edges, seen = visible(r["after"])
        known |= seen
        for p, c in sorted(edges):
            first_parent.setdefault(c, p)
    kind = kinds(final)
    out: list[Question] = []
    held: dict[str, list[str]] = {}
    for parent, child in sorted(containment(final)):
        if child not in known or parent not in known:
            continue
        where = "carried by the player" if parent == PLAYER else f"in the {parent}"
        fact = Fact("containment", (parent, child), place=kind.get(parent) in PLACES)
        out.append(Question("where", f"Where is the {child} now?", where, [fact],
                            moved=first_parent.get(child, parent) != parent))
        if kind.get(parent) in HOLDERS:
            held.setdefault(parent, []).append(child)
    for parent, children in sorted(held.items()):
        what = "What does the player carry?" if parent == PLAYER else f"What is in or on the {parent}?"
        out.append(Question("holds", what, ", ".join(children), [Fact("containment", (parent, c)) for c in children]))
    for thing, word in sorted(states(final).items()):
        if thing in known:
            out.append(Question("state", f"Is the {thing} open, closed or locked?", word,
                                [Fact("state", (thing, word))]))
    out += action_questions(rounds, known, kind)
    return out


def action_questions(rounds: list[dict[str, Any]], known: set[str], kind: dict[str, str]) -> list[Question]:
    """One question per action and the room it was done in, answered by any distinct effect it
    had there that the agent saw: a state change, or a thing moving to a new holder."""
    by_text: dict[str, Question] = {}
    for r in rounds:
        before, after, action = r["before"], r["after"], r["action"]
        room = where_player(before)
        text = f"What did doing '{action}' in the {room} do?" if room else f"What did doing '{action}' do?"
        _, in_view = visible(after)
        old, new = states(before), states(after)
        effects = [Fact("transition", (t, old[t], new[t]), action) for t in sorted(new)
                   if t in in_view and t in old and old[t] != new[t]]
        was = {c: p for p, c in containment(before)}
        effects += [Fact("containment", (p, c), action, place=kind.get(p) in PLACES)
                    for p, c in sorted(containment(after)) if c in known and p in in_view and c in was and was[c] != p]
        for fact in effects:
            q = by_text.setdefault(normalise_name(text), Question("action", text, ""))
            if fact in q.facts:
                continue
            if fact.relation == "transition":
                answer = f"the {fact.ends[0]} went from {fact.ends[1]} to {fact.ends[2]}"
            else:
                answer = f"the {fact.ends[1]} moved to {'the player' if fact.ends[0] == PLAYER else fact.ends[0]}"
            q.answer = f"{q.answer}; {answer}" if q.answer else answer
            q.facts.append(fact)
    return list(by_text.values())


# ---------------------------------------------------------------------------------- the answer's records
def answer_ids(graph: dict[str, Any], q: Question) -> set[str]:
    """The ids of the learned records that express one of the question's true facts (current
    ones for a question about now), found by names in the final graph."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    name = {i: normalise_name(n["name"]) for i, n in nodes.items()}
    out: set[str] = set()
    for fact in q.facts:
        if fact.relation == "containment":
            parent, child = (normalise_name(x) for x in fact.ends)
            out |= {e["id"] for e in graph["edges"] if e["relation"] == "containment"
                    and name.get(e["src_id"]) == parent and name.get(e["dst_id"]) == child
                    and (not q.now or e["valid_to"] is None)}
        elif fact.relation == "state":
            out |= {n["id"] for n in _states_of(nodes, name, fact.ends[0], fact.ends[1])
                    if not q.now or n["valid_to"] is None}
        else:
            thing, old, new = fact.ends
            src = {n["id"] for n in _states_of(nodes, name, thing, old)}
            dst = {n["id"] for n in _states_of(nodes, name, thing, new)}
            out |= {e["id"] for e in graph["edges"] if e["relation"] == "transition" and e["src_id"] in src
                    and e["dst_id"] in dst and normalise_name(e.get("action") or "") == normalise_name(fact.action or "")}
    return out


def _states_of(nodes: dict[str, Any], name: dict[str, str], thing: str, word: str) -> list[dict[str, Any]]:
    """State nodes of the entity named ``thing`` whose name has the state's word."""
    owner = normalise_name(thing)
    words = STATE_WORDS.get(word, (word,))
    return [n for i, n in nodes.items() if n["kind"] == "state" and name.get(n.get("entity_id") or "") == owner
            and any(_has(name[i], w) for w in words)]


# ---------------------------------------------------------------------------------- matching
def unit_holds(q: Question, ids: set[str], hit_id: str | None = None, text: str = "", current: bool | None = None) -> bool:
    """Whether one unit (a hit with its id, text and currency; an episode's text; a line of a
    block) holds an answer to ``q`` (see the module doc)."""
    if q.now and current is False:
        return False
    if hit_id is not None and hit_id in ids:
        return True
    if any(i in text for i in ids):  # a cited id
        return True
    text = re.sub(re.escape(q.text), " ", text, flags=re.I)  # the question repeated tells nothing
    return any(text_holds(q, fact, text) for fact in q.facts)


def text_holds(q: Question, fact: Fact, text: str) -> bool:
    """One sentence of ``text`` (one unit, for a place) names the fact's ends (see the module doc)."""
    text = text.lower()
    if fact.action:  # the question's own action repeated tells nothing
        text = re.sub(rf"(?<![a-z0-9]){re.escape(fact.action.lower())}(?![a-z0-9])", " ", text)
    parts = [p for p in _SENTENCE.split(text) if not (q.now and PAST.search(p))]
    if fact.relation == "containment":
        parent, child = fact.ends
        parents = PLAYER_HOLDS if parent == PLAYER else (parent,)
        children = PLAYER_IS if child == PLAYER else (child,)
        if fact.place:
            parts = [" . ".join(parts)]
        return any(any(_has(p, c) for c in children) and any(_has(p, x) for x in parents) for p in parts)
    if fact.relation == "state":
        thing, word = fact.ends
        words = STATE_WORDS.get(word, (word,))
    else:
        thing, old, new = fact.ends
        words = CHANGE_WORDS.get((old, new), (new,))
    return any(_has(p, thing) and any(_has(p, w) for w in words) for p in parts)


def block_holds(q: Question, ids: set[str], block: str) -> bool:
    """A text block holds the answer when one of its lines does."""
    return any(unit_holds(q, ids, text=line) for line in block.splitlines() if line.strip())


def first_hit(q: Question, ids: set[str], units: Iterable[tuple[str | None, str, bool | None]], k: int) -> bool:
    """Whether one of the first ``k`` units (id, text, current) holds the answer."""
    return any(unit_holds(q, ids, i, t, c) for i, t, c in list(units)[:k])


def _has(text: str, word: str) -> bool:
    """``word`` (a name or a word, normalised) stands in ``text`` as whole words."""
    w = normalise_name(word) or word.lower()
    return bool(re.search(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])", text))
