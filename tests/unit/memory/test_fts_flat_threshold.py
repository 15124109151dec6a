"""LANCE_FLAT_SEARCH_PERCENT_THRESHOLD: how lance's full-text search treats a prefilter (its passing
rows' documents listed first, or each scored posting checked against it), set by worldgraph to 0 %:
always checked (config/environment.py LIBRARY_DEFAULTS; bench/README.md, "A narrow filter's rows
from the mirror's postings").

Lance reads the variable once per process, so each case runs in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("lance")

VARIABLE = "LANCE_FLAT_SEARCH_PERCENT_THRESHOLD"


def _run(args: list[str], env: dict[str, str]) -> str:
    """The last line ``python -c args...`` prints (a process of its own, ended on a timeout)."""
    done = subprocess.run([sys.executable, "-c", *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _env(value: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if value is not None:
        env[VARIABLE] = value
    return env


def test_the_episode_index_checks_a_filters_rows_on_the_scored_postings() -> None:
    code = f"import os, worldgraph.memory.index.search; print(os.environ.get({VARIABLE!r}))"
    assert _run([code], _env(None)) == "0"
    assert _run([code], _env("10")) == "10"  # an operator's value is left as it is


SEARCH = r"""
import json, sys
import lance, numpy as np
from lance.query import MatchQuery
ds = lance.dataset(sys.argv[1])
addrs = np.sort(ds.to_table(columns=[], with_row_address=True).column("_rowaddr").to_numpy())
out = []
for query in ("alpha beta", "gamma delta epsilon", "beta zeta"):
    for pred in ("tag = 'rare'", "tag = 'few'", "tag = 'many'", None):
        tbl = ds.scanner(columns=["_score"], with_row_address=True, full_text_query=MatchQuery(query, "text"),
                         filter=pred, prefilter=pred is not None, limit=20).to_table()
        out.append([tbl.column("_rowaddr").to_pylist(), [round(s, 5) for s in tbl.column("_score").to_pylist()]])
    for share in (0.004, 0.03):  # row addresses, as search.py restricts a search to an episode-id set's rows
        from worldgraph.memory.index.search import row_addr_set
        pick = addrs[np.random.default_rng(7).random(len(addrs)) < share]
        tbl = ds.scanner(columns=["_score"], with_row_address=True, full_text_query=MatchQuery(query, "text"),
                         row_addr_allowlist=row_addr_set(pick), limit=20).to_table()
        out.append([tbl.column("_rowaddr").to_pylist(), [round(s, 5) for s in tbl.column("_score").to_pylist()]])
print(json.dumps(out))
"""


def test_listing_or_checking_a_filters_rows_finds_the_same_hits_and_scores(tmp_path: Path) -> None:
    """0.4 %, 3 % and 30 % of the rows passing, as a prefilter and as row addresses: listed (lance's
    default of 10 %) or checked (0 %, as worldgraph sets it) or listed below 1 %, the same hits, scores
    and order."""
    import lance
    import pyarrow as pa

    rng = np.random.default_rng(3)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    n = 5_000
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 12)), p=np.linspace(2, 1, len(words)) / 15))
             for _ in range(n)]
    tags = rng.choice(["rare", "few", "many", "rest"], size=n, p=[0.004, 0.03, 0.3, 0.666])
    ds = lance.write_dataset(pa.table({"text": texts, "tag": tags.tolist()}), str(tmp_path / "t.lance"),
                             max_rows_per_file=2_000)
    ds.create_scalar_index("tag", "BITMAP")
    ds.create_scalar_index("text", "INVERTED")
    found = {value: json.loads(_run([SEARCH, str(tmp_path / "t.lance")], _env(value))) for value in ("10", "0", "1")}
    assert found["10"] == found["0"] == found["1"]
    assert all(len(hits) > 0 for hits, _ in found["0"])

