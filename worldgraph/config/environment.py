"""The one module of worldgraph that reads or sets the process environment.

Everything else asks it: the settings (``WorldGraphConfig`` reads its variables through
``current_variables``), the object store's and the LLM's variables (kept out of the settings so
that a secret never enters a config dump), the command line's defaults (``cli_defaults``), the
local Neo4j launcher's variables (``LauncherSettings``), library defaults
(``set_library_defaults``) and the environment of a child process (``child_environment``).
tests/unit/ground/test_config_env.py holds every other module to that.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

# The variables a config is read from: os.environ, or the mapping given to from_env (tests).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("worldgraph_environ", default=None)


def current_variables() -> Mapping[str, str]:
    """The variables being read: the mapping given to ``reading``, else ``os.environ``."""
    given = _ENVIRON.get()
    return os.environ if given is None else given


@contextmanager
def reading(environ: Mapping[str, str] | None) -> Iterator[None]:
    """Within it, ``current_variables()`` is ``environ`` (None: ``os.environ``); for
    ``WorldGraphConfig.from_env``."""
    token = _ENVIRON.set(None if environ is None else dict(environ))
    try:
        yield
    finally:
        _ENVIRON.reset(token)


# The standard variables of AWS SDKs, as LanceDB storage options (object stores: lancedb_path
# "s3://..."). AWS_ENDPOINT_URL points at any S3-compatible server (MinIO, Ceph, moto, R2).
AWS_VARIABLES: dict[str, str] = {
    "AWS_ENDPOINT_URL_S3": "aws_endpoint",  # the service-specific one wins, as in the AWS SDKs
    "AWS_ENDPOINT_URL": "aws_endpoint",
    "AWS_ACCESS_KEY_ID": "aws_access_key_id",
    "AWS_SECRET_ACCESS_KEY": "aws_secret_access_key",
    "AWS_SESSION_TOKEN": "aws_session_token",
    "AWS_REGION": "aws_region",
    "AWS_DEFAULT_REGION": "aws_region",
    "AWS_ALLOW_HTTP": "allow_http",
}


def object_store_options(environ: dict[str, str] | None = None) -> dict[str, str]:
    """LanceDB storage options from the standard ``AWS_*`` variables that are set. Kept out of
    WorldGraphConfig on purpose: secrets never enter a config dump (the index maintenance child
    process gets its config on the command line, without the secret settings, and these from its
    environment, which other users cannot read)."""
    environ = dict(current_variables() if environ is None else environ)
    options: dict[str, str] = {}
    for var, key in AWS_VARIABLES.items():  # the first variable of a key wins (AWS_REGION before AWS_DEFAULT_REGION)
        if environ.get(var) and key not in options:
            options[key] = environ[var]
    return options


def openai_endpoint(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """``(OPENAI_BASE_URL, OPENAI_API_KEY)``, each None when unset or empty: where the LLM and the
    OpenAI embedder are. Kept out of WorldGraphConfig like the AWS variables: a key never enters a
    config dump."""
    env = current_variables() if environ is None else environ
    return env.get("OPENAI_BASE_URL") or None, env.get("OPENAI_API_KEY") or None


def llm_configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether an OpenAI-compatible LLM is configured (``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``):
    without one, scene packets wait for ``worldgraph world retry``."""
    base_url, api_key = openai_endpoint(environ)
    return bool(base_url or api_key)


# ------------------------------------------------------------------ variables outside WorldGraphConfig
# The command line's global options and the local Neo4j launcher read a few variables of their own;
# they are read here, like every other variable, each when it is needed (a test or a shell that
# changes one between two calls sees the change).


def cli_defaults(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``worldgraph`` command's global options when not given: ``--data`` from
    ``WORLDGRAPH_DATA`` (default ``./data``), ``--graph`` from ``WORLDGRAPH_GRAPH`` (default
    ``embedded``), ``--tenant`` from ``WORLDGRAPH_TENANT`` (default ``default``)."""
    env = current_variables() if environ is None else environ
    return {"data": env.get("WORLDGRAPH_DATA", "./data"),
            "graph": env.get("WORLDGRAPH_GRAPH", "embedded"),
            "tenant": env.get("WORLDGRAPH_TENANT", "default")}


def malloc_perturb(environ: Mapping[str, str] | None = None) -> int:
    """The perturb byte glibc took from ``MALLOC_PERTURB_`` when this process started (read with
    atoi; 0: none): ``kg/embedded/cypher/heap.py`` puts it back after blanking the heap."""
    env = current_variables() if environ is None else environ
    try:
        return int(env.get("MALLOC_PERTURB_", "0").strip() or 0) & 0xFF
    except ValueError:
        return 0


@dataclass(frozen=True)
class LauncherSettings:
    """The local Neo4j launcher's variables (``worldgraph.neo4j_local``); None when unset.

    ``home``: ``WORLDGRAPH_NEO4J_HOME``, the state folder (empty counts as unset);
    ``project``: ``WORLDGRAPH_NEO4J_PROJECT``, the Maven project (empty counts as unset);
    ``java_opts``: ``WORLDGRAPH_NEO4J_JAVA_OPTS``, the JVM options (set but empty: none);
    ``pagecache``: ``WORLDGRAPH_NEO4J_PAGECACHE``, Neo4j's page cache size;
    ``cache_home``: ``XDG_CACHE_HOME`` if set and not empty, else ``~/.cache`` (where a wheel's
    copy of the Maven project is built)."""

    home: str | None
    project: str | None
    java_opts: str | None
    pagecache: str | None
    cache_home: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LauncherSettings:
        env = current_variables() if environ is None else environ
        return cls(home=env.get("WORLDGRAPH_NEO4J_HOME") or None,
                   project=env.get("WORLDGRAPH_NEO4J_PROJECT") or None,
                   java_opts=env.get("WORLDGRAPH_NEO4J_JAVA_OPTS"),
                   pagecache=env.get("WORLDGRAPH_NEO4J_PAGECACHE"),
                   cache_home=Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache"))


# Variables a library reads itself, set for this process (and the processes it starts) unless the
# operator set them:
# - lance's vector index statistics include every centroid unless told otherwise (and warn about
#   it on each call); the episode index reads only the partition count, so it opts in to lance's
#   announced default.
# - lance's full-text search under a prefilter (a metadata filter, or row addresses) first lists
#   the passing rows' documents when at most LANCE_FLAT_SEARCH_PERCENT_THRESHOLD % of the index's
#   rows pass (lance's default: 10), else checks each scored posting against the filter; the
#   results are the same either way (tests/unit/memory/test_fts_flat_threshold.py). Listing costs
#   ~1.5 us a passing document; checking, the postings of the query's words. At 10M rows, where a
#   query is led by its rare words (memory/index/common_terms.py), checking is cheaper for every
#   filter measured: a canvas's 8k rows 2.4 ms against 12.4, ten canvases' 80k 6 against 41, and
#   whole recalls of them 15-17 ms against 16-50. At 1M rows listing a canvas's 845 rows is ~3-4
#   ms faster (recall 10-12 ms against 14-15). 0: always checked, for the bigger tables' sake
#   (bench/README.md, "A narrow filter's rows from the mirror's postings"; before that, at 1:
#   "Full-text search at 10M rows"). Read once per process, at its first full-text search.
LIBRARY_DEFAULTS: dict[str, str] = {"LANCE_INCLUDE_VECTOR_CENTROIDS": "false",
                                    "LANCE_FLAT_SEARCH_PERCENT_THRESHOLD": "0"}


def set_library_defaults() -> None:
    """Set each of LIBRARY_DEFAULTS in this process's environment that is not set already."""
    for name, value in LIBRARY_DEFAULTS.items():
        os.environ.setdefault(name, value)


# The folder holding this worldgraph package (config/environment.py is two below it): the
# ``pythonpath_first`` of every child of ours, so the child imports its parent's code wherever it
# is started. Counted once, here: a count in each caller went one short when its module moved.
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def module_command(module: str, *args: str) -> list[str]:
    """The command that runs ``module`` as ``python -m`` would, with this interpreter and ``args``,
    importing worldgraph from ``PYTHONPATH`` (``child_environment``) and never from the child's
    working directory: ``-m`` puts that directory first on ``sys.path``, so a child started in
    another checkout's folder ran that checkout's code (an A/B of two trees measured one child).
    ``-P`` would do it from Python 3.11 on; this works on 3.10 too."""
    code = f"import runpy, sys; del sys.path[0]; runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    return [sys.executable, "-c", code, *args]


def child_environment(pythonpath_first: str | None = None) -> dict[str, str]:
    """The environment of a child process of ours: this process's (the ``AWS_*`` and ``OPENAI_*``
    variables and LIBRARY_DEFAULTS included), with ``pythonpath_first`` put in front of
    ``PYTHONPATH`` so the child imports the same worldgraph as its parent."""
    env = dict(os.environ)
    if pythonpath_first is not None:
        env["PYTHONPATH"] = pythonpath_first + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env
