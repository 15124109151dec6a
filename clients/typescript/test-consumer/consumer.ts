// A consumer project's code, type-checked by test/consumer.test.ts against the packed tarball
// (strict, no skipLibCheck). Each @ts-expect-error line must be a type error: if the package's
// types were lost (every type `any`), tsc would report the directive as unused and the test fails.
import { Worldgraph, createWorldgraphClient, type AgentExperience, type RecallResult, type WorldContext,
         type WorldHit } from "@worldgraph/client";

export async function consumer(wg: Worldgraph): Promise<number> {
  const run: AgentExperience = { agent_id: "a1", task_type: "t", task_description: "d", outcome: "success" };
  // @ts-expect-error outcome is "success" | "failure"
  const bad: AgentExperience = { agent_id: "a1", task_type: "t", task_description: "d", outcome: "meh" };
  // @ts-expect-error task_description is required
  const missing: AgentExperience = { agent_id: "a1", task_type: "t", outcome: "success" };
  const [id] = await wg.record([run, bad, missing]);
  const results: RecallResult[] = await wg.recall("reconcile", { limit: 3 });
  // @ts-expect-error a field the schema does not declare does not exist (the types are closed)
  const extra: number = results[0].no_such_field;
  // @ts-expect-error a misspelled field fails to compile even where any value would do
  const misspelled: unknown = results[0].relevance_scor;
  // @ts-expect-error relevance_score is a number
  const s: string = results[0].relevance_score;
  // @ts-expect-error score is a number
  await wg.feedback(id, "high");
  const hits: WorldHit[] = await wg.searchWorld("where is the key", { k: 3, envName: "Kitchen" });
  // @ts-expect-error a hit's kind is "entity" | "state" | "fact" | "rule"
  const kind: "episode" = hits[0].kind;
  const ctx: WorldContext = await wg.context("open the door", { maxTokens: 500 });
  // @ts-expect-error tokens is a number
  const tokens: string = ctx.tokens;
  const api = createWorldgraphClient({ baseUrl: "http://127.0.0.1:8765", apiKey: "wg_x" });
  // @ts-expect-error no such route
  await api.GET("/v1/no-such-route");
  const r = await api.POST("/v1/recall", { body: { query: "q", limit: 2 } });
  return (r.data?.results.length ?? 0) + s.length + extra + (misspelled === undefined ? 0 : 1) + kind.length +
    tokens.length + ctx.citations.length + (hits[0].valid_to ?? "").length;
}
