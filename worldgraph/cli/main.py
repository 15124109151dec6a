"""The ``worldgraph`` command: the parser, global options and error reporting. The commands
themselves are in ``worldgraph.commands`` (and the server's in ``worldgraph.cli.serve``).

Global options, before or after the command: ``--data DIR`` (env WORLDGRAPH_DATA, default
./data), ``--graph embedded|neo4j`` (env WORLDGRAPH_GRAPH), ``--tenant T`` (env WORLDGRAPH_TENANT,
default "default"), ``--read-only``, ``--json`` (machine-readable output), ``-v`` (third-party
warnings, logs and tracebacks). Every error is one line on stderr (a JSON object under
``--json``) and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

from worldgraph.cli.admin import add_admin_commands
from worldgraph.cli.lifecycle import add_lifecycle_commands
from worldgraph.cli.memory import add_memory_commands
from worldgraph.cli.world import add_world_commands
from worldgraph.config import cli_defaults
from worldgraph.errors import WorldGraphError, classify
from worldgraph.filemodes import private_umask

Handler = Callable[[argparse.Namespace], int]
# Loggers of libraries whose warnings are noise for a person at the terminal (shown with -v).
QUIET_LOGGERS = ("lancedb", "lance", "neo4j", "httpx", "httpcore", "openai", "urllib3", "botocore", "asyncio")


class Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line (JSON under ``--json``), like every other error.
    Subcommand parsers are of the same class (argparse makes them with ``type(parent)``)."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if Parser.json_errors:
            field = message.split(":", 1)[0].removeprefix("argument ").split("/")[-1] \
                if message.startswith("argument ") else None
            print(json.dumps(error_body("invalid_input", f"{self.prog}: {message}", field)), file=sys.stderr)
        else:
            print(f"error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def global_defaults() -> dict[str, Any]:
    return {**cli_defaults(), "read_only": False, "json": False, "verbose": False}


def main(argv: list[str] | None = None) -> int:
    # worldgraph's own entry point: every file it (serve, worker, any command) and the children it
    # starts create is private (worldgraph.filemodes)
    private_umask()
    parser = build_parser()
    Parser.json_errors = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    for key, value in global_defaults().items():
        if not hasattr(args, key):
            setattr(args, key, value)
    if args.graph not in ("embedded", "neo4j"):
        parser.error(f"argument --graph: invalid choice: {args.graph!r} (choose from 'embedded', 'neo4j')")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    quiet_libraries(args.verbose)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `worldgraph ... | head`
        return 0
    except Exception as exc:  # noqa: BLE001 - the one place every failure becomes one line
        report_error(args, exc)
        return 1


def error_body(type_: str, message: str, field: str | None) -> dict[str, Any]:
    """The REST API's error body, ``{"error": {"type", "message", "field"}}``, with its types
    (``invalid_input``, ``not_found``, ... : ``worldgraph.errors.ERROR_TYPES``)."""
    return {"error": {"type": type_, "message": message, "field": field}}


def report_error(args: argparse.Namespace, exc: BaseException) -> None:
    """One line on stderr: ``error: ...``, or under ``--json`` the REST API's error body
    (:func:`error_body`). Unexpected errors say how to see the traceback."""
    message = str(exc) or type(exc).__name__
    if not isinstance(exc, (WorldGraphError, OSError)) and type(exc).__name__ != "Neo4jLocalError":
        message = f"{type(exc).__name__}: {message} (an unexpected error; `-v` shows the traceback)"
    if args.verbose:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    one_line = " ".join(message.split()) if args.json else message.splitlines()[0] if message else message
    if args.json:
        known = classify(exc)
        # Outside worldgraph's own errors the type is REST's "internal"; the message is kept (it
        # is this user's own machine), and Neo4jLocalError says the local Neo4j did not start.
        type_ = known[1] if known else ("store_unavailable" if type(exc).__name__ == "Neo4jLocalError"
                                        else "internal")
        print(json.dumps(error_body(type_, one_line, known[2] if known else None), ensure_ascii=False),
              file=sys.stderr)
    else:
        rest = message.splitlines()[1:]
        print(f"error: {one_line}" + (" (more with -v)" if rest and not args.verbose else ""), file=sys.stderr)
        if rest and args.verbose:
            print("\n".join(rest), file=sys.stderr)


def quiet_libraries(verbose: bool) -> None:
    """Third-party warnings (deprecations, driver notifications) only with -v."""
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                            stream=sys.stderr)
        warnings.simplefilter("default")
        return
    warnings.simplefilter("ignore")
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("worldgraph")
    except PackageNotFoundError:  # run from a checkout without installing
        return "unknown (not installed)"


class VersionAction(argparse.Action):
    """``--version``: the installed version, read from the package metadata only when asked
    (importlib.metadata is not needed for any other command)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the installed version and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"worldgraph {version()}")
        parser.exit()


def global_options(suppress: bool) -> argparse.ArgumentParser:
    """The options every command takes, before or after it. Under a command their defaults are
    SUPPRESS, so a value given before the command is not overwritten by the command's default."""
    d = global_defaults()

    def default(key: str) -> Any:
        return argparse.SUPPRESS if suppress else d[key]

    g = argparse.ArgumentParser(add_help=False)
    g.add_argument("--data", default=default("data"), help="data directory (default ./data, env WORLDGRAPH_DATA)")
    g.add_argument("--graph", default=default("graph"), choices=["embedded", "neo4j"],
                   help="graph store: embedded (no server) or neo4j (NEO4J_URI)")
    g.add_argument("--tenant", default=default("tenant"), help="tenant (default 'default', env WORLDGRAPH_TENANT)")
    g.add_argument("--read-only", dest="read_only", action="store_true", default=default("read_only"),
                   help="open the data directory without writing anything (a backup, a snapshot); writes fail")
    g.add_argument("--json", action="store_true", default=default("json"),
                   help="machine-readable output (errors too: one JSON object on stderr)")
    g.add_argument("-v", "--verbose", action="store_true", default=default("verbose"),
                   help="show third-party warnings, logs and tracebacks")
    return g


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="worldgraph", description="World model and long-term memory for LLM agents.",
           parents=[global_options(suppress=True)])
    p.add_argument("--version", action=VersionAction)
    sub = p.add_subparsers(title="commands")

    def add(name: str, handler: Handler, help_: str, parent: Any = sub) -> argparse.ArgumentParser:
        # "resolve": a command may define its own --tenant (worker, mcp, keys) and it replaces the global
        # one there; so each command gets its own copy of the options (a parent's actions are shared)
        sp: argparse.ArgumentParser = parent.add_parser(name, help=help_, description=help_,
                                                         parents=[global_options(suppress=True)],
                                                         conflict_handler="resolve")
        sp.set_defaults(handler=handler)
        return sp

    add_admin_commands(add)
    add_memory_commands(add)
    add_lifecycle_commands(sub, add)
    add_world_commands(sub, add)
    from worldgraph.cli.serve import add_server_commands  # serve, mcp, keys
    from worldgraph.cli.worker import add_worker_command  # worker

    add_server_commands(sub, add)
    add_worker_command(add)
    return p


if __name__ == "__main__":
    raise SystemExit(main())
