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
from worldgraph.world.merge.state import MergeBase

SIMILAR = 0.8  # token-set Jaccard at or above which two rule texts say the same thing


class RulesMixin(MergeBase):
    _rule_tokens: dict[str, frozenset[str]] | None  # current rule id -> condition tokens
    _rule_postings: dict[str, set[str]]  # condition token -> current rule ids
    _rules_without_tokens: set[str]  # current rules whose condition has no token

    def _init_rules(self) -> None:
        self._rule_tokens, self._rule_postings, self._rules_without_tokens = None, {}, set()

    def _resolve(self, ref: str, want_kind: str | None) -> str | None:  # RefsMixin's
        raise NotImplementedError

    def _unresolved(self, ref: str, want_kind: str | None = None) -> str:  # RefsMixin's
        raise NotImplementedError

    def _rules(self, entries: list[Entry]) -> None:
        parsed: list[tuple[int, Any]] = []
        raws = {e.index: e.raw for e in entries}
        for e in entries:
            if e.item is None:
                self._drop("rule", e.index, e.reason or "invalid", e.raw)
            else:
                parsed.append((e.index, e.item))
        for n, (i, item) in enumerate(parsed):
            later = [j for j, other in parsed[n + 1:] if _contradicts(item, other)]
            if later:
                self._drop("rule", i, f"superseded by rules[{later[-1]}]: same condition, another outcome", raws[i])
                continue
            for problem in item.linked_ref_problems:
                self._note("rule", i, problem)
            linked: list[str] = []
            for ref in item.linked_refs:
                nid = self._resolve(ref, None)
                if nid is None:
                    self._note("rule", i, f"linked ref {ref!r} {self._unresolved(ref)}; left out of linked_node_ids")
                elif nid not in linked:
                    linked.append(nid)
            self._upsert_rule(item, linked)

    def _upsert_rule(self, item: Any, linked: list[str]) -> None:
        # Only current rules whose condition is similar can take the evidence or be closed:
        # ``candidates`` holds every such rule (and maybe some more), in id order.
        candidates = self._similar_condition_rules(item.condition)
        best: tuple[float, str] | None = None
        for rid in candidates:
            r = self._rule(rid) or {}
            score = min(jaccard(item.condition, r.get("condition", "")), jaccard(item.outcome, r.get("outcome", "")))
            if score >= SIMILAR and (best is None or score > best[0]):
                best = (score, rid)
        others = {other_id: self._rule(other_id) for other_id in candidates}
        rid = best[1] if best else rule_id(self.t, self.env, item.condition, item.outcome)
        old = self._rule(rid)
        if old is None:
            rec: RuleRecord = self._new_record(  # type: ignore[assignment]
                rid, item.confidence, condition=item.condition, outcome=item.outcome, linked_node_ids=linked)
            self._add_evidence(rec, item.evidence, item.confidence, new=True)
            self.rules[rid] = rec
            self.report.created["rules"].append(rid)
        else:
            rec = self._touch_rule(rid)
            rec["linked_node_ids"] = list(dict.fromkeys([*rec.get("linked_node_ids", []), *linked]))
            self._add_evidence(rec, item.evidence, item.confidence)
            if rid not in self.report.created["rules"] and rid not in self.report.merged["rules"]:
                self.report.merged["rules"].append(rid)
            if (ended := rec.get("valid_to")) is not None and self.at >= ended:
                self._reopen(rec, "rules")
        self._index_rule(rid, rec)
        newer: list[str] = []
        for other_id, other in others.items():
            if other_id == rid or other is None or not _contradicts(item, other):
                continue
            if (other.get("valid_from") or "") > self.at:
                newer.append(other["valid_from"])  # a newer rule already replaced this one
            else:
                self._close(self._touch_rule(other_id), "rules")
                self._unindex_rule(other_id)
        if newer and rec.get("valid_to") is None:
            self._close(rec, "rules", at=min(newer))
            self._unindex_rule(rid)

    def _similar_condition_rules(self, condition: str) -> list[str]:
        """Ids (sorted) of current rules that may have a condition similar to ``condition``: a
        superset of those with ``jaccard(condition, rule condition) >= SIMILAR``, found through
        the token -> rule index instead of a scan of every rule.

        Prefix filtering: Jaccard(A, B) >= 0.8 needs |A & B| >= 0.8 |A | B| > 0.75 |A|, so B holds
        at least m = max(1, floor(3|A| / 4)) tokens of A and therefore one of any |A| - m + 1 of
        them; we probe A's rarest tokens. An empty token set is similar only to an empty one."""
        if self._rule_tokens is None:
            self._rule_tokens = {}
            for rid, r in {**self.view.rules, **self.rules}.items():
                if r.get("valid_to") is None:
                    self._index_rule(rid, r)
        tokens = _tokens(condition)
        if not tokens:
            return sorted(self._rules_without_tokens)
        postings = self._rule_postings
        probes = len(tokens) - max(1, (3 * len(tokens)) // 4) + 1
        found: set[str] = set()
        for tok in sorted(tokens, key=lambda t: (len(postings.get(t, ())), t))[:probes]:
            found.update(postings.get(tok, ()))
        return sorted(found)

    def _index_rule(self, rid: str, rec: Any) -> None:
        if self._rule_tokens is None or rid in self._rule_tokens:
            return
        tokens = _tokens(rec.get("condition", ""))
        self._rule_tokens[rid] = tokens
        if not tokens:
            self._rules_without_tokens.add(rid)
        for tok in tokens:
            self._rule_postings.setdefault(tok, set()).add(rid)

    def _unindex_rule(self, rid: str) -> None:
        tokens = self._rule_tokens.pop(rid, None) if self._rule_tokens is not None else None
        if tokens is None:
            return
        self._rules_without_tokens.discard(rid)
        for tok in tokens:
            self._rule_postings[tok].discard(rid)


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


@lru_cache(maxsize=1 << 16)
def _cached_tokens(text: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(normalise_name(text))) - _ARTICLES
