"""Merge step for if-then rules: similar rules merge, contradicted ones close.

A rule is ``ids.rule_id(condition, outcome)``, but a current rule whose condition and outcome are
both similar (token-set Jaccard >= 0.8) takes the new evidence instead. A rule closes the current
rules with a similar condition and an outcome that is not similar; within one delta the later of
two such rules wins. On the timeline (``merge.state``): a contradicting rule that started after the
update time is newer, so the late rule enters closed (until that one started) instead of closing
it. A closed rule asserted again after it closed is reopened (rules are identities that
linked_node_ids and refs point at).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from worldgraph.kg.ids import normalise_name, rule_id
from worldgraph.kg.records import RuleRecord
from worldgraph.world.delta.parse import Entry
from worldgraph.world.merge.refs import resolve_ref, unresolved_reason
from worldgraph.world.merge.state import (
    MergeState,
    add_evidence,
    close,
    drop,
    find_rule,
    new_record,
    note,
    reopen,
    touch_rule,
)

SIMILAR = 0.8  # token-set Jaccard at or above which two rule texts say the same thing


def merge_rules(state: MergeState, entries: list[Entry]) -> None:
    """Merge the delta's rules in order (a rule a later one of the delta contradicts is dropped);
    linked refs resolve like edge refs, one that does not is left out with a note."""
    parsed: list[tuple[int, Any]] = []
    raws = {e.index: e.raw for e in entries}
    for e in entries:
        if e.item is None:
            drop(state, "rule", e.index, e.reason or "invalid", e.raw)
        else:
            parsed.append((e.index, e.item))
    for n, (i, item) in enumerate(parsed):
        later = [j for j, other in parsed[n + 1:] if _contradicts(item, other)]
        if later:
            drop(state, "rule", i, f"superseded by rules[{later[-1]}]: same condition, another outcome", raws[i])
            continue
        for problem in item.linked_ref_problems:
            note(state, "rule", i, problem)
        linked: list[str] = []
        for ref in item.linked_refs:
            nid = resolve_ref(state, ref, None)
            if nid is None:
                note(state, "rule", i, f"linked ref {ref!r} {unresolved_reason(state, ref)}; left out of linked_node_ids")
            elif nid not in linked:
                linked.append(nid)
        _upsert_rule(state, item, linked)


def _upsert_rule(state: MergeState, item: Any, linked: list[str]) -> None:
    """The similar current rule takes the evidence (else a new or reopened record); the rules
    it contradicts close, or it enters closed when one of them is newer (see the module doc)."""
    # Only current rules whose condition is similar can take the evidence or be closed:
    # ``candidates`` holds every such rule (and maybe some more), in id order.
    candidates = _similar_condition_rules(state, item.condition)
    best: tuple[float, str] | None = None
    for rid in candidates:
        r = find_rule(state, rid) or {}
        score = min(jaccard(item.condition, r.get("condition", "")), jaccard(item.outcome, r.get("outcome", "")))
        if score >= SIMILAR and (best is None or score > best[0]):
            best = (score, rid)
    others = {other_id: find_rule(state, other_id) for other_id in candidates}
    rid = best[1] if best else rule_id(state.t, state.env, item.condition, item.outcome)
    old = find_rule(state, rid)
    if old is None:
        rec: RuleRecord = new_record(  # type: ignore[assignment]
            state, rid, item.confidence, condition=item.condition, outcome=item.outcome, linked_node_ids=linked)
        add_evidence(state, rec, item.evidence, item.confidence, new=True)
        state.rules[rid] = rec
        state.report.created["rules"].append(rid)
    else:
        rec = touch_rule(state, rid)
        rec["linked_node_ids"] = list(dict.fromkeys([*rec.get("linked_node_ids", []), *linked]))
        add_evidence(state, rec, item.evidence, item.confidence)
        if rid not in state.report.created["rules"] and rid not in state.report.merged["rules"]:
            state.report.merged["rules"].append(rid)
        if (ended := rec.get("valid_to")) is not None and state.at >= ended:
            reopen(state, rec, "rules")
    _index_rule(state, rid, rec)
    newer: list[str] = []
    for other_id, other in others.items():
        if other_id == rid or other is None or not _contradicts(item, other):
            continue
        if (other.get("valid_from") or "") > state.at:
            newer.append(other["valid_from"])  # a newer rule already replaced this one
        else:
            close(state, touch_rule(state, other_id), "rules")
            _unindex_rule(state, other_id)
    if newer and rec.get("valid_to") is None:
        close(state, rec, "rules", at=min(newer))
        _unindex_rule(state, rid)


def _similar_condition_rules(state: MergeState, condition: str) -> list[str]:
    """Ids (sorted) of current rules that may have a condition similar to ``condition``: a
    superset of those with ``jaccard(condition, rule condition) >= SIMILAR``, found through
    the token -> rule index instead of a scan of every rule.

    Prefix filtering: Jaccard(A, B) >= 0.8 needs |A & B| >= 0.8 |A | B| > 0.75 |A|, so B holds
    at least m = max(1, floor(3|A| / 4)) tokens of A and therefore one of any |A| - m + 1 of
    them; we probe A's rarest tokens. An empty token set is similar only to an empty one."""
    if state.rule_tokens is None:
        state.rule_tokens = {}
        for rid, r in {**state.view.rules, **state.rules}.items():
            if r.get("valid_to") is None:
                _index_rule(state, rid, r)
    tokens = _tokens(condition)
    if not tokens:
        return sorted(state.rules_without_tokens)
    postings = state.rule_postings
    probes = len(tokens) - max(1, (3 * len(tokens)) // 4) + 1
    found: set[str] = set()
    for tok in sorted(tokens, key=lambda t: (len(postings.get(t, ())), t))[:probes]:
        found.update(postings.get(tok, ()))
    return sorted(found)


def _index_rule(state: MergeState, rid: str, rec: Any) -> None:
    if state.rule_tokens is None or rid in state.rule_tokens:
        return
    tokens = _tokens(rec.get("condition", ""))
    state.rule_tokens[rid] = tokens
    if not tokens:
        state.rules_without_tokens.add(rid)
    for tok in tokens:
        state.rule_postings.setdefault(tok, set()).add(rid)


def _unindex_rule(state: MergeState, rid: str) -> None:
    tokens = state.rule_tokens.pop(rid, None) if state.rule_tokens is not None else None
    if tokens is None:
        return
    state.rules_without_tokens.discard(rid)
    for tok in tokens:
        state.rule_postings[tok].discard(rid)

def jaccard(a: str, b: str) -> float:
    """Token-set Jaccard of two texts after normalisation, articles left out (CJK characters
    are tokens)."""
    ta, tb = _tokens(a), _tokens(b)
    if not ta and not tb:
        return 1.0
    return len(ta & tb) / len(ta | tb)


def _contradicts(item: Any, other: Any) -> bool:
    """Same condition (similar), another outcome (not similar): the newer one replaces the older."""
    cond = other.condition if hasattr(other, "condition") else other.get("condition", "")
    out = other.outcome if hasattr(other, "outcome") else other.get("outcome", "")
    return jaccard(item.condition, cond) >= SIMILAR and jaccard(item.outcome, out) < SIMILAR


_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")  # noqa: E501


_ARTICLES = frozenset({"a", "an", "the"})


def _tokens(text: str) -> frozenset[str]:
    """The token set of a rule text (cached: the same rule texts are compared on every merge)."""
    if isinstance(text, str):
        return _cached_tokens(text)
    return frozenset(_TOKEN.findall(normalise_name(text))) - _ARTICLES


def clear_token_cache() -> None:
    """Forget the rule texts cut into tokens so far (a purge's memo caches of words)."""
    _cached_tokens.cache_clear()


@lru_cache(maxsize=1 << 16)
def _cached_tokens(text: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(normalise_name(text))) - _ARTICLES
