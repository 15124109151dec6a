"""`worldgraph demo`: the main job on the embedded default, end to end.

1. records the sample experiences of ``examples/experiences.jsonl`` (timestamps relative to now),
2. stores their human ratings,
3. shows recalls whose ranking you can read (scores and why: recency, feedback, confidence,
   diversity penalty, feedback-aware boosts, canvas context),
4. grows a world graph from the text-adventure log ``examples/text_adventure.jsonl`` (offline it
   merges the deltas a model returned for it; with OPENAI_API_KEY or OPENAI_BASE_URL set it asks
   the model), shows what was dropped and why, and exports the canonical snapshot.

The demo works in its own folder (default ``./worldgraph-demo``), which it recreates each run.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from worldgraph.bundled import examples_dir
from worldgraph.cli.common import read_json_items
from worldgraph.cli.console import print_recall, print_report, progress_bar, say
from worldgraph.cli.samples import split_samples, store_ratings
from worldgraph.errors import InvalidInputError
from worldgraph.filemodes import private_dir

MARKER = ".worldgraph-demo"
ENV = "CottageEscape"


DEMO_CYPHER = ("MATCH (r:Rule {tenant_id: $tenant_id, env_name: $env}) WHERE r.valid_to IS NULL "
               "RETURN r.condition AS condition, r.outcome AS outcome, r.evidence_count AS evidence, "
               "r.confidence AS confidence ORDER BY evidence DESC, confidence DESC LIMIT 5")


def try_lines(data: str, tenant: str) -> list[str]:
    """The commands the demo suggests, quoted for a POSIX shell so they run when pasted (the Cypher
    query in single quotes: in double quotes the shell would expand ``$tenant_id`` and ``$env``)."""
    base = f"worldgraph --data {shlex.quote(data)} --tenant {shlex.quote(tenant)}"
    return [f"{base} recall 'month-end close' --role Finance --explain --min-similarity 0.2",
            f"{base} world show --env {ENV}",
            f"{base} cypher {shlex.quote(DEMO_CYPHER)} --param env={ENV}"]


def run_demo(args: argparse.Namespace) -> int:
    from worldgraph.cli.replay import quiet_extraction_log, reason_lines, replay_log
    from worldgraph.config import llm_configured
    from worldgraph.service import WorldModel
    from worldgraph.world.summary import render_summary, summarize_graph

    quiet_extraction_log(args.verbose)
    data = Path(args.data if args.data != "./data" else "./worldgraph-demo")
    if data.exists() and (data / MARKER).exists():
        shutil.rmtree(data)
    elif data.exists() and any(data.iterdir()):
        raise InvalidInputError("--data", f"{data} exists and is not a demo folder; pass --data to an empty or "
                                "new folder")
    private_dir(data)
    (data / MARKER).write_text("created by `worldgraph demo`; deleted and recreated on the next run\n")
    ex = examples_dir()
    tenant = args.tenant
    t0 = time.perf_counter()

    say(f"== worldgraph demo (data in {data}, tenant {tenant!r}) ==")
    with WorldModel.open(data, graph=args.graph) as wm:
        say(f"embedder: {getattr(wm.embedder, 'name', type(wm.embedder).__name__)} "
            f"({wm.embedder.dimensions} dims); graph store: {wm.store.name}")

        # 1. record
        samples = split_samples(list(read_json_items(str(ex / "experiences.jsonl"))), "experiences.jsonl")
        for i, exp in enumerate(samples.experiences):
            exp.setdefault("episode_id", str(uuid.uuid5(uuid.NAMESPACE_URL, f"worldgraph-demo/{tenant}/{i}")))
        say(f"\n1. recording {len(samples.experiences)} sample experiences")
        ids = wm.record_experiences(tenant, samples.experiences, canvases=samples.canvases,
                                    progress=progress_bar("   embedding"))

        # 2. feedback
        rated = store_ratings(wm, tenant, ids, samples)
        say(f"2. stored {rated} human ratings in [-1, 1] (scoring uses (mean + 1) / 2)")

        # 3. recall
        loose = {"min_similarity": 0.2}
        recalls: list[tuple[str, str | None, str, dict[str, Any]]] = [
            ("Finance agent, plain recall: near-copies lose to the diversity penalty, ratings move the order",
             "Finance", "Reconcile inventory discrepancies", dict(loose)),
            ("Feedback-aware recall: only episodes rated >= 0.7 (normalised), +0.2 boost above 0.7",
             "Finance", "Reconcile inventory discrepancies", dict(loose, min_feedback_score=0.7)),
            ("Developer on one canvas, with its canvas context",
             "Developer", "Create a data visualization on canvas-123", dict(loose, include_canvas_context=True)),
            ("Anything from the last week that failed? (the date phrase ranks last week first, never filters)",
             None, "incidents and failures last week", dict(loose)),
        ]
        for n, (title, role, query, opts) in enumerate(recalls, 1):
            say(f"\n3.{n} {title}\n    recall_experiences({tenant!r}, {role!r}, {query!r}, options={opts})")
            results = wm.recall_experiences(tenant, role, query, 5, opts)
            if results:
                print_recall(results, explain=True)
                if opts.get("include_canvas_context") and results[0].get("canvas_snapshot"):
                    r = results[0]
                    actions = ", ".join(a["action_type"] for a in r.get("canvas_action_details") or [])
                    say(f"    canvas of #1: {r['canvas_name']} ({r['canvas_id']}); actions: {actions or '-'}")
            else:
                say("    (no results)")

        # 4. world graph
        offline = bool(getattr(args, "offline", False)) or not llm_configured()
        mode = "offline: merging the deltas a model returned for it" if offline else "asking the LLM"
        say(f"\n4. growing the world graph of {ENV} from {ex / 'text_adventure.jsonl'} ({mode})")
        summary = replay_log(wm, tenant, ENV, ex / "text_adventure.jsonl", use_shipped_deltas=offline,
                             progress=progress_bar("   rounds"))
        say(f"   {summary['rounds']} rounds recorded as episodes, {summary['flagged']} flagged FLAG_CURIOSITY: yes, "
            f"{summary['merged']} merged, {summary['pending']} pending, {summary['failed']} failed")
        for line in reason_lines(summary):
            say(f"  {line}")
        for rep in summary["reports"]:
            if rep["dropped"] or rep["closed"]["edges"] or rep["closed"]["nodes"]:
                print_report(rep)
        graph = wm.world_graph(tenant, ENV)
        say("")
        say(render_summary(summarize_graph(graph, None, 30)))
        out = Path(args.out) if args.out else data / "export"
        path = wm.export(tenant, ENV, out)
        say(f"\n5. exported the canonical snapshot to {path}:")
        for f in sorted(path.iterdir()):
            say(f"   {f.name:14} {f.stat().st_size:>8} bytes")
        # 6. one Cypher exploration of what was learned (the first example query of docs/cypher.md), on this store
        say(f"\n6. exploring the learned rules with Cypher (wm.cypher; store: {wm.store.name})\n"
            f"   {DEMO_CYPHER}")
        rows = wm.cypher(tenant, DEMO_CYPHER, {"env": ENV})
        for row in rows:
            say(f"   {row['evidence']} x  {row['confidence']:.2f}  if {row['condition']} -> {row['outcome']}")
        if not rows:
            say("   (no rules learned)")
        stats = wm.stats(tenant)
    say(f"\ndone in {time.perf_counter() - t0:.1f}s: {stats['episodes']} episodes, {stats['feedback']} ratings, "
        f"{stats['nodes']} nodes, {stats['edges']} edges, {stats['rules']} rules. Try:")
    for line in try_lines(str(data), tenant):
        say(f"  {line}")
    return 0
