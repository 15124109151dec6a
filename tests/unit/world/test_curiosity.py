from __future__ import annotations

from datetime import datetime, timezone

import pytest

from worldgraph.errors import InvalidInputError
from worldgraph.world.curiosity import (
    MAX_OBSERVATION_CHARS,
    AgentRound,
    RoundHistory,
    build_scene_packet,
    parse_curiosity,
)

REASON = "首次进入客厅，发现前门打开后仍然不能直接离开"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("I open the door.\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: the door was locked",
         (True, "the door was locked")),
        (f"> go west\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: {REASON}", (True, REASON)),
        ("text\nflag_curiosity:YES\ncuriosity_reason:   new room  ", (True, "new room")),
        ("text\n  FLAG_CURIOSITY :  true \n", (True, None)),
        ("text\nFLAG_CURIOSITY: y\nCURIOSITY_REASON: x", (True, "x")),
        ("text\n**FLAG_CURIOSITY:** yes\n**CURIOSITY_REASON:** found a key", (True, "found a key")),
        ("text\n**FLAG_CURIOSITY**: **yes**\n`CURIOSITY_REASON: locked door`", (True, "locked door")),
        ("text\n`FLAG_CURIOSITY: yes`", (True, None)),
        ("text\nFLAG_CURIOSITY：yes\nCURIOSITY_REASON：前门锁着", (True, "前门锁着")),
        ("text\n- FLAG_CURIOSITY: yes.\n- CURIOSITY_REASON: bullet", (True, "bullet")),
        ("text\nCURIOSITY_REASON: reason first\nFLAG_CURIOSITY: yes", (True, "reason first")),
        ("text\nFLAG_CURIOSITY: yes\n\n\n\nCURIOSITY_REASON: blank lines do not count\n\n",
         (True, "blank lines do not count")),
        ("text\nFLAG_CURIOSITY: no\nCURIOSITY_REASON: nothing", (False, None)),
        ("text\nFLAG_CURIOSITY: false", (False, None)),
        ("text\nFLAG_CURIOSITY: yesterday", (False, None)),
        ("text\nFLAG_CURIOSITY:", (False, None)),
        ("text\nFLAG_CURIOSITY yes", (False, None)),  # no separator: malformed
        ("text\nCURIOSITY_REASON: a reason without a flag", (False, None)),
        ("just an answer", (False, None)),
        ("", (False, None)),
        # the last occurrence wins
        ("FLAG_CURIOSITY: yes\nFLAG_CURIOSITY: no", (False, None)),
    ],
)
def test_parse_curiosity_table(response: str, expected: tuple[bool, str | None]) -> None:
    assert parse_curiosity(response) == expected


def test_flag_in_the_middle_of_a_long_response_is_not_a_trigger() -> None:
    response = (
        "Protocol: end with FLAG_CURIOSITY: yes when you learn something.\n"
        "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: quoted\n"
        + "\n".join(f"step {i}: I look around." for i in range(10))
    )
    assert parse_curiosity(response) == (False, None)
    # ... but within the last five non-empty lines it is
    assert parse_curiosity(response + "\nFLAG_CURIOSITY: yes") == (True, None)
    assert parse_curiosity("FLAG_CURIOSITY: yes\n" + "a\nb\nc\nd\n") == (True, None)
    assert parse_curiosity("FLAG_CURIOSITY: yes\n" + "a\nb\nc\nd\ne\n") == (False, None)


def test_agent_round_defaults_extra_keys_and_errors() -> None:
    rnd = AgentRound.from_input({"round": 3, "action": "open door", "score": 10, "feedback": None})
    assert rnd.round == 3
    assert rnd.action == "open door"
    assert rnd.feedback == ""
    assert rnd.admissible_commands == []
    assert rnd.response == ""
    assert AgentRound.from_input(rnd) is rnd

    with pytest.raises(InvalidInputError) as missing:
        AgentRound.from_input({"action": "look"})
    assert missing.value.field == "round.round"
    with pytest.raises(InvalidInputError) as negative:
        AgentRound.from_input({"round": -1})
    assert negative.value.field == "round.round"
    assert ">= 0" in negative.value.rule or "greater" in negative.value.rule
    with pytest.raises(InvalidInputError) as bad_list:
        AgentRound.from_input({"round": 1, "admissible_commands": [{"x": 1}]})
    assert bad_list.value.field.startswith("round.admissible_commands")
    with pytest.raises(InvalidInputError):
        AgentRound.from_input(["not", "a", "dict"])  # type: ignore[arg-type]


def test_history_excerpt_is_per_env_rolling_and_bounded() -> None:
    history = RoundHistory(max_rounds=3, field_chars=40, max_chars=600)
    for i in range(6):
        history.add("t1", "env", AgentRound(
            round=i, action=f"action {i}", after_observation=f"observation {i} " + "x" * 500,
            feedback="fb " * 100,
        ))
    history.add("t1", "other-env", AgentRound(round=99, action="elsewhere"))
    history.add("t2", "env", AgentRound(round=77, action="other tenant"))

    excerpt = history.excerpt("t1", "env")
    lines = excerpt.splitlines()
    assert [line.split("]")[0] for line in lines] == ["[round 3", "[round 4", "[round 5"]
    assert len(excerpt) <= 600
    assert all(len(line) < 200 for line in lines)  # each field cut to 40 characters
    assert "elsewhere" not in excerpt and "other tenant" not in excerpt
    assert history.excerpt("t1", "nothing-yet") == ""

    tight = RoundHistory(max_rounds=5, field_chars=1000, max_chars=150)
    for i in range(5):
        tight.add("t", "e", AgentRound(round=i, action="a" * 100))
    assert len(tight.excerpt("t", "e")) <= 150
    assert "[round 4]" in tight.excerpt("t", "e")  # the newest round survives the cut

    off = RoundHistory(max_rounds=0)
    off.add("t", "e", AgentRound(round=1, action="a"))
    assert off.excerpt("t", "e") == ""


def test_scene_packet_has_every_seed_field() -> None:
    rnd = AgentRound(
        round=12,
        action="open front door",
        before_observation="You are in the living room. The front door is closed.",
        after_observation="The front door is open, but a guard blocks the way.",
        feedback="You cannot leave yet.",
        admissible_commands=["go north", "open front door"],
        response=f"I open it.\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: {REASON}",
    )
    flagged, reason = parse_curiosity(rnd.response)
    assert flagged
    now = datetime(2026, 11, 30, 5, 0, tzinfo=timezone.utc)
    packet = build_scene_packet("tenant-a", "JerichoEnv905", rnd, reason, "[round 11] action: look",
                                "scene-1", now, episode_id="ep-1")
    seed_fields = {
        "env_name": "JerichoEnv905",
        "current_round": 12,
        "trigger_reason": REASON,
        "action": "open front door",
        "before_observation": rnd.before_observation,
        "after_observation": rnd.after_observation,
        "feedback": "You cannot leave yet.",
        "admissible_commands": ["go north", "open front door"],
        "latest_response": rnd.response,
        "recent_history_excerpt": "[round 11] action: look",
    }
    for key, value in seed_fields.items():
        assert packet[key] == value, key
    assert packet["id"] == "scene-1"
    assert packet["tenant_id"] == "tenant-a"
    assert packet["status"] == "pending"
    assert packet["error"] is None
    assert packet["episode_id"] == "ep-1"
    assert packet["created_at"] == packet["updated_at"] == "2026-11-30T05:00:00.000000+00:00"


def test_scene_packet_cuts_huge_observations_in_the_middle() -> None:
    big = "HEAD " + "x" * 50_000 + " TAIL"
    packet = build_scene_packet("t", "e", AgentRound(round=1, after_observation=big), None, "", "s", None)
    text = packet["after_observation"]
    assert len(text) == MAX_OBSERVATION_CHARS
    assert text.startswith("HEAD") and text.endswith("TAIL") and "characters cut" in text
    assert packet["trigger_reason"] == ""
