// Records, rates and recalls against a real `worldgraph serve` (started here on a free port, with
// a temporary data folder, the hashing embedder and a key made by `worldgraph keys create`).
// WORLDGRAPH_BIN picks the command (default: the repository's .venv/bin/worldgraph).
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { createWorldgraphClient, ROUTES, Worldgraph, WorldgraphError, type AgentExperience } from "../src/index.js";

const repo = resolve(fileURLToPath(import.meta.url), "..", "..", "..", "..", "..");
const bin = process.env.WORLDGRAPH_BIN ?? join(repo, ".venv", "bin", "worldgraph");
const env = { ...process.env, WORLDGRAPH_EMBEDDING_PROVIDER: "hashing" };
const data = mkdtempSync(join(tmpdir(), "worldgraph-ts-"));
let server: ChildProcess;
let baseUrl = "";
let key = "";

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

function worldgraph(...args: string[]): any {
  return JSON.parse(execFileSync(bin, ["--data", data, ...args, "--json"], { env, encoding: "utf8" }));
}

before(async () => {
  key = worldgraph("keys", "create", "--tenant", "ts-client").key;
  const port = await freePort();
  baseUrl = `http://127.0.0.1:${port}`;
  server = spawn(bin, ["--data", data, "serve", "--port", String(port)], { env, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  server.stderr?.on("data", (chunk) => { log += chunk; });
  const deadline = Date.now() + 90_000;
  while (Date.now() < deadline) {
    if (server.exitCode !== null) throw new Error(`worldgraph serve exited: ${log}`);
    try {
      if ((await fetch(`${baseUrl}/health`)).ok) return;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`worldgraph serve did not start: ${log}`);
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server.once("exit", r));
    server.kill("SIGTERM");
    await exited;
  }
  rmSync(data, { recursive: true, force: true });
});

const run: AgentExperience = {
  agent_id: "fin-1", agent_role: "Finance", task_type: "reconciliation",
  task_description: "Reconcile SKU-123 inventory discrepancy", outcome: "success",
  confidence_score: 0.9, learnings: ["weighted average costing"],
};

test("records, rates and recalls", async () => {
  const wg = new Worldgraph({ baseUrl, apiKey: key });
  const [id] = await wg.record(run);
  const batch = await wg.record([
    { ...run, task_description: "Reconcile SKU-9 inventory count", outcome: "failure" },
    { ...run, agent_id: "dev-1", agent_role: "Developer", task_description: "Draw a revenue chart" },
  ]);
  assert.equal(batch.length, 2);

  const rated = await wg.feedback(id, 0.8, { category: "accuracy", notes: "spot on" });
  assert.equal(rated.count, 1);
  assert.equal(rated.average, 0.9);

  const results = await wg.recall("reconcile inventory discrepancy", {
    agentRole: "Finance", options: { min_similarity: 0 } });
  assert.equal(results[0].episode_id, id);
  assert.equal(results[0].feedback_score, 0.9);
  assert.deepEqual(new Set(results.map((r) => r.episode_id)), new Set([id, batch[0]]));

  const episodes = await wg.episodes("fin-1");
  assert.deepEqual(episodes.map((e) => e.id).sort(), [id, batch[0]].sort());
  const readiness = await wg.readiness("fin-1");
  assert.equal(readiness.episodes, 2);
  assert.equal(readiness.ready, false);
});

test("metadata, upsert and chat turns", async () => {
  const wg = new Worldgraph({ baseUrl, apiKey: key });
  const item = { ...run, episode_id: "item-ts-1", metadata: { user: "u1", n: 1 } };
  await wg.record(item);
  await assert.rejects(wg.record(item));
  await wg.record({ ...item, metadata: { user: "u1", n: 2 } }, undefined, { replace: true });
  const page = await wg.listEpisodes({ metadata: { user: "u1" } });
  assert.deepEqual(page.episodes.map((e) => [e.id, e.metadata]), [["item-ts-1", { user: "u1", n: 2 }]]);
  const hits = await wg.recall("reconcile inventory", { options: { min_similarity: 0, metadata: { n: { $gte: 2 } } } });
  assert.deepEqual(hits.map((h) => h.episode_id), ["item-ts-1"]);
  await wg.recordConversation("chat-ts", [{ role: "user", text: "hi" }, { role: "assistant", text: "" }]);
  const turns = await wg.listEpisodes({ sessionId: "chat-ts" });
  assert.deepEqual(turns.episodes.map((e) => e.agent_role), ["assistant", "user"]);
});

test("the world graph", async () => {
  const wg = new Worldgraph({ baseUrl, apiKey: key });
  const answer = await wg.observeRound("Kitchen", {
    round: 1, action: "take brass key", response: "ok\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: a key" });
  assert.equal(answer.packet?.status, "pending");
  assert.equal(answer.llm_configured, false);   // the server runs without OPENAI_* here
  assert.match(answer.note ?? "", /no LLM is configured/);
  const retried = await wg.retryUpdates({ env: "Kitchen" });
  assert.deepEqual(retried.reports.map((r) => r.scene_id), [answer.packet?.id]);
  assert.equal(retried.reports[0].ok, false);
  const report = await wg.applyDelta("Kitchen", {
    entities: [{ ref: "k", name: "brass key", type: "item" }, { ref: "t", name: "table", type: "furniture" }],
    states: [], edges: [{ relation: "containment", src_ref: "t", dst_ref: "k" }], rules: [] }, "ts test");
  assert.equal(report.created.nodes.length, 2);
  const graph = await wg.worldGraph("Kitchen");
  assert.deepEqual(graph.nodes.map((n) => n.name).sort(), ["brass key", "table"]);
  assert.match(await wg.view("Kitchen"), /brass key/);

  const snapshot = await wg.exportSnapshot("Kitchen");
  assert.deepEqual(snapshot.nodes.map((n) => n.name).sort(), ["brass key", "table"]);
  const loaded = await wg.importSnapshot("Kitchen", snapshot);
  assert.equal(loaded.counts.nodes, 2);
  assert.equal((await wg.health()).status, "ok");
});

test("the agent asks its world model: searchWorld and context", async () => {
  const wg = new Worldgraph({ baseUrl, apiKey: key });
  const people = [{ ref: "a", name: "alice", type: "person" }, { ref: "c", name: "acme corp", type: "company" },
                  { ref: "b", name: "beta labs", type: "company" }];
  const fact = (dst: string) => ({ relation: "fact", predicate: "works_at", single_valued: true, src_ref: "a",
                                   dst_ref: dst, evidence: `alice works at ${dst}` });
  await wg.applyDelta("Office", { entities: people, states: [], edges: [fact("c")], rules: [
    { condition: "a badge is lost", outcome: "the door stays shut", linked_refs: ["a"] }] });
  await wg.applyDelta("Office", { entities: people, states: [], edges: [fact("b")], rules: [] });
  // new records are indexed in the background: searchable a moment after the merge
  let hits = await wg.searchWorld("where does alice work?", { envName: "Office", k: 5 });
  for (const deadline = Date.now() + 60_000; !hits.some((h) => h.kind === "fact" && h.current) && Date.now() < deadline;) {
    await new Promise((r) => setTimeout(r, 200));
    hits = await wg.searchWorld("where does alice work?", { envName: "Office", k: 5 });
  }
  const facts = hits.filter((h) => h.kind === "fact");
  assert.ok(facts.length >= 1, JSON.stringify(hits));
  assert.equal(facts[0].current, true);        // beta labs now; acme corp closed by it, ranked below
  assert.match(facts[0].text, /beta labs/);
  assert.equal(facts[0].env_name, "Office");
  for (const h of facts.filter((f) => !f.current)) assert.notEqual(h.valid_to, null);

  const ctx = await wg.context("where does alice work?", { envName: "Office", maxTokens: 200 });
  assert.ok(ctx.tokens > 0 && ctx.tokens <= 200, String(ctx.tokens));
  assert.match(ctx.text, /beta labs/);
  assert.ok(ctx.citations.some((c) => c.id === facts[0].id && c.kind === "fact"));
  for (const c of ctx.citations) assert.ok(ctx.text.includes(`[${c.id.slice(0, 8)}`), c.id);

  await assert.rejects(wg.searchWorld("anything", { k: 0 }),
    (e: unknown) => e instanceof WorldgraphError && e.status === 422 && e.field === "k");
  await assert.rejects(wg.context("anything", { envName: "Attic" }),
    (e: unknown) => e instanceof WorldgraphError && e.status === 404 && e.field === "env_name");
});

test("conversations", async () => {
  const wg = new Worldgraph({ baseUrl, apiKey: key });
  const ids = await wg.recordConversation("chat-1", [
    { speaker: "bob", text: "Where is the brass key?" }, { speaker: "amy", text: "On the table." }]);
  assert.equal(ids.length, 2);
  assert.deepEqual((await wg.episodes("amy")).map((e) => e.id), [ids[1]]);
});

test("a retry with the same idempotency key returns the first answer", async () => {
  const wg = new Worldgraph({ baseUrl, apiKey: key });
  const once = { idempotencyKey: `retry-${Date.now()}` };
  const unique = { ...run, task_description: `Reconcile SKU-${Date.now()} once` };
  const first = await wg.record(unique, undefined, once);
  assert.deepEqual(await wg.record(unique, undefined, once), first);
  const [a, b] = [await wg.feedback(first[0], 0.4, { idempotencyKey: "rate-" + once.idempotencyKey }),
                  await wg.feedback(first[0], 0.4, { idempotencyKey: "rate-" + once.idempotencyKey })];
  assert.equal(a.id, b.id);
  assert.equal(b.count, 1);
  await assert.rejects(wg.record({ ...unique, task_description: "another run" }, undefined, once),
    (e: unknown) => e instanceof WorldgraphError && e.status === 422 && e.field === "idempotency_key");
});

test("forgets by person: an agent, a session", async () => {
  const forgetter = new Worldgraph({ baseUrl, apiKey: worldgraph("keys", "create", "--tenant", "ts-client", "--name",
    "ts-privacy", "--scope", "read,write,forget").key });
  const ids = await forgetter.recordConversation("chat/2", [
    { speaker: "cy", text: "hello" }, { speaker: "dee", text: "hi" }, { speaker: "cy", text: "bye" }]);
  const agent = await forgetter.forgetAgent("dee");
  assert.equal(agent.kind, "agent");
  assert.equal(agent.removed.episodes, 1);
  assert.equal(agent.removed.turn_contexts_rederived, 1);
  assert.equal(agent.forgotten_by, "ts-privacy");
  assert.equal((await forgetter.getEpisode(ids[2])).input_summary, "cy: hello");
  const session = await forgetter.forgetSession("chat/2");
  assert.equal(session.removed.episodes, 2);
  await assert.rejects(forgetter.forgetSession("chat/2"),
    (e: unknown) => e instanceof WorldgraphError && e.status === 404);
});

test("every route of the OpenAPI document has a method", () => {
  const doc = JSON.parse(readFileSync(resolve(repo, "clients", "typescript", "openapi.json"), "utf8"));
  const operations = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
    .flatMap(([path, ops]) => Object.keys(ops).map((method) => `${method.toUpperCase()} ${path}`));
  assert.deepEqual(operations.sort(), Object.keys(ROUTES).sort());
  for (const name of Object.values(ROUTES)) {
    assert.equal(typeof Worldgraph.prototype[name], "function", name);
  }
});

test("errors are typed", async () => {
  const wg = new Worldgraph({ baseUrl, apiKey: key });
  await assert.rejects(wg.feedback("no-such-episode", 0.5),
    (e: unknown) => e instanceof WorldgraphError && e.status === 404 && e.field === "episode_id");
  await assert.rejects(wg.record({ ...run, outcome: "meh" as "success" }),
    (e: unknown) => e instanceof WorldgraphError && e.status === 422 && e.field === "experience.outcome");
  await assert.rejects(wg.cypher("MATCH (e:Episode {tenant_id: $tenant_id}) SET e.outcome = 'x' RETURN e.id"),
    (e: unknown) => e instanceof WorldgraphError && e.status === 403 && e.type === "query_refused");  // read-only
  const rows = await wg.cypher("MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n");  // the embedded store
  assert.equal(rows.length, 1);

  const stranger = createWorldgraphClient({ baseUrl, apiKey: "wg_0000000000000000_nope" });
  const answer = await stranger.POST("/v1/recall", { body: { query: "anything", limit: 5 } });
  assert.equal(answer.response.status, 401);
  assert.equal(answer.error?.error.type, "unauthorized");
});
