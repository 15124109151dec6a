"""What the command handlers share: opening the data folder, reading JSON input files, and
turning the 8-character ids the CLI prints back into full ids."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from worldgraph.errors import InvalidInputError

# A short id shorter than this is too likely to match many episodes to be worth a lookup.


def open_wm(args: argparse.Namespace, *, create: bool = False, **kw: Any) -> Any:
    """The WorldModel of ``--data`` / ``--graph``. A read command (``create=False``) refuses a data
    folder that does not exist: a typo in ``--data`` must not silently open a new, empty store."""
    from worldgraph.service import WorldModel

    # with Neo4j the folder holds only the derived index (rebuilt from the server), so only the
    # embedded store's folder must exist for reading
    check_data_dir(args.data, create or args.graph != "embedded")
    if getattr(args, "read_only", False):
        kw["read_only"] = True
    return WorldModel.open(args.data, graph=args.graph, **kw)


def os_user() -> str:
    """Who runs the command, as an audit row records it (a forget's ``forgotten_by``): the login
    of the process's user id in the system's user database (not $USER, which the caller sets),
    else ``uid N``."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, AttributeError):  # no pwd (Windows), or a uid with no name (a container)
        getuid = getattr(os, "getuid", None)
        return f"uid {getuid()}" if getuid is not None else "unknown user"


def check_data_dir(data: str, create: bool) -> None:
    if "://" in str(data):
        return
    path = Path(data)
    if path.exists() and not path.is_dir():
        raise InvalidInputError("--data", f"{data} is a file, not a data folder: pass a folder (default ./data)")
    if not path.exists() and not create:
        raise InvalidInputError("--data", f"no data folder at {data} (this command reads and does not create one): "
                                "check the path, or record something there first (`worldgraph record FILE`)")


def read_json_items(path: str) -> Iterator[tuple[int, Any]]:
    """A JSON object, a JSON array, or JSON Lines, from a file or '-' (stdin); yields (line, item)."""
    text = sys.stdin.read() if path == "-" else _read_text(path)
    stripped = text.strip()
    if not stripped:
        raise InvalidInputError("file", f"{path}: empty input (give a JSON object, a JSON array or JSON Lines)")
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError as exc:
        whole = None
        if stripped[0] == "[" or not _parses(stripped.splitlines()[0]):  # one document, not JSON Lines
            raise InvalidInputError("file", f"{path}:{exc.lineno}: not valid JSON ({exc.msg} at column "
                                    f"{exc.colno})") from None
    if isinstance(whole, list):
        yield from ((i + 1, item) for i, item in enumerate(whole))
        return
    if isinstance(whole, dict):
        yield 1, whole
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError("file", f"{path}:{n}: not valid JSON ({exc.msg} at column {exc.colno}); "
                                    "each line must be one JSON object") from None


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def check_input_file(path: str | Path) -> Path:
    """``path`` as a file to read, or an error saying what is there instead."""
    p = Path(path)
    if not p.exists():
        raise InvalidInputError("file", f"{path} does not exist")
    if p.is_dir():
        raise InvalidInputError("file", f"{path} is a folder; give a JSON or JSONL file")
    return p


def _read_text(path: str) -> str:
    p = check_input_file(path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError("file", f"{path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise InvalidInputError("file", f"{path}: {exc.strerror or exc}") from None


def json_option(text: str | None, name: str) -> Any:
    """A command-line option that holds JSON (``--metadata '{"user": "u1"}'``); None passes."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInputError(name, f"must be JSON, e.g. '{{\"user\": \"u1\"}}' ({exc})", text) from None


def require_env(wm: Any, tenant_id: str, env: str) -> None:
    """An environment the tenant has; else NotFoundError naming those it has (as REST and MCP)."""
    from worldgraph.names import require_environment

    require_environment(wm.store, tenant_id, env, field="--env")

