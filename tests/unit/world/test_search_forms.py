"""The question's form as a soft preference between fact kinds (world/search/forms.py): the form
read from English question words, the kind from the record (a containment, a predicate whose
words say a place, a transition, a rule, a move), the end asked about from the relevance."""

from __future__ import annotations

from worldgraph.world.search.forms import ACTION, HOLDS, STATE, WHERE, form, place_ends, preferred

IN_SAFE = {"relation": "containment", "src_id": "safe", "dst_id": "key"}  # the key is in the safe
SAFE_IN_VAULT = {"relation": "containment", "src_id": "vault", "dst_id": "safe"}
WORKS_AT = {"relation": "fact", "predicate": "works_at", "src_id": "alice", "dst_id": "acme"}
LIKES = {"relation": "fact", "predicate": "likes", "src_id": "alice", "dst_id": "bob"}
OPENED = {"relation": "transition", "src_id": "closed", "dst_id": "open", "action": "open safe"}


def test_the_form_comes_from_question_words() -> None:
    assert form("Where is the safe now?") == WHERE and form("the location of the key") == WHERE
    assert form("What is in or on the safe?") == HOLDS and form("what does the player carry") == HOLDS
    assert form("What did doing 'go east' in the kitchen do?") == ACTION
    assert form("what happens if I open the safe") == ACTION
    assert form("Is the safe open, closed or locked?") == STATE and form("brass key") is None
    assert form("is the front door locked?") == STATE and form("Are the lights on?") == STATE
    assert form("what is the state of the safe") == STATE and form("What state is the lamp in?") == STATE
    assert form("is the key in the chest?") == WHERE and form("Is the lamp on the table?") == WHERE
    assert form("is there a key in the kitchen?") == HOLDS
    assert form("What did doing 'put key in chest' do?") == ACTION  # "in" of the action is not a holds question


def test_a_place_fact_is_a_containment_or_a_predicate_saying_a_place() -> None:
    assert place_ends(IN_SAFE) == ("key", "safe") and place_ends(WORKS_AT) == ("alice", "acme")
    assert place_ends(LIKES) is None and place_ends(OPENED) is None


def test_the_preferred_fact_is_about_the_thing_asked_in_the_direction_asked() -> None:
    safe_asked = {"safe": 0.9, "key": 0.4, "vault": 0.3}
    assert preferred(WHERE, "fact", SAFE_IN_VAULT, "", False, True, safe_asked)
    assert not preferred(WHERE, "fact", IN_SAFE, "", False, True, safe_asked)  # the key's place, not the safe's
    assert preferred(HOLDS, "fact", IN_SAFE, "", False, True, safe_asked)
    assert not preferred(HOLDS, "fact", SAFE_IN_VAULT, "", False, True, safe_asked)
    assert not preferred(WHERE, "fact", SAFE_IN_VAULT, "", False, False, safe_asked)  # closed: not where it is
    assert not preferred(WHERE, "fact", SAFE_IN_VAULT, "", True, True, safe_asked)  # history: not now
    assert not preferred(WHERE, "fact", SAFE_IN_VAULT, "", False, True, {})  # nothing asked about
    assert not preferred(None, "fact", SAFE_IN_VAULT, "", False, True, safe_asked)
    # what an action did: a change or a rule, not what was merely seen after it
    assert preferred(ACTION, "fact", OPENED, "", False, True, {})
    assert preferred(ACTION, "rule", {"condition": "x", "outcome": "y"}, "", False, True, {})
    assert preferred(ACTION, "fact", IN_SAFE, "doing 'put key in safe' moved the key from the player to the safe",
                     True, False, {})
    assert not preferred(ACTION, "fact", IN_SAFE, "after doing 'look', the key was seen in the safe", True, True, {})
    assert not preferred(ACTION, "fact", IN_SAFE, "the key is located in the safe", False, True, {})


def test_a_state_question_prefers_a_state_of_the_thing_asked_that_holds() -> None:
    locked = {"kind": "state", "entity_id": "door", "name": "locked"}
    door_asked = {"door": 0.8, "key": 0.3}
    assert preferred(STATE, "state", locked, "the door is locked", False, True, door_asked)
    assert not preferred(STATE, "state", locked, "the door is locked", False, False, door_asked)  # closed
    assert not preferred(STATE, "state", locked, "the door is locked", False, True, {"key": 0.5})  # another thing's
    assert not preferred(STATE, "fact", OPENED, "", False, True, door_asked)  # what changed it comes after
    assert not preferred(STATE, "fact", IN_SAFE, "", False, True, door_asked)
