"""Shared fixtures: real servers on free loopback ports, real SQLite files, the real model.

Tests are in two folders: `unit/`, one file per module it tests (`test_search.py`
for `proto/mnemosync/kernel/search.py`), and `system/`, what runs the real server process,
the real GGUF model or the real MCP client end to end (the consistency suite is
`system/consistency/`). Helpers they share are in `helpers.py`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from mnemosync.server import ca
from mnemosync.server.app import run_server
from mnemosync.server.settings import ServerSettings

from helpers import (
    AGENTS_RUNTIME,
    STORE_KINDS,
    TEST_MODEL_INFO,
    YEARS_AGO,
    ManualClock,
    RawAgent,
    dev_settings,
    model_data_home,
    postgres_database,
    served_agents,
    server_tls_dir,
    tls_settings,
)


@pytest.fixture(scope="session", autouse=True)
def local_agents_stopped():
    """Stops the local agents the suite's shims started (`helpers.AGENTS_RUNTIME`) and removes their directory."""
    from ops import local_agents

    yield
    local_agents.stop_agents(AGENTS_RUNTIME)
    shutil.rmtree(AGENTS_RUNTIME, ignore_errors=True)


def pytest_generate_tests(metafunc):
    """Runs every test of a module with `CONFORMANCE = True` that uses `store_kind` (through `server_settings`,
    `server` or `agents`) once per store."""
    if "store_kind" in metafunc.fixturenames and getattr(metafunc.module, "CONFORMANCE", False):
        metafunc.parametrize("store_kind", STORE_KINDS, indirect=True)


@pytest.fixture
def store_kind(request) -> str:
    """Which store the test's server keeps its changelog in (SQLite unless its module is a conformance one)."""
    return getattr(request, "param", "sqlite")


@pytest.fixture(scope="session")
def postgres_server():
    """One real PostgreSQL 16 with pgvector (the `pgserver` package) for the session; skips where it cannot be
    installed."""
    # Outside pytest's base temp: pytest removes old base temps of other sessions of the same user, even running.
    home = Path(tempfile.mkdtemp(prefix="mnemosync-pg-"))
    if not os.environ.get("XDG_RUNTIME_DIR"):  # pgserver's platformdirs warns on import without one
        runtime = Path(tempfile.gettempdir()) / f"mnemosync-runtime-{os.getuid()}"  # pgserver's locks outlive us
        runtime.mkdir(mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    try:
        import pgserver
    except ImportError:
        shutil.rmtree(home)
        pytest.skip("the PostgreSQL half of the conformance suite needs pgserver and psycopg: "
                    "pip install 'mnemosync[postgresql]' (ops/bootstrap.sh installs them)")
    data = home / "data"
    try:
        server = pgserver.get_server(data, cleanup_mode="stop")
    except Exception as exc:
        log = data / "log"
        raise RuntimeError(f"PostgreSQL (pgserver) did not start: {exc}; its log:\n"
                           f"{log.read_text()[-3000:] if log.exists() else '(none)'}") from exc
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh, empty database on the session's PostgreSQL for one test."""
    with postgres_database(postgres_server) as url:
        yield url


@pytest.fixture(scope="module")
def module_postgres_url(postgres_server):
    """A fresh, empty database on the session's PostgreSQL for one module (its module-scoped servers)."""
    with postgres_database(postgres_server) as url:
        yield url


@pytest.fixture
def store_setting(store_kind, request) -> str:
    """`ServerSettings.store` for the test's store: "" (SQLite) or a fresh PostgreSQL database's URL."""
    return request.getfixturevalue("postgres_url") if store_kind == "postgresql" else ""


@pytest.fixture
def server_settings(tmp_path: Path, store_setting) -> ServerSettings:
    return replace(dev_settings(tmp_path), store=store_setting)


@pytest.fixture
def server(server_settings):
    """A real gRPC server on a free loopback port, over a real SQLite file (or PostgreSQL, see `store_kind`)."""
    with run_server(server_settings) as running:
        yield running


@pytest.fixture
def clock() -> ManualClock:
    """A clock only the test moves; start servers with `clock.clock`."""
    return ManualClock()


@pytest.fixture
def policy_agents(tmp_path, clock, request):
    """Factory for RawAgents of a server on `clock` under the test module's `POLICY` (its agents, authorities and
    scopes); all close afterwards."""
    with served_agents(dev_settings(tmp_path, policy=request.module.POLICY), clock.clock) as agent:
        yield agent


@pytest.fixture
def agents(server):
    """Factory for RawAgent clients of `server`; all are closed afterwards."""
    made: list[RawAgent] = []

    def make(agent_id: str) -> RawAgent:
        agent = RawAgent(server.address, agent_id)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The real default GGUF model, built once per machine."""
    from mnemosync.agent.model import ensure_default_model

    return ensure_default_model(model_data_home())


@pytest.fixture(scope="session")
def embedder(model_path):
    """One real llama.cpp embedder shared by the session's agent clients."""
    from mnemosync.agent.embeddings import Embedder

    with Embedder(model_path) as e:
        yield e


@pytest.fixture
def make_client(tmp_path, embedder, model_path):
    """Factory for real AgentClients (own cache dir each) against a server address."""
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings

    made = []

    def make(address: str, agent_id: str, *, live: bool = False, start: bool = True, **settings):
        client_settings = ClientSettings(server=address, agent_id=agent_id, insecure=True,
                                         cache_dir=tmp_path / "agents" / agent_id, embed_model=model_path,
                                         timeout=5.0, **settings)
        client = AgentClient(client_settings, embedder=embedder, live=live)
        if start:
            client.start()
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA with a server certificate for 127.0.0.1/localhost and agents alice, bob, root (admin) and stale
    (expired)."""
    ca_dir = tmp_path_factory.mktemp("pki") / "ca"
    ca.init_ca(ca_dir)
    ca.issue_server(ca_dir, ["localhost", "127.0.0.1"])
    ca.issue_agent(ca_dir, "alice", authority=3, scopes=["user", "project:web"])
    ca.issue_agent(ca_dir, "bob", authority=4, scopes=["user"])
    ca.issue_agent(ca_dir, "root", authority=1, scopes=["*"], admin=True)
    ca.issue_agent(ca_dir, "stale", authority=3, scopes=["user"], now=YEARS_AGO, days=30)
    return ca_dir


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    """Another CA, with its own agent mallory."""
    ca_dir = tmp_path_factory.mktemp("foreign") / "ca"
    ca.init_ca(ca_dir, name="someone else's CA")
    ca.issue_server(ca_dir, ["127.0.0.1"])
    ca.issue_agent(ca_dir, "mallory", authority=1, scopes=["*"], admin=True)
    return ca_dir


@pytest.fixture
def tls_dir(tmp_path, pki) -> Path:
    """The server's own TLS directory (a copy, so revocations in one test stay there)."""
    return server_tls_dir(tmp_path / "tls", pki)


@pytest.fixture
def tls_server(tmp_path, tls_dir):
    """An mTLS server trusting `pki`, the test vectors' model pinned by the operator (under mTLS only an admin's
    write may pin one)."""
    with run_server(tls_settings(tmp_path, tls_dir), pin_model=TEST_MODEL_INFO) as running:
        yield running


@pytest.fixture(scope="module")
def signing_pki(tmp_path_factory) -> Path:
    """A CA with a server certificate, a signing agent, a plain agent and a signing admin."""
    ca_dir = tmp_path_factory.mktemp("signing-pki") / "ca"
    ca.init_ca(ca_dir)
    ca.issue_server(ca_dir, ["127.0.0.1"])
    ca.issue_agent(ca_dir, "signer", authority=3, scopes=["user"], signing=True)
    ca.issue_agent(ca_dir, "plain", authority=3, scopes=["user"])
    ca.issue_agent(ca_dir, "root", authority=1, scopes=["*"], admin=True, signing=True)
    return ca_dir


@pytest.fixture
def signing_server(tmp_path, signing_pki, model_path):
    """An mTLS server trusting `signing_pki`, with the real model pinned by the operator."""
    from mnemosync.kernel.model_identity import fingerprint

    with run_server(tls_settings(tmp_path, server_tls_dir(tmp_path / "tls", signing_pki)),
                    pin_model=fingerprint(model_path)) as running:
        yield running


@pytest.fixture
def signing_client(signing_server, signing_pki, embedder, model_path, tmp_path):
    """Factory for real AgentClients of `signing_server` with a bundle of `signing_pki` (no live updates);
    use each as a context manager."""
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings

    def make(name: str) -> AgentClient:
        settings = ClientSettings(server=signing_server.address, cert_dir=signing_pki / "agents" / name,
                                  cache_dir=tmp_path / "signing-agents" / name, embed_model=model_path, timeout=5.0)
        return AgentClient(settings, embedder=embedder, live=False)

    return make


# Hypothesis profiles: `ci` is bounded and the default under CI (or HYPOTHESIS_PROFILE=ci);
# `thorough` is for a long local run: HYPOTHESIS_PROFILE=thorough pytest tests/unit/test_service_fuzz.py
hypothesis_settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default"))
