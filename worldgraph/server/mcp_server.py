"""worldgraph as an MCP server (the official ``mcp`` SDK): the same WorldModel calls as the REST
API, as tools an LLM can use without the docs.

One builder serves both transports. Over stdio (``worldgraph mcp``) the tenant is fixed by
``--tenant``. Mounted at ``/mcp`` by ``worldgraph serve`` (streamable HTTP), every request carries
a bearer key and ``auth.BearerTenant`` puts its tenant in the request's scope, where the tools
read it: a tool never takes a tenant as an argument. Tool arguments are the Python API's, less
``tenant_id``. Errors come back as tool errors whose text is the REST error body
(``{"error": {"type", "message", "field"}}``).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from worldgraph import __version__
from worldgraph.server.auth import forbidden, scope_actor, scope_scopes, scope_tenant
from worldgraph.server.errors import ApiError, describe, validation_error
from worldgraph.server.models import (
    DEFAULT_MIN_SIMILARITY,
    AgentExperience,
    AgentRound,
    CanvasContext,
    ConversationTurn,
    GraphDelta,
    RecallOptions,
)
from worldgraph.server.routes import refuse_unsandboxed
from worldgraph.server.scopes import tool_scope
from worldgraph.server.world_text import DEFAULT_MAX_CHARS, MAX_DEPTH, WorldFilter, filtered_graph, world_text
from worldgraph.service import WorldModel

T = TypeVar("T")
# every write tool's idempotency_key: the same key and arguments again return the first answer
IdemKey = Annotated[str | None, Field(description="Optional: send the same key when you retry this call (e.g. after "
                                                  "a timeout); within 24 h the first answer comes back and nothing "
                                                  "is stored twice. A new call needs a new key.")]
_F = TypeVar("_F", bound=Callable[..., Any])

INSTRUCTIONS = """worldgraph is your long-term memory and your model of the environments you act in.
Before a task or a decision, call context first with what you are about to do: one short block of
what you know that matters (current facts and rules of the world, then past runs like it), each
line citing an id. search_world finds more facts and rules by meaning; recall_experiences more past
runs, with what was learned. After a task, call record_experience with what you did and how it
went; when a human rates a run, call submit_feedback. In an environment (a game, a website, a tool),
call observe_round after each round; end your response with the lines 'FLAG_CURIOSITY: yes' and
'CURIOSITY_REASON: <why>' when the round taught you something about how the world works, and the
world graph (entities, states, transitions, facts, rules) is updated in the background. world_graph shows
what is known about an environment, compactly (filter it with name, node_type or around)."""

READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
DESTRUCTIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=False, openWorldHint=False)

# Internal columns of a stored episode that are no use to a model; "id" repeats "episode_id".
_NOT_FOR_MODELS = frozenset({"id", "tenant_id", "ts"})

EnvName = Annotated[str, Field(description="The environment's name, e.g. CottageEscape (letters, digits, "
                                           "'_', '-', '.').")]


class _BodyError(ToolError):
    """A tool's failure whose text is already the REST error body."""


def tool_error_body(exc: ToolError) -> str:
    """The REST error body (JSON text) of a tool call's failure, whatever raised it: our own
    errors keep their body; the SDK's check of the arguments against the tool's schema (a
    pydantic ValidationError, whose text carries a URL and the SDK's "Error executing tool"
    prefix) becomes REST's 422 body naming the first field, as ``/v1`` answers the same input;
    an unknown tool is ``not_found``."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, _BodyError):
            return str(cause)
        if isinstance(cause, ValidationError):
            return json.dumps(validation_error(cause.errors()).body())
        cause = cause.__cause__
    message = str(exc)
    if message.startswith("Unknown tool: "):
        return json.dumps(ApiError(404, "not_found", message, "name").body())
    return json.dumps(ApiError(400, "bad_request", message).body())


class _Server(MCPServer):
    """MCPServer whose tool errors are exactly the REST error body (no SDK prefix), and whose tool
    descriptions are their docstrings without the source's indentation (a model reads them)."""

    def tool(self, name: str | None = None, title: str | None = None, description: str | None = None,
             annotations: ToolAnnotations | None = None, icons: list[Any] | None = None,
             meta: dict[str, Any] | None = None, structured_output: bool | None = None) -> Callable[[_F], _F]:
        def register(fn: _F) -> _F:
            text = description if description is not None else inspect.cleandoc(fn.__doc__ or "")
            return super(_Server, self).tool(name=name, title=title, description=text, annotations=annotations,
                                             icons=icons, meta=meta, structured_output=structured_output)(fn)

        return register

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise  # a crash: the SDK answers with a generic text and logs it
        except ToolError as exc:
            raise _BodyError(tool_error_body(exc)) from exc


def build_mcp(world_model: Callable[[], WorldModel], tenant: str | None = None, actor: str | None = None) -> MCPServer:
    """The MCP server over ``world_model()``. ``tenant``: the fixed tenant of a stdio server;
    None for HTTP, where each request's key names it. ``actor``: who a stdio server's forgets name
    in their audit (the OS user who started it); over HTTP the key names who acts."""
    server: MCPServer = _Server("worldgraph", title="worldgraph memory and world model",
                                  instructions=INSTRUCTIONS, version=__version__, log_level="WARNING")

    def actor_of(ctx: Context) -> str | None:
        """Who the audit of a forget names: the request's key (``auth.key_actor``), or the stdio actor."""
        request = ctx.request_context.request if ctx.request_context is not None else None
        return (scope_actor(request) if request is not None else None) or actor

    def call(ctx: Context, tool: str, fn: Callable[[WorldModel, str], T]) -> T:
        """Run ``fn`` for the caller's tenant, as the tool ``tool``. Over HTTP the key must have the
        scope ``scopes.OPERATIONS`` gives the tool (a tool without a row is refused); a stdio
        server is the operator's own process, its tenant fixed by ``--tenant``."""
        request = ctx.request_context.request if ctx.request_context is not None else None
        who = scope_tenant(request) if request is not None else tenant
        if who is None:
            raise _BodyError(json.dumps({"error": {"type": "unauthorized", "field": None,
                                                   "message": "no tenant: send Authorization: Bearer <key>"}}))
        need = tool_scope(tool)
        if need is None:
            raise _BodyError(json.dumps(ApiError(403, "forbidden", f"the tool {tool} has no row in "
                                                 "worldgraph.server.scopes.OPERATIONS; it is refused until it has "
                                                 "one", "scope").body()))
        if request is not None and need not in (scope_scopes(request) or frozenset()):
            raise _BodyError(json.dumps(forbidden(need).body()))
        try:
            if tool == "cypher" and request is not None:  # an API key's query: only in the sandbox
                refuse_unsandboxed(world_model())
            return fn(world_model(), who)
        except Exception as exc:  # noqa: BLE001 - every failure goes back as the REST error body
            raise _BodyError(json.dumps(describe(exc).body())) from exc

    @server.tool(annotations=WRITE)
    def record_experience(
        experience: Annotated[AgentExperience, Field(description="The run: agent_id, task_type, task_description and "
                                                            "outcome are required; add learnings!")],
        ctx: Context,
        canvas: Annotated[CanvasContext | None, Field(description="The canvas the agent worked on, if any.")] = None,
        idempotency_key: IdemKey = None,
        replace: Annotated[bool, Field(description="When experience.episode_id is already recorded, forget that "
                                                   "run and record this one under its id (an upsert).")] = False,
    ) -> dict[str, Any]:
        """Record one finished agent run (task, approach, outcome, learnings, confidence) so it can be
        recalled later. Returns {"episode_id"}: keep it to rate the run with submit_feedback."""
        return {"episode_id": call(ctx, "record_experience",
                                   lambda wm, t: wm.record_experience(t, experience, canvas, idempotency_key,
                                                                      replace=replace))}

    @server.tool(annotations=READ)
    def recall_experiences(
        query: Annotated[str, Field(description="What you are about to do, in plain words.")],
        ctx: Context,
        agent_role: Annotated[str | None, Field(description="Only runs of this role (e.g. Finance); "
                                                            "null for all.")] = None,
        limit: Annotated[int, Field(gt=0, le=100, description="How many results at most.")] = 5,
        options: Annotated[RecallOptions | None, Field(description=f"Filters: min_similarity (default "
                                                             f"{DEFAULT_MIN_SIMILARITY}; lower it to see more), "
                                                             "success_only, agent_id, canvas_ids, date_range, "
                                                             "metadata, min_feedback_score, ...")] = None,
    ) -> dict[str, Any]:
        """Find past runs similar to a task, best first. Each result has the task, outcome, learnings,
        relevance_score (0-1), semantic_score and feedback_score. Use before starting a task."""
        return {"results": call(ctx, "recall_experiences",
                                lambda wm, t: wm.recall_experiences(t, agent_role, query, limit, options))}

    @server.tool(annotations=WRITE)
    def submit_feedback(
        episode_id: Annotated[str, Field(description="The run's id (from record_experience or a recall result).")],
        score: Annotated[float, Field(ge=-1, le=1, description="-1 harmful, 0 neutral, 1 excellent.")],
        ctx: Context,
        notes: Annotated[str | None, Field(description="Why.")] = None,
        category: Annotated[str | None, Field(description="e.g. accuracy, helpfulness, safety.")] = None,
        created_by: Annotated[str | None, Field(description="Who rates it.")] = None,
        idempotency_key: IdemKey = None,
    ) -> dict[str, Any]:
        """Rate a recorded run. Well-rated runs rank higher in recall, poorly rated ones lower.
        Returns the rating and the run's new average (0-1) and count."""
        return call(ctx, "submit_feedback",
                    lambda wm, t: dict(wm.submit_feedback(t, episode_id, score, notes, category, created_by,
                                                          idempotency_key)))

    @server.tool(annotations=READ)
    def get_agent_episodes(
        agent_id: Annotated[str, Field(description="The agent's id.")],
        ctx: Context,
        limit: Annotated[int, Field(gt=0, le=1000, description="How many, newest first.")] = 30,
    ) -> dict[str, Any]:
        """An agent's newest recorded runs, newest first (each names its id episode_id)."""
        episodes = call(ctx, "get_agent_episodes", lambda wm, t: wm.get_agent_episodes(t, agent_id, limit))
        return {"episodes": [{k: v for k, v in e.items() if k not in _NOT_FOR_MODELS} for e in episodes]}

    @server.tool(annotations=READ)
    def readiness(
        agent_id: Annotated[str, Field(description="The agent's id.")],
        ctx: Context,
        window: Annotated[int, Field(gt=0, le=1000, description="How many of its newest runs to judge.")] = 30,
    ) -> dict[str, Any]:
        """The graduation exam of an agent over its last `window` runs: zero-intervention ratio,
        constitutional compliance, mean confidence and success rate against their thresholds.
        Returns the ratios, score, ready (true when every check passes) and the failing checks."""
        return call(ctx, "readiness", lambda wm, t: wm.readiness(t, agent_id, window))

    @server.tool(annotations=WRITE)
    def record_conversation(
        session_id: Annotated[str, Field(description="The chat, thread or run the turns belong to.")],
        turns: Annotated[list[ConversationTurn], Field(description="The turns in order: {speaker or role, text "
                                                                   "(empty for a tool call), timestamp (optional), "
                                                                   "metadata (optional)}.")],
        ctx: Context,
        idempotency_key: IdemKey = None,
    ) -> dict[str, Any]:
        """Record a conversation turn by turn, in order: one recallable run per turn (the speaker is
        the agent, the text the task, the turn before it the input), linked in time order within the
        session. All turns are checked before any is recorded. Returns {"episode_ids"}."""
        raw = [turn.model_dump(exclude_unset=True) for turn in turns]  # the facade checks plain turns
        return {"episode_ids": call(ctx, "record_conversation",
                                    lambda wm, t: wm.record_conversation(t, session_id, raw,
                                                                         idempotency_key=idempotency_key))}

    @server.tool(annotations=READ)
    def get_episode(
        episode_id: Annotated[str, Field(description="The run's id (from record_experience, list_episodes or a "
                                                     "recall result).")],
        ctx: Context,
    ) -> dict[str, Any]:
        """One recorded run by its id: task, approach, outcome, learnings, confidence, timestamp."""
        return dict(call(ctx, "get_episode", lambda wm, t: wm.get_episode(t, episode_id)))

    @server.tool(annotations=READ)
    def list_episodes(
        ctx: Context,
        agent_id: Annotated[str | None, Field(description="Only this agent's runs.")] = None,
        session_id: Annotated[str | None, Field(description="Only this session's runs.")] = None,
        since: Annotated[str | None, Field(description="ISO-8601 date/time, inclusive.")] = None,
        until: Annotated[str | None, Field(description="ISO-8601 date/time, exclusive.")] = None,
        limit: Annotated[int, Field(gt=0, le=100, description="Page size.")] = 20,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page, unchanged.")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="Conditions on the runs' metadata fields: "
                                                                     "{field: value} or {field: {\"$gt\": 3}}.")] = None,
    ) -> dict[str, Any]:
        """Recorded runs, newest first, a page at a time. Returns {"episodes", "next_cursor"}: pass
        next_cursor back (with the same filters) for the next page; null means the last page."""
        page = call(ctx, "list_episodes",
                    lambda wm, t: wm.list_episodes(t, agent_id, session_id, since, until, limit, cursor, metadata))
        return page.to_dict("episodes")

    @server.tool(annotations=DESTRUCTIVE)
    def forget_episode(
        episode_id: Annotated[str, Field(description="The run to forget, for good.")],
        ctx: Context,
    ) -> dict[str, Any]:
        """Forget a recorded run for good: it, its ratings and (for a round) its scene packet leave every
        read path now and the files soon after. Only when a human asks to erase it. Needs a key with the
        'forget' scope. Returns what was removed."""
        return call(ctx, "forget_episode", lambda wm, t: wm.forget_episode(t, episode_id, actor_of(ctx)).to_dict())

    @server.tool(annotations=DESTRUCTIVE)
    def forget_agent(
        agent_id: Annotated[str, Field(description="The agent (or conversation speaker) whose every run to forget.")],
        ctx: Context,
    ) -> dict[str, Any]:
        """Forget every recorded run of one agent for good (a person who asks to be erased is often one
        speaker of the conversations): they leave every read path now and the files soon after; turns that
        quoted them are derived again. Only when a human asks. Needs the 'forget' scope. Returns what was
        removed."""
        return call(ctx, "forget_agent", lambda wm, t: wm.forget_agent(t, agent_id, actor_of(ctx)).to_dict())

    @server.tool(annotations=DESTRUCTIVE)
    def forget_session(
        session_id: Annotated[str, Field(description="The session (chat, thread or run) whose every run to forget.")],
        ctx: Context,
    ) -> dict[str, Any]:
        """Forget every recorded run of one session (a chat, a thread) for good: they leave every read path
        now and the files soon after. Only when a human asks. Needs the 'forget' scope. Returns what was
        removed."""
        return call(ctx, "forget_session", lambda wm, t: wm.forget_session(t, session_id, actor_of(ctx)).to_dict())

    @server.tool(annotations=WRITE)
    def observe_round(env_name: EnvName, round: Annotated[AgentRound, Field(description="The round.")],  # noqa: A002
                      ctx: Context, idempotency_key: IdemKey = None) -> dict[str, Any]:
        """Report one round of acting in an environment (action, observations before and after, your full
        response). It is recorded as a run; if your response ends with 'FLAG_CURIOSITY: yes' and
        'CURIOSITY_REASON: ...', a scene packet is returned and the world graph is updated from it in the
        background when the server has an LLM. Returns {"packet": ... or null, "llm_configured", "note"}:
        the note says what becomes of the packet (e.g. it stays pending: no LLM is configured)."""
        from worldgraph.config import llm_configured
        from worldgraph.server.routes import world_update_note

        def run(wm: WorldModel, t: str) -> dict[str, Any]:
            packet = wm.observe_round(t, env_name, round.model_dump(), idempotency_key)
            pending = int(packet is not None and packet.get("status") == "pending")
            return {"packet": packet, "llm_configured": llm_configured(), "note": world_update_note(wm, pending)}

        return call(ctx, "observe_round", run)

    @server.tool(annotations=WRITE)
    def apply_delta(
        env_name: EnvName,
        delta: GraphDelta,
        ctx: Context,
        scene: Annotated[str | None, Field(description="Why: kept as the update's trigger reason.")] = None,
        idempotency_key: IdemKey = None,
    ) -> dict[str, Any]:
        """Merge facts you already extracted into an environment's world graph: {entities, states, edges,
        rules}. Edges: containment (parent -> child), transition (state -> state, with the action),
        episodic (node -> scene), fact (any other kind, entity -> entity, with a snake_case predicate
        such as works_at; single_valued: true when the subject has one at a time). Refs name items of
        the same delta (their ref), or existing nodes by id or type:name. A newer fact closes what it
        contradicts (kept as history). Returns the merge report: created, merged, closed ids and dropped
        items with reasons."""
        return call(ctx, "apply_delta",
                    lambda wm, t: wm.apply_delta(t, env_name, delta, scene, idempotency_key).to_dict())

    @server.tool(annotations=READ, structured_output=False)
    def world_graph(
        env_name: EnvName,
        ctx: Context,
        node_type: Annotated[str | None, Field(description="Only nodes of this type (e.g. room, item, door_state) "
                                                           "or kind (entity, state).")] = None,
        name: Annotated[str | None, Field(description="Only nodes whose name contains this (any case).")] = None,
        around: Annotated[str | None, Field(description="Only the neighbourhood of this node (its id, type:name or "
                                                        "name): what contains it, what it contains, its states, "
                                                        "transitions and facts, to `depth` steps.")] = None,
        depth: Annotated[int, Field(ge=0, le=MAX_DEPTH, description="Steps from `around`.")] = 1,
        history: Annotated[bool, Field(description="Also closed facts (where things were, former states, "
                                                   "retired rules).")] = False,
        max_chars: Annotated[int, Field(ge=500, le=1_000_000, description="Cut the text answer at this many "
                                                                          "characters; the last line says what "
                                                                          "was left out.")] = DEFAULT_MAX_CHARS,
        format: Annotated[Literal["text", "json"], Field(description="text: counts and one line per current "
                                                                     "fact; json: every record (large), "
                                                                     "with the same filters.")] = "text",  # noqa: A002
    ) -> str:
        """What is known about an environment. By default a compact text: counts, then the current
        facts one per line (rules IF -> THEN; entities with where they are and their attributes;
        current states; facts as subject predicate object; transitions with their actions), at most
        max_chars characters, ending with
        what was left out. Narrow it with name, node_type or around; history=true adds closed facts;
        format="json" returns the full records (nodes, edges, rules, scenes, meta)."""
        flt = WorldFilter(node_type=node_type, name=name, around=around, depth=depth, history=history)

        def run(wm: WorldModel, t: str) -> str:
            graph = wm.world_graph(t, env_name)
            if format == "json":
                return json.dumps(filtered_graph(graph, flt), ensure_ascii=False, separators=(",", ":"), default=str)
            return world_text(graph, env_name, flt, max_chars)

        return call(ctx, "world_graph", run)

    @server.tool(annotations=READ, structured_output=False)
    def context(
        query: Annotated[str, Field(min_length=1, description="What you are about to do, or the question you "
                                                              "face, in plain words.")],
        ctx: Context,
        agent_role: Annotated[str | None, Field(description="Only past runs of this role (e.g. Finance); null for "
                                                            "all.")] = None,
        env_name: Annotated[str | None, Field(description="Only this environment's facts and rules; null for "
                                                          "every environment.")] = None,
        max_tokens: Annotated[int, Field(ge=1, le=100_000, description="The block's size at most, in "
                                                                       "tokens.")] = 1500,
    ) -> str:
        """Call this first, before a task or a decision: what you know that matters for it, as one
        block ready to read. The current facts and rules of your world model come first (where
        things are now, what actions do, if-then rules), then the past runs most like this one; every
        line starts with the [start of its record's id] (get_episode takes an episode's). Use
        search_world for more facts, recall_experiences for more past runs."""
        return call(ctx, "context",
                    lambda wm, t: wm.context(t, query, agent_role, env_name, max_tokens).text)

    @server.tool(annotations=READ, structured_output=False)
    def search_world(
        query: Annotated[str, Field(min_length=1, description="What to look for, in words: where is the brass "
                                                              "key? what opens the chest? who works at acme?")],
        ctx: Context,
        env_name: Annotated[str | None, Field(description="Only this environment; null for every "
                                                          "environment.")] = None,
        k: Annotated[int, Field(ge=1, le=100, description="How many records at most, best first.")] = 10,
        as_of: Annotated[str | None, Field(description="A past moment (ISO 8601): what held then ranks "
                                                       "first. Null: now.")] = None,
        format: Annotated[Literal["text", "json"], Field(description="text: one line per record with its first "
                                                                     "evidence and 3 facts around it; json: every "
                                                                     "field (all evidence, 10 facts around "
                                                                     "each).")] = "text",  # noqa: A002
    ) -> str:
        """Search your world model by meaning: entities, states, facts (every relation as a sentence, e.g.
        "the brass key is in the kitchen table") and if-then rules. Each record says whether it holds
        now or when it stopped (current ones rank first unless as_of asks for the past), its
        confidence and evidence, and the current facts around it."""
        from worldgraph.server.hits_text import hits_text

        def run(wm: WorldModel, t: str) -> str:
            hits = wm.search_world(t, query, env_name, k, as_of)
            if format == "json":
                return json.dumps({"hits": [h.model_dump() for h in hits]}, ensure_ascii=False, separators=(",", ":"))
            return hits_text(hits, query)

        return call(ctx, "search_world", run)

    @server.tool(annotations=READ)
    def cypher(
        query: Annotated[str, Field(description="Read-only Cypher that filters every MATCH on $tenant_id, e.g. "
                                                "MATCH (r:Rule {tenant_id: $tenant_id}) RETURN r.condition, "
                                                "r.outcome LIMIT 10")],
        ctx: Context,
        params: Annotated[dict[str, Any] | None, Field(description="More parameters; $tenant_id is bound "
                                                                   "for you.")] = None,
    ) -> dict[str, Any]:
        """Explore the graph with read-only Cypher (either store). Labels: Episode, Agent, Feedback,
        Canvas, Scene, WorldNode (Entity / State), Rule; relationships CONTAINS, TRANSITION {action},
        EPISODIC, FACT {predicate, single_valued} (facts of any kind), CONCERNS, PRODUCED, PERFORMED_BY,
        RATES. Returns {"rows"}."""
        return {"rows": call(ctx, "cypher", lambda wm, t: wm.cypher(t, query, params))}

    return server
