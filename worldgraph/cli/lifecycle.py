"""Browse and forget: ``worldgraph episodes list|show``, ``worldgraph forget
episode|agent|session|env|tenant`` and ``worldgraph purge``. A forget's audit row names the OS user
who ran it. (``worldgraph episodes AGENT_ID``, an agent's newest episodes, is kept.)"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from worldgraph.cli.common import json_option, open_wm, os_user
from worldgraph.cli.console import emit, progress_bar, short, table
from worldgraph.errors import InvalidInputError

Add = Callable[..., argparse.ArgumentParser]


def add_lifecycle_commands(sub: Any, add: Add) -> None:
    sp = add("episodes", cmd_episodes,
             "browse episodes: `episodes list [--agent-id A] [--session S] [--since T] [--until T] [--cursor C]`, "
             "`episodes show EPISODE_ID`, or `episodes AGENT_ID` (that agent's newest)")
    sp.add_argument("target", metavar="list|show|AGENT_ID",
                    help="list: a page of episodes; show: one episode; an agent id: that agent's newest")
    sp.add_argument("episode_id", nargs="?", default=None, help="for show: the id (or a unique start of it)")
    sp.add_argument("--limit", type=int, default=None, help="how many (list: a page, default 100; AGENT_ID: 30)")
    sp.add_argument("--agent-id", dest="agent_id", default=None, help="list: only this agent's")
    sp.add_argument("--session", dest="session_id", default=None, help="list: only this session's")
    sp.add_argument("--since", default=None, help="list: ISO date/time, inclusive")
    sp.add_argument("--until", default=None, help="list: ISO date/time, exclusive")
    sp.add_argument("--cursor", default=None, help="list: the next_cursor a previous page printed")
    sp.add_argument("--metadata", default=None, help='list: conditions on the metadata, as JSON: \'{"user": "u1"}\'')

    group = sub.add_parser("forget", help="forget an episode, an agent's or a session's episodes, an environment "
                                          "or a whole tenant, for good",
                           description="forget an episode, an agent's or a session's episodes, an environment or a "
                                       "whole tenant: gone from every read path at once; the bytes leave the files "
                                       "with the purge").add_subparsers(
        title="forget commands")
    sp = add("episode", cmd_forget_episode, "forget one episode (its id, or a unique start of it)", parent=group)
    sp.add_argument("episode_id", help="the episode to forget (its id or a unique start of it)")
    sp = add("env", cmd_forget_env, "forget an environment's world graph, scenes and packets", parent=group)
    sp.add_argument("env_name", help="the environment whose world graph, scenes and packets to forget")
    sp = add("agent", cmd_forget_agent, "forget every episode of one agent (a conversation's speaker, say)",
             parent=group)
    sp.add_argument("agent_id", help="the agent whose every episode to forget")
    sp = add("session", cmd_forget_session, "forget every episode of one session (a chat, a thread, a run)",
             parent=group)
    sp.add_argument("session_id", help="the session whose every episode to forget")
    sp = add("tenant", cmd_forget_tenant, "forget every record of --tenant, its API keys included (needs --yes)",
             parent=group)
    sp.add_argument("--yes", action="store_true", help="yes, forget the whole tenant (cannot be undone)")
    # --yes is taken by every forget (a script may pass it to all of them); only the tenant needs it
    for name, p in group.choices.items():
        if name != "tenant":
            p.add_argument("--yes", action="store_true", help="accepted for symmetry with `forget tenant` (not needed)")
    for p in group.choices.values():
        p.add_argument("--no-purge", dest="no_purge", action="store_true",
                       help="do not purge the files now (the background purge or `worldgraph purge` does it later)")

    add("purge", cmd_purge, "remove the bytes of everything forgotten from the files (the data folder and the index)")


def cmd_episodes(args: argparse.Namespace) -> int:
    if args.target == "list":
        with open_wm(args) as wm:
            page = wm.list_episodes(args.tenant, args.agent_id, args.session_id, args.since, args.until,
                                    100 if args.limit is None else args.limit, args.cursor,
                                    json_option(args.metadata, "--metadata"))
        eps = page.items

        def text() -> None:
            table([[e["timestamp"][:19], e["agent_id"], e["outcome"], short(e["task_description"]), e["id"]]
                   for e in eps], ["timestamp", "agent", "outcome", "task", "episode_id"]) if eps else \
                print("(no episodes)")
            if page.next_cursor:
                print(f"more: --cursor {page.next_cursor}")
        emit(args, page.to_dict("episodes"), text)
        return 0
    if args.target == "show":
        if not args.episode_id:
            raise InvalidInputError("episode_id", "give the id to show: `worldgraph episodes show EPISODE_ID`")
        with open_wm(args) as wm:
            ep = wm.get_episode(args.tenant, args.episode_id)  # the id or a unique start of it
        emit(args, ep, lambda: print("\n".join(f"{k:24} {v}" for k, v in ep.items() if v not in (None, [], ""))))
        return 0
    if args.episode_id is not None:
        raise InvalidInputError("episode_id", f"unexpected {args.episode_id!r}: use `episodes list`, "
                                "`episodes show ID` or `episodes AGENT_ID`")
    with open_wm(args) as wm:
        agent_eps = wm.get_agent_episodes(args.tenant, args.target, 30 if args.limit is None else args.limit)
    emit(args, agent_eps, lambda: table(
        [[e["timestamp"][:19], e["outcome"], f"{e['confidence_score']:.2f}", short(e["task_description"]), e["id"]]
         for e in agent_eps], ["timestamp", "outcome", "conf", "task", "episode_id"]))
    return 0


def _done(args: argparse.Namespace, wm: Any, report: Any) -> None:
    out = report.to_dict()
    if not args.no_purge:
        out["purge"] = wm.purge()
    removed = ", ".join(f"{v} {k}" for k, v in out["removed"].items() if v)
    emit(args, out, lambda: print(f"forgot {out['kind']} {out['target_id']!r} of tenant {out['tenant_id']!r}: "
                                  f"{removed or 'nothing else'}; "
                                  + ("purged from the files" if not args.no_purge else
                                     f"the files are purged by {out['purge_due_by']} (or `worldgraph purge`)")))


def cmd_forget_episode(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        # the id or a unique start of it of at least 8 characters (WorldModel resolves it)
        _done(args, wm, wm.forget_episode(args.tenant, args.episode_id, os_user()))
    return 0


def cmd_forget_agent(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        _done(args, wm, wm.forget_agent(args.tenant, args.agent_id, os_user()))
    return 0


def cmd_forget_session(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        _done(args, wm, wm.forget_session(args.tenant, args.session_id, os_user()))
    return 0


def cmd_forget_env(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        _done(args, wm, wm.forget_environment(args.tenant, args.env_name, os_user()))
    return 0


def cmd_forget_tenant(args: argparse.Namespace) -> int:
    if not args.yes:
        raise InvalidInputError("--yes", f"forgetting tenant {args.tenant!r} removes every record of it, API keys "
                                "included, and cannot be undone: add --yes")
    with open_wm(args) as wm:
        _done(args, wm, wm.forget_tenant(args.tenant, os_user()))
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    with open_wm(args) as wm:
        stats = wm.purge(progress=progress_bar("purging index tables", not args.json))
    emit(args, stats, lambda: print("\n".join(f"{k:24} {v}" for k, v in stats.items())))
    return 0
