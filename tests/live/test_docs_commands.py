"""Every command the README, the pages of docs/ and the demo's output show runs when pasted.

Each fenced block of README.md and docs/**/*.md is taken by its language:

- ``bash``: run with ``bash -e`` (so any failing line fails the block), in a fresh folder per page
  (a page's blocks run in order, in one folder, as a reader pastes them), with the venv's ``bin``
  first on ``PATH``; ``curl`` runs with ``--fail-with-body``, so an HTTP error fails the block.
- ``python``: run by the venv's Python in the page's folder.
- ``json``: parsed.
- ``ts``: left to the TypeScript client's own tests (clients/typescript: a strict consumer compiles
  against the packed package).

A bash block that starts with ``cd clients/...`` is about the checkout (building the TypeScript
package with ``npm ci`` and ``npm pack``): it runs in the checkout's folder, and writes only
into the fresh folder it started from (``$OLDPWD``).

A block whose lines start a server (``worldgraph serve ... &``) runs in the folder of the one
server this test starts for every such block, with its address in place of
``http://127.0.0.1:8765``: the serve line itself is not run (the test's server stands for it).

A block that uses ``$WG`` without setting it continues an earlier block of its page: it runs
against the same server, with ``WG`` and ``AUTH`` set as that block sets them.

A marker on the lines just before a fence changes that, and must give its reason in brackets:

- ``<!-- docs-test: syntax-only (why) -->``: a command that cannot run here (a third-party server,
  a cloud service, a model download, the setup and test scripts themselves): ``bash -n`` or
  ``compile()`` only.
- ``<!-- docs-test: fragment (why) -->``: a Python fragment that continues another block (it names
  an open ``wm``): ``compile()`` only.

A page of docs/frameworks/ needs its framework (``worldgraph[frameworks]``): without it the page is
skipped, and fails under CI (``CI=true``), where scripts/setup.sh installs every extra.

Then ``worldgraph demo`` runs in a fresh folder and every line its ``Try:`` prints is run as printed.
The embedder is the hashing one (``WORLDGRAPH_EMBEDDING_PROVIDER=hashing``) for speed: the commands
are the same with the default model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# the module a framework page's blocks import (the page is skipped without it, except under CI)
FRAMEWORK_OF = {"langchain.md": "langchain_core", "langgraph.md": "langgraph", "llama_index.md": "llama_index",
                "openai_agents.md": "agents"}
VENV_BIN = Path(sys.executable).parent
MARKER = re.compile(r"<!-- docs-test: (syntax-only|fragment) \((.+)\) -->")
SERVE_LINE = re.compile(r"^\s*worldgraph\b[^|;#]*\bserve\b[^|;#]*&")
DOCUMENTED_URL = "http://127.0.0.1:8765"
# curl fails on an HTTP error, as a reader would notice the error body
PRELUDE = 'curl() { command curl --fail-with-body "$@"; }\nset -e\n'


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    mode: str  # run, syntax-only, fragment
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def serves(self) -> bool:
        return any(SERVE_LINE.match(line) for line in self.code.splitlines())


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page with the marker before each (blank lines may sit between)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        mode, reason = "run", ""
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k >= 0 and (mk := MARKER.search(lines[k])):
            mode, reason = mk.group(1), mk.group(2)
        found.append(Block(page, start + 1, m.group(1) or "text", "\n".join(lines[start + 1:j]) + "\n", mode, reason))
        i = j + 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "WORLDGRAPH_", "NEO4J_"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["WORLDGRAPH_EMBEDDING_PROVIDER"] = "hashing"
    return env


def run_bash(code: str, cwd: Path, where: str, timeout: float = 600) -> str:
    out = subprocess.run(["bash", "-c", PRELUDE + code], cwd=cwd, env=environment(), capture_output=True,
                         text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"{where} failed ({out.returncode}):\n{code}\nstdout: {out.stdout[-3000:]}\n" \
                                f"stderr: {out.stderr[-3000:]}"
    return out.stdout


def run_python(code: str, cwd: Path, where: str) -> None:
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=environment(), capture_output=True, text=True,
                         timeout=600, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"{where} failed:\n{code}\nstderr: {out.stderr[-3000:]}"


# ------------------------------------------------------------------------------ the inventory
def test_the_blocks_are_found_and_every_marker_says_why() -> None:
    langs = {b.lang for b in ALL}
    assert {"bash", "python", "json"} <= langs, langs
    run = [b for b in ALL if b.mode == "run"]
    # the README's own examples run: its Python, its REST block (against the server), nothing hidden
    readme = [b for b in run if b.page.name == "README.md"]
    assert {b.lang for b in readme} >= {"python", "bash", "json"}, [b.where for b in readme]
    assert any(b.serves for b in readme), "the README's REST block is run against a server"
    for b in ALL:
        assert b.mode == "run" or b.reason.strip(), f"{b.where}: a marker gives its reason"
        assert b.lang in ("bash", "python", "json", "ts", "text"), f"{b.where}: unknown block language {b.lang!r}"


@pytest.mark.parametrize("block", [b for b in ALL if b.mode != "run"], ids=lambda b: b.where)
def test_marked_blocks_are_valid_syntax(block: Block) -> None:
    if block.lang == "bash":
        out = subprocess.run(["bash", "-n", "-c", block.code], capture_output=True, text=True)
        assert out.returncode == 0, f"{block.where}: {out.stderr}"
    elif block.lang == "python":
        compile(block.code, block.where, "exec")
    else:
        pytest.fail(f"{block.where}: only bash and python blocks take a marker")


def test_json_blocks_parse() -> None:
    for b in ALL:
        if b.lang == "json":
            json.loads(b.code)


# ------------------------------------------------------------------------------ running them
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("served")) as srv:
        yield srv


def runnable_pages() -> list[Path]:
    return [p for p in PAGES if any(b.mode == "run" and b.lang in ("bash", "python") for b in blocks(p))]


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_block_of_the_page_runs_when_pasted(page: Path, tmp_path: Path, server: LiveServer) -> None:
    needs = FRAMEWORK_OF.get(page.name) if page.parent.name == "frameworks" else None
    if needs and importlib.util.find_spec(needs) is None:
        assert os.environ.get("CI") != "true", f"{needs} is not installed: scripts/setup.sh installs the extras"
        pytest.skip(f"{needs} is not installed (pip install 'worldgraph[frameworks]')")
    for b in blocks(page):
        if b.mode != "run":
            continue
        if b.lang == "bash" and b.serves:
            code = "\n".join(": # the test's server stands for this line" if SERVE_LINE.match(line) else line
                             for line in b.code.splitlines())
            run_bash(code.replace(DOCUMENTED_URL, server.url), server.data.parent, b.where)
        elif b.lang == "bash" and "$WG" in b.code:
            # a later block of a page whose first one set WG and AUTH: the same values
            prelude = f'export WG={server.url} AUTH="Authorization: Bearer {server.key}"\n'
            run_bash(prelude + b.code, server.data.parent, b.where)
        elif b.lang == "bash" and b.code.startswith("cd clients/"):
            # a block about the checkout itself (the TypeScript client): it runs in the checkout, as a
            # reader in a checkout runs it, writing only into the fresh folder it started from
            run_bash(b.code.replace("cd clients/", f"cd {ROOT}/clients/", 1), tmp_path, b.where)
        elif b.lang == "bash":
            run_bash(b.code, tmp_path, b.where)
        elif b.lang == "python":
            run_python(b.code, tmp_path, b.where)


def test_the_demos_try_lines_run_as_printed(tmp_path: Path) -> None:
    out = run_bash("worldgraph demo", tmp_path, "worldgraph demo")
    tried = out.split("Try:\n", 1)[1].strip().splitlines()
    assert len(tried) == 3 and all(line.strip().startswith("worldgraph ") for line in tried), tried
    for line in tried:
        printed = run_bash(line.strip(), tmp_path, f"the demo's line {line.strip()!r}")
        assert printed.strip(), line
    assert "front door is locked" in run_bash(tried[2].strip(), tmp_path, "cypher")
