"""What the server answers, as both ends see it: an appended operation's result, and the server's counts.

The ledger returns these (`mnemosync.server.ledger.Ledger`), the servicer encodes them and
the agent's remote decodes them back (`mnemosync.kernel.codec`), so the agent client
and the server speak the same types, never protobuf messages.
"""

from __future__ import annotations

from dataclasses import dataclass

from mnemosync.kernel.model_identity import ModelInfo


@dataclass(frozen=True)
class OpResult:
    """The outcome of one appended operation.

    `conflict_id` is set when the write opened or joined a conflict;
    `deduplicated` when an add was answered with an existing memory (then
    `memory_id` and `version` are that memory's and `seq` is 0).
    """

    op_id: str
    memory_id: str
    seq: int
    version: int
    replayed: bool
    conflict_id: int = 0
    deduplicated: bool = False


@dataclass(frozen=True)
class AppendOutcome:
    """The results of one Append, in request order, and the head after it."""

    results: list[OpResult]
    head_seq: int


@dataclass(frozen=True)
class AgentOffset:
    """An agent's acknowledged position in the changelog, and how far behind the head it is."""

    agent_id: str
    acked_seq: int
    acked_at_ms: int
    lag: int = 0


@dataclass(frozen=True)
class ReadStoreStatus:
    """A server reading a PostgreSQL hot standby: how far behind the primary that standby is (see the proto's
    ReadStoreStatus for each field)."""

    source: str
    reachable: bool
    error: str
    replayed_seq: int
    primary_seq: int
    lag_entries: int
    lag_ms: int


@dataclass(frozen=True)
class Stats:
    """The server's counts: what Stats answers and `mnemosync status` and the MCP `stats` tool show."""

    head_seq: int
    live_memories: int
    archived_memories: int
    by_layer: dict[str, int]
    by_scope: dict[str, int]
    agents: list[AgentOffset]
    embedding_model: ModelInfo | None
    data_bytes: int
    server_version: str = ""
    server_time_ms: int = 0
    """The server's wall clock when it answered (0 from servers that do not send it)."""
    read_store: ReadStoreStatus | None = None
    """The hot standby this server reads from, with its lag (None: it reads from its primary or SQLite)."""
