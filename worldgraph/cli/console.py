"""Terminal output shared by the ``worldgraph`` commands and the demo: tables, progress bars,
recall and merge-report printing, and ``emit`` (JSON under ``--json``, text otherwise).

It imports nothing of worldgraph, so any command module (and ``demo``) can use it without
importing the CLI entry point.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
from collections.abc import Callable
from typing import Any


def emit(args: argparse.Namespace, data: Any, text: Callable[[], object] | None = None) -> None:
    """Print ``data`` as JSON under ``--json`` (or when there is no text form), else call ``text``."""
    if getattr(args, "json", False) or text is None:
        print(json.dumps(data, ensure_ascii=False, indent=2, default=str))
    else:
        text()


def say(text: str) -> None:
    print(text)
    sys.stdout.flush()


def progress_bar(label: str, enabled: bool = True) -> Callable[[int, int], None]:
    """Progress on stderr, as ``show(done, total)`` (``total`` 0: not known). On a terminal a
    redrawn tqdm bar (rate and time left); otherwise (a log file, a pipe) a plain line every 10 %
    (every 1,000 items without a total), so a log holds no carriage returns. The bar closes itself
    when ``done`` reaches ``total``; a bar left open (an error, an unknown total) is closed at exit."""
    tty = sys.stderr.isatty()
    last = [-1]
    bar: list[Any] = []

    def show(done: int, total: int) -> None:
        if not enabled:
            return
        if not tty:
            if done == 0:  # nothing done yet is no news in a log (and an error right after stays one line)
                return
            step = int(10 * done / total) if total else done // 1000
            if step != last[0] or (total and done >= total):
                last[0] = step
                sys.stderr.write(f"{label} {done}/{total}\n" if total else f"{label} {done}\n")
            return
        if not bar:
            from tqdm import tqdm

            try:  # a terminal that reports no size (a bare pseudo-terminal): tqdm would hide the bar
                size = os.get_terminal_size(sys.stderr.fileno())
                sized = size.columns > 0 and size.lines > 0
            except (OSError, ValueError):
                sized = False
            bar.append(tqdm(total=total or None, desc=label, file=sys.stderr, unit="", dynamic_ncols=sized,
                            ncols=None if sized else 80, nrows=None if sized else 24, leave=True,
                            mininterval=0.2))
            atexit.register(bar[0].close)
        b = bar[0]
        if total and b.total != total:
            b.total = total
        b.update(done - b.n)
        if total and done >= total:
            b.close()

    return show


def table(rows: list[list[Any]], headers: list[str]) -> None:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def short(text: Any, n: int = 60) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


def print_recall(results: list[Any], explain: bool = True) -> None:
    rows = []
    for i, r in enumerate(results, 1):
        fb = "-" if r["feedback_score"] is None else f"{r['feedback_score']:.2f} ({r['feedback_count']})"
        rows.append([i, f"{r['relevance_score']:.3f}", f"{r['semantic_score']:.3f}", fb, r["outcome"],
                     short(r["task_description"], 54), r["episode_id"][:8]])
    table(rows, ["#", "score", "semantic", "feedback", "outcome", "task", "episode"])
    if explain:
        print("\nwhy (score = relevance x w + recency + feedback + confidence x w + date match, clamped; then "
              "feedback-aware boost and diversity penalty, which rank; the score shown is clamped to [0, 1]; "
              "relevance = vector + bm25 [+ speaker - question + answer + reply + neighbour + sentence] parts):")
        for i, r in enumerate(results, 1):
            b = r["score_breakdown"]
            print(f"  #{i}: {b['semantic_weighted']:+.3f} relevance ({b.get('vector_part', 0):.3f} vector "
                  f"+ {b.get('bm25_part', 0):.3f} bm25"
                  + (f" + {b['speaker_part']:.3f} speaker" if b.get("speaker_part") else "")
                  + (f" - {-b['question_part']:.3f} question" if b.get("question_part") else "")
                  + (f" + {b['answer_part']:.3f} answer" if b.get("answer_part") else "")
                  + (f" + {b['reply_part']:.3f} reply" if b.get("reply_part") else "")
                  + (f" + {b['neighbor_part']:.3f} neighbour" if b.get("neighbor_part") else "")
                  + (f" + {b['sentence_part']:.3f} sentence" if b.get("sentence_part") else "")
                  + f")  {b['recency_boost']:+.3f} recency  "
                  f"{b['feedback_adjustment']:+.3f} feedback  {b['confidence_factor']:+.3f} confidence  "
                  + (f"{b['date_match']:+.3f} date  " if b.get("date_match") else "")
                  + f"=> {b['clamped']:.3f}"
                  + (f"  {b['feedback_aware']:+.3f} feedback-aware" if b["feedback_aware"] else "")
                  + (f"  -{b['diversity_penalty']:.3f} diversity" if b["diversity_penalty"] else "")
                  + f"  = {b['final']:.3f}"
                  + (f" (score {min(1.0, max(0.0, b['final'])):.3f}: clamped to [0, 1])"
                     if not 0.0 <= b["final"] <= 1.0 else ""))


def print_report(r: dict[str, Any]) -> None:
    """One merge report (``MergeReport.to_dict()``) in a few lines."""
    c, m, x = r["created"], r["merged"], r["closed"]
    print(f"graph version {r['graph_version']}: created {len(c['nodes'])} nodes, {len(c['edges'])} edges, "
          f"{len(c['rules'])} rules; merged {len(m['nodes'])}/{len(m['edges'])}/{len(m['rules'])}; "
          f"closed {len(x['nodes'])} nodes, {len(x['edges'])} edges, {len(x['rules'])} rules")
    for d in r["dropped"]:
        print(f"  dropped {d['kind']}[{d['index']}]: {d['reason']}")
    if r.get("error"):
        print(f"  error: {r['error']}")


def print_context(results: list[Any]) -> None:
    """The canvas context (``--canvas-context``) and neighbourhood (``--neighborhood``) of each
    result, a few lines each, under the recall table."""
    for i, r in enumerate(results, 1):
        lines = _context_lines(r)
        if lines:
            print(f"\n#{i} {r['episode_id'][:8]} {short(r.get('task_description'), 60)}")
            print("\n".join(f"   {line}" for line in lines))


def _context_lines(r: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    hood = r.get("neighborhood") or {}
    actions = r.get("canvas_action_details") or hood.get("canvas_actions") or []
    canvas = hood.get("canvas") or (
        {"id": r["canvas_id"], "name": r.get("canvas_name")} if r.get("canvas_id") else None)
    if canvas or "canvas_snapshot" in r:
        if canvas:
            snap = r.get("canvas_snapshot") or canvas.get("snapshot") or {}
            parts = [f"{len(v)} {k}" for k, v in sorted(snap.items()) if isinstance(v, list)]
            lines.append(f"canvas: {canvas.get('name') or '-'} ({canvas['id']})"
                         + (f"; snapshot: {', '.join(parts)}" if parts else ""))
        else:
            lines.append("canvas: none")
        for a in actions[:8]:
            lines.append(f"  action {a.get('action_type', '?')} {a.get('component_id') or ''} "
                         f"at {str(a.get('timestamp', ''))[:19]} {short(_json(a.get('details')), 50)}".rstrip())
        if len(actions) > 8:
            lines.append(f"  ... {len(actions) - 8} more actions")
    if not hood:
        return lines
    for fb in hood.get("feedback") or []:
        lines.append(f"feedback {fb.get('feedback_score'):+.2f} {fb.get('feedback_category') or ''} "
                     f"{short(fb.get('feedback_notes'), 50)} ({fb.get('created_by') or '-'})")
    for side in ("previous", "next"):
        ep = hood.get(side)
        if ep:
            lines.append(f"{side} in session: {ep['id'][:8]} {ep.get('outcome', '')} "
                         f"{short(ep.get('task_description'), 50)}")
    for scene in hood.get("scenes") or []:
        lines.append(f"scene {scene['id'][:8]} in {scene.get('env_name')}: {short(scene.get('action'), 40)} "
                     f"({scene.get('status', '-')})")
    nodes = hood.get("nodes") or []
    if nodes:
        lines.append("world nodes: " + short(", ".join(f"{n.get('type')}:{n.get('name')}" for n in nodes), 100))
    for rule in hood.get("rules") or []:
        lines.append(f"rule: IF {short(rule.get('condition'), 40)} THEN {short(rule.get('outcome'), 40)}")
    if len(lines) == 0:
        lines.append("no canvas, feedback, session neighbours or world-graph links")
    return lines


def _json(value: Any) -> str:
    return "" if value in (None, {}, []) else json.dumps(value, ensure_ascii=False, default=str)


def note(args: argparse.Namespace, message: str) -> None:
    """A status line on stderr for a person at a terminal (not under ``--json``, not when piped)."""
    if not getattr(args, "json", False) and sys.stderr.isatty():
        print(message, file=sys.stderr, flush=True)
