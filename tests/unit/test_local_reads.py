"""`mnemosync.agent.local_reads`: what an agent answers from its own cache and outbox (the MCP shim's lists and id
prefixes), with typed refusals. (Masking on the way out: `system/test_redaction.py`.)
"""

from __future__ import annotations

import pytest

from mnemosync.agent.client import AgentClient
from mnemosync.agent.client_settings import ClientSettings
from mnemosync.kernel.errors import InvalidArgument, NotFound

from helpers import add_op


@pytest.fixture
def client(server, tmp_path):
    with AgentClient(ClientSettings(server=server.address, agent_id="reader", insecure=True,
                                    cache_dir=tmp_path / "reader", timeout=5.0), live=False) as client:
        yield client


def test_an_id_prefix_resolves_to_its_memory_and_a_bad_one_is_a_typed_refusal(agents, client):
    writer = agents("writer")
    first = writer.append(add_op("The build cache lives in S3", memory_id="2f1c0b7e-0000-4000-8000-000000000001"))
    writer.append(add_op("Deploys go through ops/deploy.sh", memory_id="2f1c0b7f-0000-4000-8000-000000000002"))
    client.sync()
    memory_id = first.results[0].memory_id
    assert client.local.resolve_id(memory_id.upper()) == memory_id
    assert client.local.resolve_id("2f1c0b7e") == memory_id
    with pytest.raises(InvalidArgument, match="is the start of several memory ids"):
        client.local.resolve_id("2f1c0b7")
    with pytest.raises(NotFound, match="^no memory id starts with 'ffffffff' in this agent's cache"):
        client.local.resolve_id("ffffffff")
    with pytest.raises(InvalidArgument, match="is not a memory id"):
        client.local.resolve_id("not-an-id!")


def test_lists_topics_and_counts_come_from_the_cache(agents, client):
    agents("writer").append(add_op("The deploy user is deploy-bot", tags=("deploy",), type="config"))
    assert client.local.recent(since_ms=0) == []  # not synced yet: the cache is what it answers from
    client.sync()
    assert [m.content for m in client.local.recent(since_ms=0)] == ["The deploy user is deploy-bot"]
    assert [(t.name, t.count) for t in client.local.tag_topics()] == [("deploy", 1)]
    assert [(t.name, t.count) for t in client.local.type_topics()] == [("config", 1)]
    assert client.local.counts()["live"] == 1 and client.local.offset == 1
