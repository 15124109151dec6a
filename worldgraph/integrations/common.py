"""What the framework adapters share: the two faces of one model, the fixed tenant, stable ids,
and the text of a chat message. Public API only (``worldgraph``'s own exports)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Generator
from typing import Any, TypeVar

from worldgraph import AsyncWorldModel, InvalidInputError, NotFoundError, WorldModel

__all__ = ["Call", "Steps", "arun", "bind", "call", "content_text", "forget_turns", "run", "session_turns", "stable_id"]

T = TypeVar("T")
# A call of the model: (method name, args, kwargs). An adapter writes each operation once, as
# ``Steps``: a generator that yields the calls it needs and gets their results back (or their
# exception thrown in); ``run`` answers them with the WorldModel, ``arun`` awaits AsyncWorldModel.
Call = tuple[str, tuple[Any, ...], dict[str, Any]]
Steps = Generator[Call, Any, T]


def call(method: str, *args: Any, **kwargs: Any) -> Call:
    return method, args, kwargs


def run(steps: Steps[T], model: WorldModel) -> T:
    """The operation ``steps``, each call made on ``model`` in this thread."""
    try:
        method, args, kwargs = next(steps)
        while True:
            try:
                result = getattr(model, method)(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - handed to the operation, which raises it or answers
                method, args, kwargs = steps.throw(exc)
                continue
            method, args, kwargs = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def arun(steps: Steps[T], model: AsyncWorldModel) -> T:
    """The operation ``steps``, each call awaited on ``model`` (a worker thread: the loop stays free)."""
    try:
        method, args, kwargs = next(steps)
        while True:
            try:
                result = await getattr(model, method)(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - handed to the operation, which raises it or answers
                method, args, kwargs = steps.throw(exc)
                continue
            method, args, kwargs = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]

_IDS = uuid.UUID("6f1c8a2e-55a4-4c1e-9a43-2b1f0d8e7c11")  # the namespace of the adapters' uuid5 ids


def bind(model: WorldModel | AsyncWorldModel, tenant_id: str) -> tuple[WorldModel, AsyncWorldModel, str]:
    """The model's sync and async faces and the tenant, checked: the tenant is given once, by the
    code that makes the adapter, and nothing a framework passes later can change it."""
    if isinstance(model, AsyncWorldModel):
        sync, aio = model.sync, model
    elif isinstance(model, WorldModel):
        sync, aio = model, AsyncWorldModel(model)
    else:
        raise InvalidInputError("model", f"must be a WorldModel or an AsyncWorldModel, got {type(model).__name__}")
    if not isinstance(tenant_id, str) or not tenant_id.strip():
        raise InvalidInputError("tenant_id", "must be a non-empty string (the tenant every call of this adapter uses)")
    return sync, aio, tenant_id


def stable_id(kind: str, *parts: str) -> str:
    """A deterministic episode id for a framework's own key (UUID5 of the parts): the same key is
    the same episode, so writing it again replaces it."""
    return f"{kind}-{uuid.uuid5(_IDS, json.dumps([kind, *parts], ensure_ascii=False))}"


def content_text(content: Any) -> str:
    """The words of a message's content: a string as it is; a list of parts (OpenAI and
    LangChain's content blocks) joined by their text; anything else as compact JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
        return "\n".join(t for t in texts if t)
    return json.dumps(content, ensure_ascii=False, default=str)


# ------------------------------------------------------------------ conversation sessions
PAGE = 1_000  # episodes read per step when a session is read back


def session_turns(tenant_id: str, session_id: str, limit: int | None = None) -> Steps[list[Any]]:
    """The session's episodes (its turns) oldest first; ``limit``: only the newest that many."""
    if limit is not None and limit <= 0:
        return []
    out: list[Any] = []
    cursor = None
    while limit is None or len(out) < limit:
        page = yield call("list_episodes", tenant_id, session_id=session_id, cursor=cursor,
                          limit=PAGE if limit is None else min(PAGE, limit - len(out)))
        out.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    out.reverse()
    return out


def forget_turns(tenant_id: str, session_id: str, forgotten_by: str) -> Steps[int]:
    """Forget every turn of the session with ``forget_session`` (one store transaction, each turn
    as ``forget_episode`` forgets it, the derived copies derived again); how many. An empty
    session is nothing to forget."""
    try:
        report = yield call("forget_session", tenant_id, session_id, forgotten_by=forgotten_by)
    except NotFoundError:
        return 0
    return int(report.removed.get("episodes", 0))
