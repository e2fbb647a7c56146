"""Shared fixtures: real servers on free loopback ports, real SQLite files."""

from __future__ import annotations

import hashlib
import os
import socket
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest

from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from server.app import run_server
from server.core.settings import default_data_home
from server.settings import ServerSettings

TEST_MODEL = pb.EmbeddingModel(name="test-vectors", dimensions=16, sha256="ab" * 32)


def fake_vector(text: str, dims: int = 16) -> list[float]:
    """A deterministic unit vector per text (the server never embeds, so any vectors do)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=dims)
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


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


def add_op(content: str, *, scope="user", type="fact", tags=(), layer=0, memory_id=None,
           op_id=None, vector=None) -> pb.Operation:
    return pb.Operation(
        op_id=op_id or str(uuid.uuid4()),
        memory_id=memory_id or str(uuid.uuid4()),
        add=pb.AddOp(scope=scope, type=type, tags=list(tags), layer=layer, content=content,
                     embedding=vector or fake_vector(content)),
    )


def update_op(memory_id: str, base_version: int, content: str | None = None, **fields) -> pb.Operation:
    update = pb.UpdateOp(**fields)
    if content is not None:
        update.content = content
        update.embedding.extend(fake_vector(content))
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=base_version,
                        update=update)


def dev_settings(tmp_path: Path, *, policy: str | None = None, name: str = "server") -> ServerSettings:
    """Settings of a loopback development server in `tmp_path/name`, with `policy` (TOML text) as its
    policy file when given."""
    policy_file = None
    if policy is not None:
        policy_file = tmp_path / f"{name}-policy.toml"
        policy_file.write_text(policy)
    return ServerSettings(data_dir=tmp_path / name, listen="127.0.0.1:0", insecure=True, synchronous="normal",
                          policy_file=policy_file)


@pytest.fixture
def server_settings(tmp_path: Path) -> ServerSettings:
    return dev_settings(tmp_path)


@pytest.fixture
def server(server_settings):
    """A real gRPC server on a free loopback port, over a real SQLite file."""
    with run_server(server_settings) as running:
        yield running


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


def test_data_home() -> Path:
    """Where tests keep the built GGUF model between runs (the set-up script's data home)."""
    return Path(os.environ.get("MNEMOSYNC_TEST_DATA_HOME") or default_data_home())


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The real default GGUF model, built once per machine."""
    from agent_client.model import ensure_default_model

    return ensure_default_model(test_data_home())


@pytest.fixture(scope="session")
def embedder(model_path):
    """One real llama.cpp embedder shared by the session's agent clients."""
    from agent_client.embeddings import Embedder

    with Embedder(model_path) as e:
        yield e


@pytest.fixture
def make_client(tmp_path, embedder, model_path):
    """Factory for real AgentClients (own cache dir each) against a server address."""
    from agent_client.client import AgentClient
    from agent_client.settings import ClientSettings

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


def free_port() -> int:
    """A currently free loopback TCP port (for servers that must restart on the same port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Hypothesis profiles: `ci` is bounded and the default under CI (or HYPOTHESIS_PROFILE=ci);
# `thorough` is for a long local run: HYPOTHESIS_PROFILE=thorough pytest tests/test_fuzz.py
from hypothesis import HealthCheck as _HealthCheck  # noqa: E402
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[_HealthCheck.too_slow])
_hypothesis_settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[_HealthCheck.too_slow])
_hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default"))
