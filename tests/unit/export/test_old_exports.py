"""Snapshots written before facts of any kind existed export byte-identically: the `kitchen` world of
the data folder data_9eed448.tar.gz, exported now, equals the export commit 9eed448 wrote of it;
and snapshots that commit wrote (tests/fixtures/exports_9eed448/, made by
make_exports_9eed448.py) imported and exported again give the same bytes, on both stores. A fact
edge adds its predicate and single_valued, and nothing else changes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.service.test_forget import graph_kw, wm  # noqa: F401 - fixtures: a model on each store
from tests.unit.service.test_upgrade import unpack
from worldgraph import WorldModel
from worldgraph.errors import InvalidInputError
from worldgraph.export.snapshot import FILES, META_FILE, read_snapshot, write_snapshot

OLD = Path(__file__).resolve().parents[2] / "fixtures" / "exports_9eed448"
NAMES = [*FILES.values(), META_FILE]


def same_files(folder: Path, reference: Path) -> None:
    for name in NAMES:
        assert (folder / name).read_bytes() == (reference / name).read_bytes(), name


def test_the_kitchen_of_the_9eed448_folder_exports_as_9eed448_exported_it(tmp_path: Path) -> None:
    data = unpack(tmp_path)
    with WorldModel.open(data) as wm:  # opened writable: whatever an upgrade does, the bytes stay
        out = wm.export("acme", "kitchen", tmp_path / "out")
    same_files(out, OLD / "kitchen")


@pytest.fixture
def model(wm: WorldModel) -> Iterator[WorldModel]:
    """``wm`` on each store, the tenant "acme"'s snapshots forgotten after the test (they are the
    exports' own tenant, so a shared Neo4j server keeps none of them)."""
    yield wm
    for env in ("kitchen", "house"):
        if env in [e["env_name"] for e in wm.list_environments("acme")]:
            wm.forget_environment("acme", env)


@pytest.mark.parametrize("env", ["kitchen", "house"])
def test_snapshots_of_9eed448_import_and_export_byte_identically(model: WorldModel, env: str, tmp_path: Path) -> None:
    model.import_snapshot("acme", OLD / env)
    same_files(model.export("acme", env, tmp_path / "out"), OLD / env)


def test_a_fact_edge_adds_its_predicate_and_single_valued_and_nothing_else(tmp_path: Path) -> None:
    graph = read_snapshot(OLD / "house")
    edge = dict(graph["edges"][0], id=str(uuid.uuid4()), relation="fact", predicate="works_at")
    graph["edges"].append(edge)
    out = write_snapshot(graph, tmp_path / "with-fact")
    lines = (out / "edges.jsonl").read_text("utf-8").splitlines()
    old = (OLD / "house" / "edges.jsonl").read_text("utf-8").splitlines()
    assert [x for x in lines if x not in old] == [next(x for x in lines if edge["id"] in x)]
    rec = json.loads(next(x for x in lines if edge["id"] in x))
    assert (rec["predicate"], rec["single_valued"]) == ("works_at", False)
    assert set(rec) - set(json.loads(old[0])) == {"predicate", "single_valued"}
    assert read_snapshot(out)["edges"] == sorted([*read_snapshot(OLD / "house")["edges"], rec], key=lambda e: e["id"])


@pytest.mark.parametrize("bad", [None, "", "Works At", 7])
def test_a_fact_edge_without_a_snake_case_predicate_is_refused_naming_the_line(tmp_path: Path, bad: object) -> None:
    graph = read_snapshot(OLD / "house")
    graph["edges"].append(dict(graph["edges"][0], id="zzz", relation="fact", predicate=bad))
    folder = write_snapshot(read_snapshot(OLD / "house"), tmp_path / "s")
    with (folder / "edges.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(graph["edges"][-1]) + "\n")
    with pytest.raises(InvalidInputError, match=r"edges.jsonl \(edges\[\d+\] predicate\).*snake_case"):
        read_snapshot(folder)
