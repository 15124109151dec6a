"""The sandbox alone holds: embedded Cypher with its text guard switched off (the test switch
``testing_cypher_guard_off``, honoured only where Landlock is in force) against an attacker who
knows LadybugDB's dialect: file functions and clauses, writes, extensions, settings, exports,
attaches, network URLs, table functions, crashes, runaway expressions. For every attack: no file
outside the caller's projection is read (the data folder's SQLite file, another tenant's saved
projection, /etc/passwd, the server's /proc), nothing is written anywhere, no socket connects
(TCP, UDP, Unix), the store keeps serving and the call ends by its deadline + 1 s. Then the same
suite with the guard on (each attack refused before anything runs, or harmless), and the child's
own state: no inherited file, one thread when Landlock was applied, seccomp on.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from worldgraph import WorldModel
from worldgraph.errors import WorldGraphError
from worldgraph.kg.embedded.cypher import confine
from worldgraph.kg.embedded.cypher import opener as opener_module
from worldgraph.memory.embeddings import HashingEmbedder

pytestmark = pytest.mark.skipif(confine.abi() < 1, reason="the sandbox needs Landlock (Linux >= 5.13); "
                                "test_cypher_unsandboxed.py covers the rest")

TIMEOUT = 2.0
BOUND = TIMEOUT + 1.0


@dataclass
class Target:
    wm: WorldModel
    data: Path
    canary: Path  # a folder outside the data folder, with a secret file
    victim_file: Path  # the other tenant's saved projection
    secret: str  # in the victim's records, the canary file, and nothing the attacker may read
    tcp: socket.socket
    udp: socket.socket
    unix: socket.socket
    unix_path: Path


def _snapshot(*folders: Path) -> dict[str, tuple[int, int]]:
    """Every file under the folders: (size, mtime in ns)."""
    out = {}
    for folder in folders:
        for root, _dirs, files in os.walk(folder):
            for name in files:
                p = Path(root) / name
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp("sandbox")
    mp = pytest.MonkeyPatch()
    mp.setattr(opener_module, "SAVE_MIN_ROWS", 0)  # both tenants' projections saved in the data folder
    secret = f"SECRET-{uuid.uuid4().hex}"
    wm = WorldModel.open(tmp / "data", embedder=HashingEmbedder(64), cypher_timeout_seconds=TIMEOUT,
                         testing_cypher_guard_off=True)
    for tenant, text in (("attacker", "the attacker's own run"), ("victim", secret)):
        wm.record_experiences(tenant, [{"agent_id": "a", "agent_role": "r", "task_type": "t",
                                        "task_description": f"{text} {i}", "outcome": "success"} for i in range(3)])
        wm.apply_delta(tenant, "Cottage", {"entities": [{"ref": "k", "name": f"{text} key", "type": "item"}],
                                           "states": [], "edges": [], "rules": []})
        assert len(wm.cypher(tenant, "MATCH (e:Episode) RETURN e.id")) == 3
    # what is written in the background is done before any attack: the indexes (the world facts'
    # too), and the WAL copied into worldgraph.db up to 0.5 s after a commit (kg/embedded/checkpointer.py,
    # stopped here), so a file that changes during an attack was changed by the attack
    wm.wait_for_updates()
    wm.store.db.checkpointer.close()  # type: ignore[attr-defined]
    victim = wm.store.projections.current("victim")  # type: ignore[attr-defined]
    assert wm.store.saved.holds(victim.path)  # type: ignore[attr-defined]
    canary = tmp / "canary"
    canary.mkdir()
    (canary / "secret.csv").write_text(f"a,b\n{secret},1\n")
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.settimeout(0.01)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.01)
    unix_path = tmp / "s.sock"
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(unix_path))
    unix.listen(8)
    unix.settimeout(0.01)
    try:
        yield Target(wm, tmp / "data", canary, victim.path, secret, tcp, udp, unix, unix_path)
    finally:
        for s in (tcp, udp, unix):
            s.close()
        wm.close()
        mp.undo()


def attacks(t: Target) -> list[str]:
    """What an attacker who knows LadybugDB would try (each one statement)."""
    port, uport = t.tcp.getsockname()[1], t.udp.getsockname()[1]
    db, victim, canary = t.data / "worldgraph.db", t.victim_file, t.canary / "secret.csv"
    files = [db, victim, Path(str(victim) + ".wal"), canary, Path("/etc/passwd"), Path(f"/proc/{os.getpid()}/environ"),
             Path("/proc/self/environ"), t.data / "worldgraph.db-wal", victim.parent / (victim.name.split("-")[0] + ".json")]
    out = []
    for f in files:
        out += [f"LOAD FROM '{f}' (file_format='csv', header=false) RETURN *",
                f"LOAD FROM '{f}' (file_format='parquet') RETURN *",
                f"CALL READ_PARQUET('{f}') RETURN *",
                f"CALL READ_NPY('{f}') RETURN *",
                f"COPY Episode FROM '{f}'",
                f"ATTACH '{f}' AS other (dbtype lbug)",
                f"LOAD EXTENSION '{f}'"]
    out += [
        f"LOAD FROM '{t.canary}/*.csv' (header=false) RETURN *",
        "LOAD FROM '/etc/*' (file_format='csv', header=false) RETURN *",
        f"CALL READ_CSV_PARALLEL('{canary}') RETURN *",
        f"IMPORT DATABASE '{t.canary}'",
        f"EXPORT DATABASE '{t.canary}/dump'",
        f"EXPORT DATABASE '{t.data}/dump'",
        f"COPY (MATCH (e:Episode) RETURN e.task_description) TO '{t.canary}/leak.csv'",
        f"COPY (MATCH (e:Episode) RETURN e.task_description) TO '{t.data}/leak.csv'",
        "COPY (MATCH (e:Episode) RETURN e.task_description) TO '/tmp/worldgraph-leak.parquet'",
        f"LOAD FROM 'http://127.0.0.1:{port}/x.csv' RETURN *",
        f"LOAD FROM 'https://127.0.0.1:{port}/x.csv' RETURN *",
        "LOAD FROM 's3://bucket/x.csv' RETURN *",
        f"ATTACH 'http://127.0.0.1:{port}/db' AS remote (dbtype lbug)",
        f"ATTACH 'postgresql://u@127.0.0.1:{uport}/db' AS pg (dbtype postgres)",
        "INSTALL httpfs", "INSTALL json", "UNINSTALL httpfs", "LOAD EXTENSION httpfs", "LOAD httpfs",
        "CREATE (:Episode {id: 'planted', tenant_id: 'attacker'})",
        "MATCH (e:Episode) SET e.task_description = 'changed'",
        "MATCH (e:Episode) DETACH DELETE e",
        "MERGE (a:Agent {id: 'planted'})",
        "DROP TABLE Episode", "ALTER TABLE Episode ADD planted STRING", "CREATE NODE TABLE Planted(id STRING, PRIMARY KEY(id))",
        "COMMENT ON TABLE Episode IS 'planted'", "CREATE MACRO planted(x) AS x", "CREATE SEQUENCE planted",
        "CHECKPOINT", "BEGIN TRANSACTION", "CALL threads=1", "CALL home_directory='/tmp'", "CALL spill_to_disk=true",
        "CALL show_tables() RETURN *", "CALL current_setting('home_directory') RETURN *", "CALL db_version() RETURN *",
        "CALL show_attached_databases() RETURN *", "CALL storage_info('Episode') RETURN *", "CALL show_functions() RETURN *",
        "CALL READ_CSV_SERIAL('/etc/passwd') RETURN *",
        "MATCH (e:Episode) RETURN e.id; MATCH (e:Episode) DELETE e",
        "RETURN size(list_transform(range(1, 1000000), x -> size(lpad(to_string(x), 2000, 'b')))) AS n",
        "RETURN size(lpad('a', 300000000, 'xy')) AS n",
        "WITH range(1, 1000000) AS l WITH l + l AS l WITH l + l AS l WITH l + l AS l RETURN size(l) AS n",
        "RETURN " + "[" * 300 + "1" + "]" * 300 + " AS deep",
        "RETURN " + "CASE WHEN true THEN " * 60 + "1" + " ELSE 0 END" * 60 + " AS c",
        "MATCH (n:Entity) RETURN " + "label(" * 40 + "n" + ")" * 40,
        "MATCH (e:Episode) " + " ".join(f"WITH e, {i} AS x{i}" for i in range(3000)) + " RETURN e.id",
    ]
    return out


def _connections(t: Target) -> list[str]:
    got = []
    for s in (t.tcp, t.unix):
        try:
            conn, _ = s.accept()
            conn.close()
            got.append(str(s.getsockname()))
        except (TimeoutError, BlockingIOError, OSError):
            pass
    try:
        t.udp.recvfrom(1)
        got.append("udp")
    except (TimeoutError, BlockingIOError, OSError):
        pass
    return got


def _run(t: Target, query: str, direct: bool = False) -> tuple[str, Any]:
    """The query through WorldModel.cypher, or (``direct``) straight to the store, past the size and
    nesting limits too."""
    started = time.monotonic()
    try:
        rows: Any = (t.wm.store.cypher if direct else t.wm.cypher)("attacker", query)
        outcome = "ran"
    except WorldGraphError as exc:
        rows, outcome = str(exc), type(exc).__name__
    elapsed = time.monotonic() - started
    assert elapsed <= BOUND, f"{query[:120]}: {elapsed:.2f} s (timeout {TIMEOUT} s)"
    return outcome, rows


def _assert_held(t: Target, query: str, rows: Any, before: dict[str, tuple[int, int]]) -> None:
    text = repr(rows)
    assert t.secret not in text and "root:x:0:0" not in text and "PATH=" not in text, (query[:200], text[:300])
    assert _snapshot(t.data, t.canary) == before, f"{query[:200]}: a file changed"
    assert not Path("/tmp/worldgraph-leak.parquet").exists()
    assert _connections(t) == [], f"{query[:200]}: a socket connected"


def test_the_sandbox_alone_holds(target: Target) -> None:
    t = target
    assert t.wm.store.cypher_sandbox() == "landlock"
    assert t.wm.store.cypher_runner.settings.guard_off  # type: ignore[attr-defined]
    own = sorted(r["t"] for r in t.wm.cypher("attacker", "MATCH (e:Episode) RETURN e.task_description AS t"))
    before = _snapshot(t.data, t.canary)
    outcomes: dict[str, int] = {}
    for query in attacks(t):
        outcome, rows = _run(t, query, direct=True)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        _assert_held(t, query, rows, before)
        if outcome == "ran":  # what ran read the attacker's own projection and nothing else
            assert "SECRET" not in repr(rows)
    # the store serves on, the attacker's projection is as it was, the victim's too
    assert sorted(r["t"] for r in t.wm.cypher("attacker", "MATCH (e:Episode) RETURN e.task_description AS t")) == own
    assert len(t.wm.cypher("victim", "MATCH (e:Episode) WHERE e.task_description STARTS WITH $s RETURN e.id",
                           {"s": t.secret})) == 3
    assert outcomes.get("CypherQueryError", 0) + outcomes.get("ReadOnlyQueryError", 0) > len(attacks(t)) // 2, outcomes


def test_with_the_guard_on_every_attack_is_refused_before_it_runs(target: Target,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same suite with the guard on: refused by the text checks (no child spends a moment on
    it), but for the expressions the engine runs to the deadline, which the kill ends."""
    t = target
    runner = t.wm.store.cypher_runner  # type: ignore[attr-defined]
    monkeypatch.setattr(runner, "settings", runner.settings.__class__(**{**runner.settings.__dict__,
                                                                          "guard_off": False, "timeout": TIMEOUT}))
    before = _snapshot(t.data, t.canary)
    ran = []
    for query in attacks(t):
        outcome, rows = _run(t, query)
        _assert_held(t, query, rows, before)
        if outcome == "ran" or "cypher_timeout_seconds" in str(rows) or "could not run" in str(rows):
            ran.append(query[:80])
    assert len(ran) <= 4, ran  # the CPU loop, deep brackets and a long WITH chain reach the engine, and end


def test_a_child_inherits_nothing_and_confined_itself_single_threaded(target: Target) -> None:
    t = target
    t.wm.cypher("attacker", "MATCH (e:Episode) RETURN count(e) AS n")
    kids = t.wm.store.cypher_runner.children.children("attacker")  # type: ignore[attr-defined]
    assert kids
    sqlite, lance = str(t.data / "worldgraph.db"), str(t.data / "lance")
    for kid in kids:
        pid = int(kid["pid"])
        assert kid["ready"]["threads"] == 1 and kid["ready"]["landlock"] >= 1 and kid["ready"]["seccomp"]
        assert kid["opened"]["threads_at_restrict"] == 1
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        assert not [x for x in links if x.startswith("socket:")], links
        for x in links:
            assert x.startswith(("pipe:", "anon_inode:", "/dev/null")) or x in (kid["path"], kid["path"] + ".wal"), links
            assert x not in (sqlite, sqlite + "-wal", sqlite + "-shm") and not x.startswith(lance), links
        status = Path(f"/proc/{pid}/status").read_text()
        assert "\nSeccomp:\t2" in status and "\nNoNewPrivs:\t1" in status
        assert int(Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[16]) > 0  # a lower priority (nice)


def test_confinement_denies_every_socket_and_other_files(tmp_path: Path) -> None:
    """confine itself, in a process of its own: no socket of any family (TCP, UDP, Unix,
    socketpair), no file but the one allowed, no signal to the parent."""
    import subprocess
    import sys

    allowed = tmp_path / "allowed"
    allowed.write_text("ok")
    (tmp_path / "other").write_text("no")
    code = f"""
import os, socket, sys
from worldgraph.kg.embedded.cypher import confine
confine.no_sockets()
assert confine.threads() == 1
confine.restrict(read=[{str(allowed)!r}])
out = []
for fam, kind in ((socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),
                  (socket.AF_INET6, socket.SOCK_STREAM), (socket.AF_UNIX, socket.SOCK_STREAM)):
    try:
        socket.socket(fam, kind); out.append('socket')
    except OSError: pass
try:
    socket.socketpair(); out.append('socketpair')
except OSError: pass
assert open({str(allowed)!r}).read() == 'ok'
for path in ({str(tmp_path / "other")!r}, '/etc/passwd', '/proc/self/environ'):
    try:
        open(path).read(); out.append(path)
    except OSError: pass
try:
    open({str(tmp_path / "new")!r}, 'w'); out.append('write')
except OSError: pass
try:
    os.kill(os.getppid(), 0); out.append('signal')
except OSError: pass
print(out)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
    assert not (tmp_path / "new").exists()
