/**
 * Typed client for the worldgraph REST API.
 *
 * `createWorldgraphClient` is the openapi-fetch client over the generated `paths` (every route,
 * body and response typed from the service's OpenAPI document); `Worldgraph` has one method per
 * route (`ROUTES` lists which) and throws `WorldgraphError` (status, type, message, field) on an error.
 *
 *   const wg = new Worldgraph({ baseUrl: "http://127.0.0.1:8765", apiKey: process.env.WORLDGRAPH_KEY! });
 *   const [id] = await wg.record({ agent_id: "a1", task_type: "t", task_description: "...", outcome: "success" });
 *   await wg.feedback(id, 0.8);
 *   const results = await wg.recall("what I am about to do", { agentRole: "Finance" });
 *   const ctx = await wg.context("what I am about to do", { envName: "kitchen" });  // ctx.text: for the prompt
 */
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths };
export type Schemas = components["schemas"];
export type AgentExperience = Schemas["AgentExperience"];
export type CanvasContext = Schemas["CanvasContext"];
export type RecallOptions = Schemas["RecallOptions"];
export type RecallResult = Schemas["RecallResultOut"];
export type Feedback = Schemas["FeedbackOut"];
export type Episode = Schemas["EpisodeOut"];
export type Readiness = Schemas["Readiness"];
export type AgentRound = Schemas["AgentRound"];
export type ScenePacket = Schemas["ScenePacket"];
export type RoundAnswer = Schemas["RoundResponse"];
export type RetryAnswer = Schemas["RetryResponse"];
export type ConversationTurn = Schemas["ConversationTurn"];
export type Snapshot = Schemas["SnapshotOut"];
export type SnapshotInput = Schemas["Snapshot"];
export type ImportResult = Schemas["ImportResult"];
export type Health = Schemas["Health"];
export type MergeReport = Schemas["MergeReportOut"];
export type WorldGraph = Schemas["WorldGraphOut"];
export type GraphDelta = paths["/v1/envs/{env}/deltas"]["post"]["requestBody"]["content"]["application/json"];
export type ErrorBody = Schemas["ErrorBody"];
export type EpisodePage = Schemas["EpisodePage"];
export type ForgetReport = Schemas["ForgetReportOut"];
export type AgentSummary = Schemas["AgentOut"];
export type EnvSummary = Schemas["EnvOut"];
export type WorldHit = Schemas["WorldHitOut"];
export type WorldContext = Schemas["ContextOut"];

export interface WorldgraphOptions {
  /** e.g. http://127.0.0.1:8765 */
  baseUrl: string;
  /** A key from `worldgraph keys create --tenant T`; it names the tenant. */
  apiKey: string;
  fetch?: typeof globalThis.fetch;
}

/** The typed openapi-fetch client for every route of the service. */
export function createWorldgraphClient(options: WorldgraphOptions): Client<paths> {
  return createClient<paths>({
    baseUrl: options.baseUrl.replace(/\/+$/, ""),
    headers: { Authorization: `Bearer ${options.apiKey}` },
    fetch: options.fetch,
  });
}

/** An error answer of the service: `{"error": {"type", "message", "field"}}` and its status. */
/** Options of every write: the same `idempotencyKey` (1-255 printable ASCII characters, e.g. a UUID)
 * on a retry with the same arguments returns the first answer within 24 h and stores nothing new;
 * the same key with other arguments is a 422, and a 409 while the first call is still answered. */
export interface Idempotent {
  idempotencyKey?: string;
}

function keyHeader(opts: Idempotent): { "Idempotency-Key"?: string } {
  return opts.idempotencyKey === undefined ? {} : { "Idempotency-Key": opts.idempotencyKey };
}

export class WorldgraphError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
    readonly field: string | null,
  ) {
    super(message);
    this.name = "WorldgraphError";
  }
}

interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

function unwrap<T>(answer: Answer<T>): T {
  if (answer.response.ok && answer.data !== undefined) return answer.data;
  const body = (answer.error as { error?: Partial<ErrorBody> } | undefined)?.error;
  throw new WorldgraphError(answer.response.status, body?.type ?? "error",
    body?.message ?? answer.response.statusText, body?.field ?? null);
}

/** Which `Worldgraph` method calls each route of the service ("METHOD path" -> method name). */
export const ROUTES = {
  "GET /health": "health",
  "POST /v1/experiences": "record",
  "POST /v1/conversations": "recordConversation",
  "POST /v1/recall": "recall",
  "POST /v1/episodes/{episode_id}/feedback": "feedback",
  "GET /v1/agents/{agent_id}/episodes": "episodes",
  "GET /v1/agents/{agent_id}/readiness": "readiness",
  "POST /v1/envs/{env}/rounds": "observeRound",
  "POST /v1/world/retry": "retryUpdates",
  "POST /v1/envs/{env}/deltas": "applyDelta",
  "GET /v1/envs/{env}/graph": "worldGraph",
  "GET /v1/envs/{env}/snapshot": "exportSnapshot",
  "PUT /v1/envs/{env}/snapshot": "importSnapshot",
  "GET /v1/envs/{env}/view": "view",
  "POST /v1/cypher": "cypher",
  "POST /v1/world/search": "searchWorld",
  "POST /v1/context": "context",
  "GET /v1/episodes": "listEpisodes",
  "GET /v1/episodes/{episode_id}": "getEpisode",
  "DELETE /v1/episodes/{episode_id}": "forgetEpisode",
  "DELETE /v1/agents/{agent_id}": "forgetAgent",
  "DELETE /v1/sessions/{session_id}": "forgetSession",
  "GET /v1/agents": "agents",
  "GET /v1/envs": "envs",
  "DELETE /v1/envs/{env}": "forgetEnv",
  "DELETE /v1/tenant": "forgetTenant",
  "GET /v1/stats": "stats",
  "GET /metrics": "metrics",
} as const satisfies Record<string, keyof Worldgraph>;

/** One method per route; each returns the data or throws WorldgraphError. */
export class Worldgraph {
  readonly api: Client<paths>;

  constructor(options: WorldgraphOptions) {
    this.api = createWorldgraphClient(options);
  }

  /** Liveness, version and graph store of the server (no key needed). */
  async health(): Promise<Health> {
    return unwrap(await this.api.GET("/health"));
  }

  /** Record one run or several (one transaction); their new episode ids. `replace`: an `episode_id`
   * already recorded is replaced (that episode forgotten, this one recorded under its id: an upsert).
   * With `idempotencyKey`, a retry with the same key and runs returns the first ids and stores
   * nothing new (see Idempotent). */
  async record(experiences: AgentExperience | AgentExperience[], canvases?: (CanvasContext | null)[],
               opts: { replace?: boolean } & Idempotent = {}): Promise<string[]> {
    const body = Array.isArray(experiences) ? { experiences, canvases: canvases ?? null } : experiences;
    return unwrap(await this.api.POST("/v1/experiences", {
      body, params: { query: { replace: opts.replace }, header: keyHeader(opts) } })).episode_ids;
  }

  /** Record a conversation turn by turn (one episode per turn, linked within the session); their ids. */
  async recordConversation(sessionId: string, turns: ConversationTurn[], opts: Idempotent = {}): Promise<string[]> {
    return unwrap(await this.api.POST("/v1/conversations", {
      body: { session_id: sessionId, turns }, params: { header: keyHeader(opts) } })).episode_ids;
  }

  /** Past runs like `query`, best first; `relevance_score` is in [0, 1]. */
  async recall(query: string, opts: { agentRole?: string; limit?: number; options?: RecallOptions } = {}): Promise<RecallResult[]> {
    const body = { query, agent_role: opts.agentRole ?? null, limit: opts.limit ?? 5, options: opts.options ?? null };
    return unwrap(await this.api.POST("/v1/recall", { body })).results;
  }

  /** Rate a run in [-1, 1]. */
  async feedback(episodeId: string, score: number,
                 opts: { notes?: string; category?: string; createdBy?: string } & Idempotent = {}): Promise<Feedback> {
    return unwrap(await this.api.POST("/v1/episodes/{episode_id}/feedback", {
      params: { path: { episode_id: episodeId }, header: keyHeader(opts) },
      body: { score, notes: opts.notes ?? null, category: opts.category ?? null, created_by: opts.createdBy ?? null },
    }));
  }

  /** An agent's newest runs, newest first. */
  async episodes(agentId: string, limit = 30): Promise<Episode[]> {
    return unwrap(await this.api.GET("/v1/agents/{agent_id}/episodes", {
      params: { path: { agent_id: agentId }, query: { limit } } })).episodes;
  }

  /** The graduation exam over an agent's last `window` runs. */
  async readiness(agentId: string, window = 30): Promise<Readiness> {
    return unwrap(await this.api.GET("/v1/agents/{agent_id}/readiness", {
      params: { path: { agent_id: agentId }, query: { window } } }));
  }

  /** Report a round: `packet` is the scene packet when it carried FLAG_CURIOSITY: yes, else null;
   * `llm_configured` false and `note` say when the packet stays pending because the server has no LLM. */
  async observeRound(env: string, round: AgentRound, opts: Idempotent = {}): Promise<RoundAnswer> {
    return unwrap(await this.api.POST("/v1/envs/{env}/rounds", {
      params: { path: { env }, header: keyHeader(opts) }, body: round }));
  }

  /** Re-run pending and failed scene packets now (all environments, or `env`); one report per packet. */
  async retryUpdates(opts: { env?: string; staleMinutes?: number } = {}): Promise<RetryAnswer> {
    return unwrap(await this.api.POST("/v1/world/retry", {
      params: { query: { env: opts.env ?? null, stale_minutes: opts.staleMinutes } } }));
  }

  /** Merge a graph delta you already have (no LLM). */
  async applyDelta(env: string, delta: GraphDelta, reason?: string, opts: Idempotent = {}): Promise<MergeReport> {
    return unwrap(await this.api.POST("/v1/envs/{env}/deltas", {
      params: { path: { env }, query: { reason: reason ?? null }, header: keyHeader(opts) }, body: delta }));
  }

  /** One environment's graph: nodes, edges, rules, scenes, meta. */
  async worldGraph(env: string): Promise<WorldGraph> {
    return unwrap(await this.api.GET("/v1/envs/{env}/graph", { params: { path: { env } } }));
  }

  /** An environment's canonical snapshot (nodes, edges, rules, scenes, meta). */
  async exportSnapshot(env: string): Promise<Snapshot> {
    return unwrap(await this.api.GET("/v1/envs/{env}/snapshot", { params: { path: { env } } }));
  }

  /** Load a snapshot into `env`, replacing its graph; what was loaded. */
  async importSnapshot(env: string, snapshot: SnapshotInput): Promise<ImportResult> {
    return unwrap(await this.api.PUT("/v1/envs/{env}/snapshot", { params: { path: { env } }, body: snapshot }));
  }

  /** The HTML page drawing an environment's graph. */
  async view(env: string): Promise<string> {
    const answer = await this.api.GET("/v1/envs/{env}/view", { params: { path: { env } }, parseAs: "text" });
    return unwrap(answer as Answer<string>);
  }

  /** Read-only, tenant-scoped Cypher (either store: the same rows on both). */
  async cypher(query: string, params?: Record<string, unknown>): Promise<Record<string, unknown>[]> {
    return unwrap(await this.api.POST("/v1/cypher", { body: { query, params: params ?? null } })).rows;
  }

  /** The world model's entities, states, facts (each edge as a sentence) and rules like `query`, best
   * first: each says whether it holds now (`current`, read at query time) or when it stopped
   * (`valid_to`), with its confidence, evidence and the current facts around it. `asOf` (ISO 8601)
   * ranks what held then first; `envName` keeps one environment. */
  async searchWorld(query: string, opts: { envName?: string; k?: number; asOf?: string } = {}): Promise<WorldHit[]> {
    const body = { query, env_name: opts.envName ?? null, k: opts.k ?? 10, as_of: opts.asOf ?? null };
    return unwrap(await this.api.POST("/v1/world/search", { body })).hits;
  }

  /** One prompt-ready block for `query`: current facts and rules first, then past runs (of `agentRole`),
   * within `maxTokens` (default 1500); every line cites its record's id, `citations` has the whole ids. */
  async context(query: string, opts: { agentRole?: string; envName?: string; maxTokens?: number } = {}): Promise<WorldContext> {
    const body = { query, agent_role: opts.agentRole ?? null, env_name: opts.envName ?? null,
                   max_tokens: opts.maxTokens ?? 1500 };
    return unwrap(await this.api.POST("/v1/context", { body }));
  }

  /** A page of episodes, newest first; pass the page's `next_cursor` as `cursor` for the next one. */
  async listEpisodes(opts: { agentId?: string; sessionId?: string; since?: string; until?: string; limit?: number;
                             cursor?: string; metadata?: Record<string, unknown> } = {}): Promise<EpisodePage> {
    return unwrap(await this.api.GET("/v1/episodes", { params: { query: {
      agent_id: opts.agentId, session_id: opts.sessionId, since: opts.since, until: opts.until, limit: opts.limit,
      cursor: opts.cursor, metadata: opts.metadata === undefined ? undefined : JSON.stringify(opts.metadata) } } }));
  }

  /** One episode by id (404: unknown, or another tenant's). */
  async getEpisode(episodeId: string): Promise<Record<string, unknown>> {
    return unwrap(await this.api.GET("/v1/episodes/{episode_id}", { params: { path: { episode_id: episodeId } } }));
  }

  /** Forget an episode for good (the key needs the `forget` scope). */
  async forgetEpisode(episodeId: string): Promise<ForgetReport> {
    return unwrap(await this.api.DELETE("/v1/episodes/{episode_id}", { params: { path: { episode_id: episodeId } } }));
  }

  /** Forget every episode of an agent, a conversation's speaker say (the `forget` scope). */
  async forgetAgent(agentId: string): Promise<ForgetReport> {
    return unwrap(await this.api.DELETE("/v1/agents/{agent_id}", { params: { path: { agent_id: agentId } } }));
  }

  /** Forget every episode of a session: a chat, a thread, a run (the `forget` scope). */
  async forgetSession(sessionId: string): Promise<ForgetReport> {
    return unwrap(await this.api.DELETE("/v1/sessions/{session_id}", { params: { path: { session_id: sessionId } } }));
  }

  /** The tenant's agents: id, role, episode count, last seen. */
  async agents(): Promise<AgentSummary[]> {
    return unwrap(await this.api.GET("/v1/agents", {})).agents;
  }

  /** The tenant's environments: graph version and counts. */
  async envs(): Promise<EnvSummary[]> {
    return unwrap(await this.api.GET("/v1/envs", {})).envs;
  }

  /** Forget an environment's world graph, scenes and packets (the `forget` scope). */
  async forgetEnv(env: string): Promise<ForgetReport> {
    return unwrap(await this.api.DELETE("/v1/envs/{env}", { params: { path: { env } } }));
  }

  /** Forget every record of the key's own tenant, its keys included: `confirm` must be that tenant's id. */
  async forgetTenant(confirm: string): Promise<ForgetReport> {
    return unwrap(await this.api.DELETE("/v1/tenant", { body: { confirm } }));
  }

  /** The server's Prometheus metrics, as text (no key needed; no tenant data). */
  async metrics(): Promise<string> {
    const answer = await this.api.GET("/metrics", { parseAs: "text" });
    return unwrap(answer as Answer<string>);
  }

  /** Counts of the key's tenant. */
  async stats(): Promise<Record<string, unknown>> {
    return unwrap(await this.api.GET("/v1/stats", {}));
  }
}
