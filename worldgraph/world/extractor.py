"""Scene packet + graph summary -> a validated JSON graph delta, through any OpenAI-compatible
chat completions server; a repair round asks about exactly the dropped items.

One call asks for the delta (structured output when the server supports it); the answer is
parsed once (``delta.parse_delta``) and gets at most one repair round:
- an answer that is not a delta at all (not JSON, not an object with the four arrays, over
  ``max_delta_items``) is asked for again whole, with the errors; if the second answer is not one
  either, the extraction fails and nothing is written;
- an answer whose items are partly unusable (a missing name, an unknown relation, and, through the
  caller's ``check``, refs that resolve to nothing) is asked about THOSE items only, each with
  its reason; the corrected items of the answer are added to the first answer, and the merge
  drops what is still wrong, listing it in the MergeReport.
A server that cannot be reached leaves the packet pending, to be retried later.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from collections.abc import Callable
from string import Template
from typing import TYPE_CHECKING, Any

from worldgraph.config import WorldGraphConfig, openai_endpoint
from worldgraph.errors import DeltaValidationError, ExtractionError
from worldgraph.kg.records import DroppedItem, SceneRecord
from worldgraph.prompts import load_prompt
from worldgraph.world.delta.parse import ParsedDelta, parse_delta

if TYPE_CHECKING:  # imported at the first call: ~1 s of every process's start (cold start) otherwise
    import openai

log = logging.getLogger(__name__)

# What we ask the server to enforce, best first. A server that rejects a mode with HTTP 400
# (older vLLM / Ollama / LM Studio builds lack json_schema) gets the next one from then on.
MODES = ("json_schema", "json_object", "none")
SCENE_FIELDS = (
    "env_name", "current_round", "trigger_reason", "action", "before_observation",
    "after_observation", "feedback", "admissible_commands", "latest_response",
    "recent_history_excerpt",
)
RETRY_HINT = "the scene packet stays pending; run `worldgraph world retry` once the server is up"
_MAX_ERRORS = 20
_MAX_ECHO_CHARS = 20_000  # a runaway answer is not sent back whole in the repair round
_FENCE_RE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```$", re.DOTALL)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


class LLMUnavailableError(ExtractionError):
    """The server could not be reached, timed out or failed (5xx): worth retrying later."""

    def __init__(self, message: str, base_url: str) -> None:
        self.base_url = base_url
        super().__init__(message)


class DeltaExtractor:
    """Turns scene packets into graph deltas with ``config.llm_model``.

    ``client`` is an ``openai.OpenAI``; without one it is built on first use from
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (so a WorldModel without an LLM still opens).
    """

    def __init__(self, config: WorldGraphConfig, client: openai.OpenAI | None = None) -> None:
        self.config = config
        self._client = client
        self._mode = MODES[0]
        self._schema: dict[str, Any] | None = None
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- public

    @property
    def mode(self) -> str:
        """The response_format in use: json_schema, json_object or none (after fallbacks)."""
        return self._mode

    @property
    def client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                self._client = _client_from_env(self.config)
            return self._client

    @property
    def base_url(self) -> str:
        """The LLM server as messages name it: scheme, host and port only (``url_host``), never
        the credentials or the path a configured address may carry."""
        return url_host(self.address)

    @property
    def address(self) -> str:
        """The full configured address: for the operator's log only."""
        return str(self.client.base_url).rstrip("/")

    def extract(self, scene: SceneRecord, summary_text: str,
                check: Callable[[ParsedDelta], list[DroppedItem]] | None = None) -> ParsedDelta:
        """The parsed delta for ``scene``. ``check`` (optional) names the items the merge would
        drop beyond parsing (unresolved refs): they are asked about in the repair round too.
        Raises ExtractionError (LLMUnavailableError when the server is the problem,
        DeltaValidationError when the answer is)."""
        messages: list[dict[str, str]] = build_messages(scene, summary_text)
        raw = self._complete(messages)
        delta, errors = self._check(raw)
        messages.append({"role": "assistant", "content": raw[:_MAX_ECHO_CHARS]})
        if delta is None:
            messages.append({"role": "user", "content": Template(load_prompt("repair")).substitute(
                errors="\n".join(f"- {e}" for e in errors[:_MAX_ERRORS]))})
            raw = self._complete(messages)
            delta, errors = self._check(raw)
            if delta is None:
                raise DeltaValidationError(errors, raw[:2000])
            return delta
        dropped = delta.dropped()
        if check is not None:
            seen = {(d.kind, d.index) for d in dropped}
            dropped += [d for d in check(delta) if (d.kind, d.index) not in seen]
        if not dropped:
            return delta
        messages.append({"role": "user", "content": Template(load_prompt("repair_items")).substitute(
            items="\n".join(_describe_drop(d) for d in dropped[:_MAX_ERRORS]))})
        raw = self._complete(messages)
        fixed, errors = self._check(raw)
        if fixed is None:
            log.info("scene %s: the repair answer was not a delta (%s); the merge drops the %d bad items",
                     scene.get("id"), "; ".join(errors[:3]), len(dropped))
            return delta
        return delta.extended(fixed)

    # ---------------------------------------------------------------- the call

    def _complete(self, messages: list[dict[str, str]]) -> str:
        try:
            return self._call(messages)
        except ExtractionError as exc:  # users see the host; the operator's log has the full address
            log.warning("the LLM call to %s (model %s) failed: %s", self.address, self.config.llm_model, exc)
            raise

    def _call(self, messages: list[dict[str, str]]) -> str:
        import openai

        client = self.client
        while True:
            mode = self._mode
            kwargs: dict[str, Any] = {}
            if mode == "json_schema":
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "graph_delta", "schema": self._wire_schema(), "strict": False},
                }
            elif mode == "json_object":
                kwargs["response_format"] = {"type": "json_object"}
            try:
                completion = client.chat.completions.create(
                    model=self.config.llm_model, messages=messages, **kwargs  # type: ignore[arg-type]
                )
            except openai.BadRequestError as exc:
                if mode != MODES[-1] and _rejects_response_format(exc):
                    self._fall_back(mode)
                    continue
                raise ExtractionError(
                    f"the LLM server at {self.base_url} rejected the request (HTTP 400): "
                    f"{_api_message(exc)}; check WORLDGRAPH_LLM_MODEL={self.config.llm_model!r}"
                ) from exc
            except openai.APITimeoutError as exc:
                raise LLMUnavailableError(
                    f"the LLM server at {self.base_url} did not answer within "
                    f"{self.config.llm_timeout_seconds:g}s (WORLDGRAPH_LLM_TIMEOUT_SECONDS); {RETRY_HINT}",
                    self.base_url,
                ) from exc
            except openai.APIConnectionError as exc:
                raise LLMUnavailableError(
                    f"cannot reach the LLM server at {self.base_url} ({_cause(exc)}); check "
                    f"OPENAI_BASE_URL; {RETRY_HINT}",
                    self.base_url,
                ) from exc
            except openai.APIStatusError as exc:
                raise _status_error(exc, self.base_url, self.config.llm_model) from exc
            except openai.OpenAIError as exc:
                raise ExtractionError(f"the LLM call to {self.base_url} failed: {_clip(str(exc))}") from exc
            return _content(completion)

    def _fall_back(self, mode: str) -> None:
        with self._lock:  # remembered for every later call of this extractor
            if self._mode == mode:
                self._mode = MODES[MODES.index(mode) + 1]

    def _wire_schema(self) -> dict[str, Any]:
        # $schema / $id are for our validator; some servers reject unknown top-level keywords.
        return {k: v for k, v in self._delta_schema().items() if k not in ("$schema", "$id")}

    def _delta_schema(self) -> dict[str, Any]:
        if self._schema is None:
            from worldgraph.world.delta.parse import load_delta_schema

            self._schema = load_delta_schema()
        return self._schema

    # ---------------------------------------------------------------- validation

    def _check(self, raw: str) -> tuple[ParsedDelta | None, list[str]]:
        """``(delta, errors)``: the parsed delta when the answer is one (an object with the four
        arrays, within ``max_delta_items``), else None and what the model can act on."""
        text = strip_fences(raw)
        if not text:
            return None, ["the answer was empty: return a JSON object"]
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, [f"the answer is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]
        try:
            return parse_delta(_drop_nulls(obj), max_items=self.config.max_delta_items), []
        except DeltaValidationError as exc:
            return None, [_clip(e) for e in exc.errors] or [str(exc)]


# ---------------------------------------------------------------- prompt


def build_messages(scene: SceneRecord, summary_text: str) -> list[dict[str, str]]:
    """The system and user messages for one scene. The scene and the summary go in data blocks
    whose marker lines carry a random boundary, so text inside cannot fake the end marker."""
    boundary = secrets.token_hex(8)
    packet = {k: scene.get(k) for k in SCENE_FIELDS}
    user = Template(load_prompt("user")).substitute(
        env_name=scene.get("env_name", ""),
        current_round=scene.get("current_round", ""),
        boundary=boundary,
        graph_summary=summary_text.strip() or "(empty)",
        scene_json=_packet_json(packet),
    )
    return [{"role": "system", "content": load_prompt("system").strip()}, {"role": "user", "content": user}]


def _packet_json(packet: dict[str, Any]) -> str:
    """One field a line, each value compact JSON: readable, and quotes / newlines escaped."""
    rows = [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in packet.items()]
    return "{\n" + ",\n".join(rows) + "\n}"


def strip_fences(raw: str) -> str:
    """The JSON inside an answer: without <think> blocks, ```json fences or prose around it."""
    text = _THINK_RE.sub("", raw or "").strip()
    if m := _FENCE_RE.match(text):
        return m.group(1).strip()
    if text and not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            return text[start : end + 1]
    return text


# ---------------------------------------------------------------- helpers


def _client_from_env(config: WorldGraphConfig) -> openai.OpenAI:
    import openai

    base_url, api_key = openai_endpoint()
    if api_key is None and base_url is None:
        raise ExtractionError(
            "no LLM configured: set OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL (any "
            "OpenAI-compatible server: vLLM, Ollama, LM Studio); " + RETRY_HINT.split(";")[0]
        )
    return openai.OpenAI(
        api_key=api_key or "not-needed",  # local servers ignore the key, the client wants one
        base_url=base_url,
        timeout=config.llm_timeout_seconds,
        max_retries=config.llm_max_retries,
    )


def url_host(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: what a message may show of an address (a URL may carry
    a user and password, or a token in its path or query)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a malformed port: show nothing of it rather than the raw text
        return "(an unreadable address)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}" if parts.scheme and host else "(an unreadable address)"


def _drop_nulls(obj: Any) -> Any:
    """``"action": null`` in an item means "not given": models often write optional fields as
    null, which the schema (strings) would reject and cost a repair round for nothing."""
    if not isinstance(obj, dict):
        return obj
    out = dict(obj)
    for key in ("entities", "states", "edges", "rules"):
        items = out.get(key)
        if isinstance(items, list):
            out[key] = [
                {k: v for k, v in item.items() if v is not None} if isinstance(item, dict) else item
                for item in items
            ]
    return out


def _describe_drop(d: DroppedItem) -> str:
    item = json.dumps(d.item, ensure_ascii=False) if not isinstance(d.item, str) else d.item
    return f"- {d.kind}s[{d.index}]: {d.reason}\n  item: {_clip(item, 1000)}".replace("entitys[", "entities[")


def _rejects_response_format(exc: openai.BadRequestError) -> bool:
    text = f"{_api_message(exc)} {exc.param or ''} {exc.body!r}".lower()
    return any(word in text for word in ("response_format", "json_schema", "json_object", "response format"))


def _status_error(exc: openai.APIStatusError, base_url: str, model: str) -> ExtractionError:
    code = exc.status_code
    msg = _api_message(exc)
    if code >= 500 or code in (408, 409, 429):
        return LLMUnavailableError(
            f"the LLM server at {base_url} failed with HTTP {code} ({msg}); {RETRY_HINT}", base_url
        )
    if code in (401, 403):
        hint = "check OPENAI_API_KEY"
    elif code == 404:
        hint = f"check OPENAI_BASE_URL (it usually ends in /v1) and WORLDGRAPH_LLM_MODEL={model!r}"
    else:
        hint = f"check WORLDGRAPH_LLM_MODEL={model!r}"
    return ExtractionError(f"the LLM server at {base_url} answered HTTP {code} ({msg}); {hint}")


def _content(completion: Any) -> str:
    choices = getattr(completion, "choices", None) or []
    if not choices:
        return ""
    message = choices[0].message
    return (message.content or "") if message is not None else ""


def _api_message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return _clip(str(inner["message"]))
        if isinstance(inner, str):
            return _clip(inner)
    return _clip(exc.message)


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return _clip(f"{type(cause).__name__}: {cause}") if cause else type(exc).__name__


def _path(parts: Any) -> str:
    return "/".join(str(p) for p in parts) or "(root)"


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
