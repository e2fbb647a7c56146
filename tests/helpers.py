"""What many tests use: a raw gRPC agent, operations with synthetic vectors, settings, bounded waits,
a clock moved by hand, the `mnemosync` command in a subprocess and the server in one.

Fixtures live in `conftest.py`; this module is imported by name (`from helpers import ...`), since
`tests/` is on the path under pytest.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TypeVar

import grpc
import numpy as np
import pytest

from mnemosync.agent.remote import Remote
from mnemosync.agent.tls import AgentTls
from mnemosync.kernel import lifecycle, projections
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.settings_loading import default_data_home
from mnemosync.server import usage_stats
from mnemosync.server.clock import Clock
from mnemosync.server.ledger import Ledger
from mnemosync.server.settings import ServerSettings
from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from ops import local_agents, serve_process

TEST_MODEL = pb.EmbeddingModel(name="test-vectors", dimensions=16, sha256="ab" * 32)
"""The model of `fake_vector`s (the server never embeds, so any vectors do)."""

TEST_MODEL_INFO = ModelInfo(name=TEST_MODEL.name, dimensions=TEST_MODEL.dimensions, sha256=TEST_MODEL.sha256)
"""TEST_MODEL as the operator pins it (`run_server(pin_model=…)`): under mTLS only an admin's write may pin one."""

_T = TypeVar("_T")

AGENTS_RUNTIME = local_agents.runtime_dir()
"""The runtime directory (`XDG_RUNTIME_DIR`) of the local agents the suite's shims start; conftest stops them
and removes it at the end."""


def wait_until(condition: Callable[[], _T], *, timeout: float = 20.0, interval: float = 0.05,
               message: str | Callable[[], str] = "the condition never held") -> _T:
    """Polls `condition` until it returns something true and returns that; fails the test after `timeout`.

    The one bounded wait of the suite: nothing sleeps for a fixed time hoping something happened.
    `message` (or what it returns, when it is a function) says what never happened.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message() if callable(message) else message} (waited {timeout:g}s)")
        time.sleep(interval)


class ManualClock:
    """Time that moves only when the test moves it (`advance`); `clock` is the server's view of it."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms
        self.clock = Clock(now_ms=lambda: self.now_ms, monotonic=lambda: self.now_ms / 1000)

    def advance(self, seconds: float) -> None:
        """Moves the time forward."""
        self.now_ms += round(seconds * 1000)


def refused(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    """The status and details of a gRPC call that must fail."""
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code(), err.value.details()


def fake_vector(text: str, dims: int = 16) -> list[float]:
    """A deterministic unit vector per text (the server never embeds, so any vectors do)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=dims)
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def add_op(content: str, *, scope="user", type="fact", tags=(), layer=0, memory_id=None,
           op_id=None, vector=None) -> pb.Operation:
    """An AddOp with a synthetic vector."""
    return pb.Operation(
        op_id=op_id or str(uuid.uuid4()),
        memory_id=memory_id or str(uuid.uuid4()),
        add=pb.AddOp(scope=scope, type=type, tags=list(tags), layer=layer, content=content,
                     embedding=vector or fake_vector(content)),
    )


def update_op(memory_id: str, base_version: int, content: str | None = None, **fields) -> pb.Operation:
    """An UpdateOp (with a synthetic vector when the content changes)."""
    update = pb.UpdateOp(**fields)
    if content is not None:
        update.content = content
        update.embedding.extend(fake_vector(content))
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=base_version,
                        update=update)


class RawAgent:
    """A thin gRPC client with one agent identity, for testing the wire contract."""

    def __init__(self, address: str, agent_id: str):
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.MemoryServiceStub(self.channel)
        self.agent_id = agent_id
        self.metadata = (("x-mnemosync-agent", agent_id),)

    def call(self, method: str, request, **kwargs):
        return getattr(self.stub, method)(request, metadata=self.metadata, timeout=30, **kwargs)

    def append(self, *ops: pb.Operation, model=TEST_MODEL) -> pb.AppendResponse:
        return self.call("Append", pb.AppendRequest(operations=ops, embedding_model=model))

    def add(self, content: str, *, scope="user", type="fact", tags=(), layer=0, memory_id=None,
            op_id=None, vector=None) -> pb.OpResult:
        op = add_op(content, scope=scope, type=type, tags=tags, layer=layer, memory_id=memory_id,
                    op_id=op_id, vector=vector)
        return self.append(op).results[0]

    def get(self, memory_id: str) -> pb.Memory:
        return self.call("Get", pb.GetRequest(id=memory_id)).memory

    def sync(self, since: int = 0, max_entries: int = 0) -> list[pb.ChangelogEntry]:
        return list(self.call("Sync", pb.SyncRequest(since_seq=since, max_entries=max_entries)))

    def search(self, query: str = "", vector=None, **kwargs) -> list[pb.SearchResult]:
        request = pb.SearchRequest(
            query=query, query_vector=vector or [], embedding_model=TEST_MODEL if vector else None,
            **kwargs,
        )
        return list(self.call("Search", request).results)

    def close(self):
        self.channel.close()


class KeepAdding:
    """Adds memories as `agent` from a thread until `stop` or until the server goes away (a kill); `acknowledged`
    holds the ids of the adds the server answered, in order."""

    def __init__(self, agent: RawAgent):
        self.acknowledged: list[str] = []
        self._agent = agent
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stopped.is_set():
            try:
                self.acknowledged.append(self._agent.add(f"memory {i}").memory_id)
            except grpc.RpcError:
                return
            i += 1

    def stop(self) -> None:
        """Stops adding and waits for the thread (bounded)."""
        self._stopped.set()
        self._thread.join(timeout=30)


STORE_KINDS = ("sqlite", "postgresql")
"""The stores the conformance suite runs on: a module opts in with `CONFORMANCE = True` (conftest parametrises its
`server_settings`, `server` and `agents`)."""


@contextmanager
def postgres_database(postgres_server) -> Iterator[str]:
    """A fresh, empty database on `postgres_server` (a pgserver); yields its URL and drops it after."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_server.get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield postgres_server.get_uri(name)
    finally:
        with psycopg.connect(postgres_server.get_uri(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def dev_settings(tmp_path: Path, *, policy: str | None = None, name: str = "server") -> ServerSettings:
    """Settings of a loopback development server in `tmp_path/name`, with `policy` (TOML text) as its
    policy file when given."""
    policy_file = None
    if policy is not None:
        policy_file = tmp_path / f"{name}-policy.toml"
        policy_file.write_text(policy)
    return ServerSettings(data_dir=tmp_path / name, listen="127.0.0.1:0", insecure=True, synchronous="normal",
                          policy_file=policy_file)


@contextmanager
def served_agents(settings: ServerSettings, clock: Clock | None = None) -> Iterator[Callable[[str], RawAgent]]:
    """Runs a server with `settings` (and `clock`) and yields a factory of RawAgents of it; all close afterwards."""
    from mnemosync.server.app import run_server

    made: list[RawAgent] = []
    with run_server(settings, **({"clock": clock} if clock else {})) as running:

        def agent(agent_id: str) -> RawAgent:
            made.append(RawAgent(running.address, agent_id))
            return made[-1]

        try:
            yield agent
        finally:
            for a in made:
                a.close()


def model_data_home() -> Path:
    """Where tests keep the built GGUF model between runs (the set-up script's data home)."""
    return Path(os.environ.get("MNEMOSYNC_TEST_DATA_HOME") or default_data_home())


def free_port() -> int:
    """A currently free loopback TCP port (for servers that must restart on the same port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mnemosync(*args: str, env: dict | None = None, clean_env: bool = False, stdin: str | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs the `mnemosync` command in a subprocess (`python -m mnemosync.cli`) and returns what it did.

    Args:
        env: Variables to set on top of the environment.
        clean_env: Start from an environment without any `MNEMOSYNC_*` variable.
        stdin: Text for its standard input.
    """
    base = {k: v for k, v in os.environ.items() if not (clean_env and k.startswith("MNEMOSYNC_"))}
    return subprocess.run([sys.executable, "-m", "mnemosync.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**base, **(env or {})}, input=stdin)


def write_facts(settings: ServerSettings, count: int, start: int = 0) -> None:
    """Runs a server with `settings` just long enough for agent alice to add "fact number i", i from `start` on."""
    with served_agents(settings) as agents:
        alice = agents("alice")
        for i in range(start, start + count):
            alice.add(f"fact number {i}")


def five_memories_served(data_dir: Path) -> None:
    """Starts `mnemosync serve` on `data_dir`, writes five memories, and stops it (the server is then stopped)."""
    with ServeProcess(data_dir) as server:
        agent = RawAgent(server.address, "agent-a")
        for i in range(5):
            agent.add(f"memory {i}")
        agent.close()


class ServeProcess(serve_process.ServeProcess):
    """`mnemosync serve` in a subprocess (`ops.serve_process`), with `synchronous=normal`: tests never test
    power loss. `address` is known once it is ready."""

    def __init__(self, data_dir: Path, *extra: str, listen: str = "127.0.0.1:0", env: dict | None = None,
                 embed_model: Path | None = None):
        super().__init__(data_dir, *extra, listen=listen, env=env, embed_model=embed_model, synchronous="normal")


# -- mTLS ---------------------------------------------------------------------------------------------------------

YEARS_AGO = dt.datetime.now(dt.UTC) - dt.timedelta(days=800)
"""Issue certificates as of this moment to make expired ones."""


class TlsAgent(RawAgent):
    """A RawAgent over mTLS with an agent bundle; `claimed_id` is sent as metadata (and must be ignored)."""

    def __init__(self, address: str, bundle: Path, claimed_id: str | None = None):
        creds = grpc.ssl_channel_credentials((bundle / "ca.crt").read_bytes(), (bundle / "agent.key").read_bytes(),
                                             (bundle / "agent.crt").read_bytes())
        self.channel = grpc.secure_channel(address, creds)
        self.stub = pb_grpc.MemoryServiceStub(self.channel)
        self.agent_id = bundle.name
        self.metadata = (("x-mnemosync-agent", claimed_id),) if claimed_id else ()


def tls_settings(tmp_path: Path, tls_dir: Path, **limits) -> ServerSettings:
    """Settings of an mTLS server in `tmp_path/server` with the TLS files in `tls_dir`."""
    return ServerSettings(data_dir=tmp_path / "server", listen="127.0.0.1:0", tls_dir=tls_dir, synchronous="normal",
                          limits=Limits(**limits))


def tls_remote(address: str, bundle: Path, server_name: str | None = None) -> Remote:
    """The agent client's connection with the agent bundle in `bundle`."""
    return Remote(address, bundle.name, insecure=False, timeout=5, tls=AgentTls(bundle, server_name))


def server_tls_dir(target: Path, ca_dir: Path) -> Path:
    """A copy of the server's TLS folder `ca.issue_server` wrote in `ca_dir` (so a revocation in one test stays
    there)."""
    shutil.copytree(ca_dir / "server", target)
    return target


# -- the attacker who holds the database file ---------------------------------------------------------------------


def rewrite_changelog(path: Path, seq: int, change: Callable, *, tree: bool = True) -> None:
    """Edits the server's SQLite file directly, as someone holding it can: replaces entry `seq` by
    `change(entry)`, recomputes every hash from there on so the chain verifies, and (with `tree`) rebuilds the
    transparency log's tree to match. Only an outside reference (a signature, an agent's checkpoint) can tell."""
    from dataclasses import replace

    from sqlite_utils.utils import sqlite3

    from mnemosync.kernel.entry import GENESIS_HASH, canonical_json
    from mnemosync.server import changelog, merkle_log

    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DROP TRIGGER IF EXISTS changelog_no_update")
        entries = [changelog._entry(row) for row in conn.execute(
            f"SELECT {changelog._COLUMNS} FROM changelog ORDER BY seq")]
        prev = GENESIS_HASH
        for e in entries:
            if e.seq == seq:
                e = change(e)
            e = replace(e, prev_hash=prev)
            e = replace(e, hash=e.computed_hash())
            conn.execute(
                "UPDATE changelog SET payload = ?, embedding = ?, payload_commit = ?, payload_salt = ?, "
                "embedding_sha256 = ?, redacted_by = ?, signature = ?, signer_key = ?, prev_hash = ?, hash = ? "
                "WHERE seq = ?",
                (canonical_json(e.payload), e.embedding, e.payload_commit, e.payload_salt, e.embedding_sha256,
                 e.redacted_by, e.signature, e.signer_key, e.prev_hash, e.hash, e.seq))
            prev = e.hash
        if tree:
            merkle_log.rebuild(conn)


OLD_ENTRY_TAMPERS = {
    "entry 1 edited": "UPDATE changelog SET payload = replace(payload, 'fact number 0', 'fact number 9') WHERE seq = 1",
    "entries 2 and 3 swapped": "UPDATE changelog SET seq = CASE seq WHEN 2 THEN -3 ELSE -2 END WHERE seq IN (2, 3); "
                               "UPDATE changelog SET seq = -seq WHERE seq < 0",
    "entry 3 deleted": "DROP TRIGGER changelog_no_delete; DELETE FROM changelog WHERE seq = 3",
    "a forged redaction mark": "UPDATE changelog SET payload = replace(payload, 'fact number 1', '[redacted]'), "
                               "payload_salt = '', redacted_by = 7 WHERE seq = 2",
    "a corrupt Merkle leaf": "UPDATE merkle_nodes SET hash = zeroblob(32) WHERE level = 0 AND idx = 4",
}
"""Old rows of `marked_history` edited behind a stopped server, tree left alone (statements split at "; "): the
start-up check, which walks only what came after its mark, does not see them (issue 37, item 4)."""


def marked_history(settings: ServerSettings, meanwhile: Callable[[str], None] | None = None) -> None:
    """Writes eight entries with `settings` (a policy whose agent root is an admin): "fact number 0" to 5 by alice,
    the redaction of the sixth by root, "fact number 7"; runs `meanwhile(address)` while that server serves; then
    starts the server once more, so the start-up check marks all eight as verified."""
    from mnemosync.server.app import run_server

    with run_server(settings) as running:
        alice, root = RawAgent(running.address, "alice"), RawAgent(running.address, "root")
        ids = [alice.append(add_op(f"fact number {i}")).results[0].memory_id for i in range(6)]
        root.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[5], base_version=1,
                                 redact=pb.RedactOp(reason="a secret")))
        alice.append(add_op("fact number 7"))
        alice.close()
        root.close()
        if meanwhile is not None:
            meanwhile(running.address)
    with run_server(settings):
        pass


def tampered_copy(settings: ServerSettings, target: Path, tamper: str) -> ServerSettings:
    """`settings` over a copy of its data directory in `target`, edited by `OLD_ENTRY_TAMPERS[tamper]`."""
    import shutil
    from dataclasses import replace

    copied = replace(settings, data_dir=target)
    shutil.copytree(settings.data_dir, copied.data_dir)
    for statement in OLD_ENTRY_TAMPERS[tamper].split("; "):
        edit_database(copied.db_path, statement)
    return copied


def edit_database(path: Path, sql: str, *params) -> None:
    """Runs one statement on the server's SQLite file directly (the append-only trigger dropped first)."""
    from sqlite_utils.utils import sqlite3

    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DROP TRIGGER IF EXISTS changelog_no_update")
        conn.execute(sql, params)


def snapshot(ledger: Ledger) -> dict:
    """The ledger's projections as plain data (`mnemosync.kernel.projections.snapshot`): what the tests compare
    replicas, rebuilds and caches with. A test oracle, so it lives here, not on the serving ledger."""
    return projections.snapshot(ledger.context.reader())


def usage(ledger: Ledger, memory_id: str) -> lifecycle.Usage:
    """A memory's usage as ranking and the sweep see it now (after the buffered uses are written)."""
    ledger.lifecycle.flush_uses()
    return usage_stats.usage_for(ledger.context.reader(), [memory_id]).get(memory_id, lifecycle.NO_USE)


ledger_snapshot = snapshot
"""`snapshot` under a name for the modules that import the kernel's `snapshot` module."""
