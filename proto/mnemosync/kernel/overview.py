"""What the operator's view answers (ListAgents, ListChangelog, GetMemoryHistory, GetActivity, VerifyChain), as
both ends see it, and its codec both ways.

The server's store and presence record build these; the servicer encodes them
and the agent's remote decodes them back, so the dashboard
(`mnemosync.agent.dashboard`) reads the same types the server computed, never
protobuf messages. They live apart from `mnemosync.kernel.outcomes` and
`mnemosync.kernel.codec` because only the operator's view uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from mnemosync.kernel import codec, secrets_scan
from mnemosync.kernel.conflict_projection import Revision
from mnemosync.kernel.entry import TEXT_FIELDS, ChainReport, Entry
from mnemosync.kernel.memory import MemoryRow
from mnemosync.v1 import memory_pb2 as pb


@dataclass(frozen=True)
class OutboxReport:
    """An agent's outbox as it reports it when it acknowledges: writes waiting, writes refused, the oldest's time."""

    pending: int
    failed: int
    oldest_pending_ms: int = 0


@dataclass(frozen=True)
class AgentStatus:
    """One agent as the server knows it: its durable offset and its presence since the server started.

    `scopes` holds only the grant patterns the viewer may see (`hidden_scopes` counts the rest);
    `authority` 0 means the agent has not called since the server started.
    """

    agent_id: str
    authority: int = 0
    scopes: tuple[str, ...] = ()
    hidden_scopes: int = 0
    admin: bool = False
    acked_seq: int = 0
    lag: int = 0
    acked_at_ms: int = 0
    last_seen_ms: int = 0
    subscriptions: int = 0
    outbox: OutboxReport | None = None
    outbox_reported_at_ms: int = 0
    sessions: int | None = None
    """MCP sessions attached to its local process as it last reported them (None: not reported)."""

    @property
    def connected(self) -> bool:
        """True while it holds a Subscribe stream open (its live updates)."""
        return self.subscriptions > 0


@dataclass(frozen=True)
class AgentsView:
    """Every agent, the head their lags are measured against, and the viewer itself."""

    agents: list[AgentStatus]
    head_seq: int
    caller: AgentStatus
    hidden: int = 0
    """Agents left out because the viewer may not see them (see `ListAgentsResponse.hidden_agents`)."""


@dataclass(frozen=True)
class ChangelogRow:
    """A changelog entry for reading (texts masked, embedding dropped) and its memory's scope."""

    entry: Entry
    scope: str


@dataclass(frozen=True)
class MemoryVersion:
    """One entry that changed a memory, and the state it showed afterwards (`shown.state`, written by
    `shown.agent_id` at `shown.version`)."""

    entry: Entry
    shown: Revision


@dataclass(frozen=True)
class MemoryHistory:
    """A memory now, and every entry that changed it, oldest first."""

    memory: MemoryRow
    versions: list[MemoryVersion]


@dataclass(frozen=True)
class ActivityBucket:
    """One minute: entries written per operation (in the viewer's scopes) and searches answered."""

    start_ms: int
    writes: dict[str, int] = field(default_factory=dict)
    searches: int = 0

    @property
    def total_writes(self) -> int:
        """Entries written in the minute, all operations."""
        return sum(self.writes.values())


@dataclass(frozen=True)
class Activity:
    """Writes and searches per minute, and memory counts, in the viewer's scopes."""

    buckets: list[ActivityBucket]
    head_seq: int
    live_memories: int
    archived_memories: int
    by_layer: dict[str, int]
    by_scope: dict[str, int]
    counting_since_ms: int


@dataclass(frozen=True)
class ChainCheck:
    """A walk of the hash chain (`ChainReport`) and when it finished."""

    report: ChainReport
    checked_at_ms: int


def for_reading(entry: Entry) -> Entry:
    """An entry as the operator's view shows it: every text and tag masked (`secrets_scan.mask`), the embedding
    dropped."""
    def shown(k: str, v: Any) -> Any:
        if k in TEXT_FIELDS and isinstance(v, str):
            return secrets_scan.mask(v)
        if k == "tags" and isinstance(v, list):
            return [secrets_scan.mask(t) for t in v]
        return v

    payload = {k: shown(k, v) for k, v in entry.payload.items()}
    return replace(entry, payload=payload, embedding=None)


# -- codec ---------------------------------------------------------------------------------------------------------


def outbox_report(msg: pb.OutboxReport) -> OutboxReport:
    """A received outbox report."""
    return OutboxReport(msg.pending, msg.failed, msg.oldest_pending_ms)


def outbox_proto(report: OutboxReport | None) -> pb.OutboxReport | None:
    """The wire form of an outbox report (None stays None: not reported)."""
    if report is None:
        return None
    return pb.OutboxReport(pending=report.pending, failed=report.failed, oldest_pending_ms=report.oldest_pending_ms)


def agent_proto(a: AgentStatus) -> pb.AgentStatus:
    """The wire form of one agent's status."""
    return pb.AgentStatus(
        agent_id=a.agent_id, authority=a.authority, scopes=a.scopes, hidden_scopes=a.hidden_scopes, admin=a.admin,
        acked_seq=a.acked_seq, lag=a.lag, acked_at_ms=a.acked_at_ms, last_seen_ms=a.last_seen_ms,
        subscriptions=a.subscriptions, outbox=outbox_proto(a.outbox), outbox_reported_at_ms=a.outbox_reported_at_ms,
        sessions=a.sessions,
    )


def agent(msg: pb.AgentStatus) -> AgentStatus:
    """A received agent status."""
    return AgentStatus(
        agent_id=msg.agent_id, authority=msg.authority, scopes=tuple(msg.scopes), hidden_scopes=msg.hidden_scopes,
        admin=msg.admin, acked_seq=msg.acked_seq, lag=msg.lag, acked_at_ms=msg.acked_at_ms,
        last_seen_ms=msg.last_seen_ms, subscriptions=msg.subscriptions,
        outbox=outbox_report(msg.outbox) if msg.HasField("outbox") else None,
        outbox_reported_at_ms=msg.outbox_reported_at_ms,
        sessions=msg.sessions if msg.HasField("sessions") else None,
    )


def agents_proto(view: AgentsView) -> pb.ListAgentsResponse:
    """The wire form of ListAgents' answer."""
    return pb.ListAgentsResponse(agents=[agent_proto(a) for a in view.agents], head_seq=view.head_seq,
                                 caller=agent_proto(view.caller), hidden_agents=view.hidden)


def agents_view(msg: pb.ListAgentsResponse) -> AgentsView:
    """ListAgents' received answer."""
    return AgentsView([agent(a) for a in msg.agents], msg.head_seq, agent(msg.caller), msg.hidden_agents)


def changelog_proto(rows: list[ChangelogRow], head_seq: int) -> pb.ListChangelogResponse:
    """The wire form of ListChangelog's answer (rows already made `for_reading`)."""
    return pb.ListChangelogResponse(
        rows=[pb.ChangelogRow(entry=codec.entry_proto(r.entry), scope=r.scope) for r in rows], head_seq=head_seq)


def changelog_rows(msg: pb.ListChangelogResponse) -> tuple[list[ChangelogRow], int]:
    """ListChangelog's received rows, and the head when they were read."""
    return [ChangelogRow(codec.entry_from_proto(r.entry), r.scope) for r in msg.rows], msg.head_seq


def history_proto(h: MemoryHistory) -> pb.GetMemoryHistoryResponse:
    """The wire form of a memory's history (entries already made `for_reading`)."""
    return pb.GetMemoryHistoryResponse(
        memory=codec.memory_proto(h.memory),
        versions=[pb.MemoryVersion(entry=codec.entry_proto(v.entry), shown=codec.revision_proto(v.shown))
                  for v in h.versions])


def history(msg: pb.GetMemoryHistoryResponse) -> MemoryHistory:
    """A received memory history."""
    return MemoryHistory(codec.memory_row(msg.memory),
                         [MemoryVersion(codec.entry_from_proto(v.entry), codec.revision(v.shown))
                          for v in msg.versions])


def activity_proto(a: Activity) -> pb.GetActivityResponse:
    """The wire form of GetActivity's answer."""
    return pb.GetActivityResponse(
        buckets=[pb.ActivityBucket(start_ms=b.start_ms, writes=b.writes, searches=b.searches) for b in a.buckets],
        head_seq=a.head_seq, live_memories=a.live_memories, archived_memories=a.archived_memories,
        by_layer=a.by_layer, by_scope=a.by_scope, counting_since_ms=a.counting_since_ms,
    )


def activity(msg: pb.GetActivityResponse) -> Activity:
    """GetActivity's received answer."""
    return Activity(
        buckets=[ActivityBucket(b.start_ms, dict(b.writes), b.searches) for b in msg.buckets],
        head_seq=msg.head_seq, live_memories=msg.live_memories, archived_memories=msg.archived_memories,
        by_layer=dict(msg.by_layer), by_scope=dict(msg.by_scope), counting_since_ms=msg.counting_since_ms,
    )


def chain_proto(check: ChainCheck) -> pb.VerifyChainResponse:
    """The wire form of a chain walk."""
    r = check.report
    return pb.VerifyChainResponse(ok=r.ok, entries=r.entries, head_seq=r.head_seq, head_hash=r.head_hash,
                                  first_bad_seq=r.first_bad_seq or 0, problem=r.problem, signed=r.signed,
                                  redacted=r.redacted, checked_at_ms=check.checked_at_ms)


def chain(msg: pb.VerifyChainResponse) -> ChainCheck:
    """A received chain walk."""
    problems: tuple[tuple[int, str], ...] = () if msg.ok else ((msg.first_bad_seq, msg.problem),)
    report = ChainReport(msg.entries, msg.head_seq, msg.head_hash, problems, len(problems), msg.signed, msg.redacted)
    return ChainCheck(report, msg.checked_at_ms)
