"""Input limits: sizes, counts and nesting that no caller may exceed, checked before any work.

Every limit is a WorldGraphConfig field (so ``WORLDGRAPH_<FIELD>`` or a keyword of
``WorldModel.open`` raises it), and every refusal names the offending field, the limit and the
setting. Values are walked without recursion, so a value nested a million levels deep is
refused like any other instead of crashing the interpreter; lone surrogates (text that is not
Unicode, which no store can hold) and non-finite numbers (which JSON cannot hold) are refused
here too. Sizes are UTF-8 bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from worldgraph.config import ENV_PREFIX, WorldGraphConfig
from worldgraph.errors import DeltaValidationError, InvalidInputError

__all__ = ["MAX_PAGE", "check_batch", "check_delta_size", "check_query", "check_text", "check_value", "limit_rule",
           "utf8_size"]


MAX_PAGE = 1_000_000  # episodes one get_agent_episodes / readiness call may ask for


def limit_rule(what: str, size: int, limit: int, setting: str) -> str:
    """The words of a refusal: what is too big, the limit, and the setting that raises it."""
    return f"{what} {size}, over the limit of {limit} ({raise_hint(setting)})"


def raise_hint(setting: str) -> str:
    return f"raise it with the config field {setting} or {ENV_PREFIX}{setting.upper()}"


def utf8_size(text: str, field: str) -> int:
    """Bytes of ``text`` in UTF-8; text with a lone surrogate (not Unicode) is refused."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidInputError(field, f"is not valid Unicode text: lone surrogate {text[exc.start]!r} at "
                                f"position {exc.start} (send UTF-8 text)") from None


def check_text(value: Any, field: str, limit: int, setting: str) -> None:
    """One string: valid Unicode and at most ``limit`` bytes (anything else passes untouched)."""
    if isinstance(value, str):
        n = utf8_size(value, field)
        if n > limit:
            raise InvalidInputError(field, limit_rule("is UTF-8 bytes:", n, limit, setting))


def check_query(query: Any, cfg: WorldGraphConfig, field: str = "query") -> None:
    """A recall query: refused fast when longer than ``max_query_bytes``."""
    check_text(query, field, cfg.max_query_bytes, "max_query_bytes")


def check_batch(n: int, cfg: WorldGraphConfig, field: str = "experiences") -> None:
    if n > cfg.max_batch_experiences:
        raise InvalidInputError(field, limit_rule("has items:", n, cfg.max_batch_experiences, "max_batch_experiences")
                                + "; record it in several calls")


def check_value(value: Any, field: str, cfg: WorldGraphConfig, total_limit: int, total_setting: str) -> int:
    """Walk a JSON-like value (dicts, lists, pydantic models): every string valid Unicode and at
    most ``max_text_bytes``, every list at most ``max_list_items`` long, nesting at most
    ``max_nesting_depth`` containers, numbers finite, and the whole at most ``total_limit`` bytes
    (its text plus one byte a value: a lower bound of its JSON size, which also bounds the walk of
    a value that shares sub-objects). Returns that size. Paths are only spelled out for an error
    (each value carries a link to its parent instead): the walk is on every write's path."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    max_text, max_items, max_depth = cfg.max_text_bytes, cfg.max_list_items, cfg.max_nesting_depth
    total = 0
    stack: list[tuple[Any, _Ref, int]] = [(value, (None, field), 0)]
    while stack:
        v, ref, depth = stack.pop()
        if not isinstance(v, (dict, list, tuple)):
            total += 1 + _scalar_size(v, ref, max_text)
        else:
            total += 1
            if depth >= max_depth:
                raise InvalidInputError(_spell(ref), f"nests containers deeper than {max_depth} levels "
                                        f"({raise_hint('max_nesting_depth')})")
            if len(v) > max_items:
                raise InvalidInputError(_spell(ref), limit_rule("has items:", len(v), max_items, "max_list_items"))
            is_dict = isinstance(v, dict)
            pairs: Iterable[tuple[Any, Any]] = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in pairs:
                # The common cases inline (an ASCII key, an ASCII string, an int, a bool, None): the
                # walk is ~40 % of a record's validation, mostly calls and path tuples it needs only
                # for an error. Any other value takes the general path, which spells its path.
                if is_dict:
                    if type(k) is str and k.isascii():
                        total += len(k)
                    else:
                        key = k if isinstance(k, str) else str(k)
                        total += len(key) if key.isascii() else utf8_size(key, _spell((ref, key)))
                tx = type(x)
                if tx is str and x.isascii():
                    if len(x) > max_text:
                        raise InvalidInputError(_spell(_sub(ref, k, is_dict)),
                                                limit_rule("is UTF-8 bytes:", len(x), max_text, "max_text_bytes"))
                    total += 1 + len(x)
                elif tx is int or tx is bool or x is None:
                    total += 1
                elif isinstance(x, (dict, list, tuple)):
                    stack.append((x, _sub(ref, k, is_dict), depth + 1))
                    continue
                else:
                    total += 1 + _scalar_size(x, _sub(ref, k, is_dict), max_text)
                if total > total_limit:
                    break
        if total > total_limit:
            raise InvalidInputError(field, f"is more than {total_limit} bytes ({raise_hint(total_setting)})")
    return total


def _scalar_size(v: Any, ref: _Ref, max_text: int) -> int:
    """UTF-8 bytes of a string (at most ``max_text``, valid Unicode); 0 for any other scalar,
    which must be finite if it is a float."""
    if isinstance(v, str):
        n = len(v) if v.isascii() else utf8_size(v, _spell(ref))
        if n > max_text:
            raise InvalidInputError(_spell(ref), limit_rule("is UTF-8 bytes:", n, max_text, "max_text_bytes"))
        return n
    if isinstance(v, float) and not math.isfinite(v):
        raise InvalidInputError(_spell(ref), f"must be a finite number, got {v!r}")
    return 0


_Ref = tuple[Any, "str | int"]  # (parent's ref or None, key, list index, or the root field's name)


def _sub(ref: _Ref, k: Any, is_dict: bool) -> _Ref:
    """The ref of item ``k`` of the container at ``ref`` (a dict's key as a string, a list's index)."""
    return (ref, k if not is_dict or isinstance(k, str) else str(k))


def _spell(ref: _Ref) -> str:
    """The path of a value, e.g. ``experience.learnings[2]`` (lone surrogates in keys escaped)."""
    keys: list[str | int] = []
    node: Any = ref
    while node is not None:
        node, key = node
        keys.append(key)
    keys.reverse()
    out = str(keys[0])
    for key in keys[1:]:
        out += f"[{key}]" if isinstance(key, int) else "." + key.encode("utf-8", "backslashreplace").decode("utf-8")
    return out


def check_delta_size(delta: Any, cfg: WorldGraphConfig) -> None:
    """A delta given to apply_delta: at most ``max_delta_bytes`` (JSON text, or its strings)."""
    limit = cfg.max_delta_bytes
    if isinstance(delta, (bytes, bytearray)):
        size = len(delta)
    elif isinstance(delta, str):
        try:
            size = utf8_size(delta, "$")
        except InvalidInputError as exc:
            raise DeltaValidationError([f"$: {exc.rule}"]) from None
    elif isinstance(delta, dict):
        size = _json_size(delta, limit)
    else:
        return  # the structural check names the type
    if size > limit:
        raise DeltaValidationError([f"$: {limit_rule('is bytes:', size, limit, 'max_delta_bytes')}"])


def _json_size(value: Any, limit: int) -> int:
    """Roughly the bytes of ``value`` as JSON, walked iteratively, stopping once past ``limit``.
    Lone surrogates are left to validate_delta, which names their path."""
    size = 0
    stack = [value]
    seen = 0
    while stack and size <= limit:
        v = stack.pop()
        seen += 1
        if isinstance(v, str):
            size += len(v) + 2
        elif isinstance(v, dict):
            size += 2
            for k, x in v.items():
                size += len(str(k)) + 4
                stack.append(x)
        elif isinstance(v, (list, tuple)):
            size += 2 + len(v)
            stack.extend(v)
        else:
            size += len(json.dumps(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else 5
        if seen > 10 * limit:  # a value sharing sub-objects with itself
            return limit + 1
    return size
