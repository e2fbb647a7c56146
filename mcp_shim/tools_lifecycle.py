"""The memory lifecycle's tools (issues 15 and 16): recall, mark_used, decay_sweep and consolidate (admin).

Memories fade when nobody uses them and the server's sweep archives those
that faded below their layer's threshold (see `mnemosync.kernel.lifecycle`). These
tools are how a session takes part: `mark_used` tells the server which search
results it acted on (they rank higher next time and fade more slowly),
`recall` brings a memory back (restores it if archived; a faded memory gains
more stability than a fresh one), and `decay_sweep` runs the sweep now.
"""

from typing import Annotated

from pydantic import BaseModel, Field

from mnemosync.shim.params import MemoryId
from mnemosync.shim.results import Envelope, GetOut, memory_out
from mnemosync.shim.session import Session
from mnemosync.shim.tool_registry import ToolAnnotations, ToolResult

RECALL = """Bring a memory back and strengthen it: if it was archived (forgotten, or archived by the decay \
sweep because nobody used it) it is restored, and the recall is recorded, so the memory fades more slowly from \
now on (the more it had faded, the more it gains). Use it when an archived memory found with \
include_archived, or through a link, turns out to matter again. Returns the memory as it is now."""

USED = """Tell shared memory which memories you actually used (for example the search results your answer \
relied on). Used memories rank higher in later searches and fade more slowly; memories nobody uses are \
archived in time. Call it once per answer with the ids you relied on, not for every result you saw."""

SWEEP = """Run the memory lifecycle's decay sweep now (admin only; the server also runs it on its own \
schedule): records each memory's strength where its use changed, and archives memories whose importance times \
strength fell below their layer's threshold past the layer's minimum age (never constitutional or legislative \
ones, protected ones or ones tagged decision, correction, identity and the like). dry_run=true only reports \
what it would archive and why."""


class Decision(BaseModel):
    """One entry the sweep or consolidation wrote (or would write)."""

    memory_id: str
    op: str = Field(description="archive, decay (a record of the memory's strength), link, unlink or set_layer.")
    reason: str


CONSOLIDATE = """Run consolidation now (admin only; the server also runs it on its own schedule), seed 002's \
sleep cycle without an LLM: links each memory of the last 24 hours to its nearest neighbours (cosine > 0.5, \
relation semantic), merges near-duplicates (> 0.85: the survivor is the strongest author's, the others are \
archived and linked with supersedes; restore undoes it; legislative, constitutional and protected memories are \
never merged away), removes faded semantic links the system made, and promotes ephemeral memories used often. \
links_only=true does only the link work; dry_run=true only reports what it would do and why."""


class SweepOut(Envelope):
    """What a decay sweep did (or would do)."""

    dry_run: bool
    examined: int = Field(description="Live memories looked at.")
    archived: int
    decayed: int = Field(description="Strength records written (or that would be).")
    entries_written: int
    archives: list[Decision] = Field(description="The memories archived (or to be), with why; at most 50.")


class ConsolidateOut(Envelope):
    """What a consolidation did (or would do)."""

    dry_run: bool
    examined: int = Field(description="Memories created in the last 24 hours that were looked at.")
    linked: int
    merged: int = Field(description="Near-duplicates absorbed into a survivor (archived, superseded).")
    pruned: int = Field(description="Faded associative links removed.")
    promoted: int = Field(description="Ephemeral memories moved to the factual layer.")
    entries_written: int
    decisions: list[Decision] = Field(description="What it wrote (or would), with why; at most 50.")


VERIFY = """Check the memories that cite sources (files, line ranges, symbols) against the project's working \
tree: verified (the cited code is unchanged), stale (it changed: the memory may be out of date), contradicted \
(the cited file or symbol is gone) or unverified (nothing to check). Each changed status is recorded for every \
agent, and search ranks stale memories lower (confidence x0.7) and contradicted ones much lower (x0.3). Run it \
after changing code that memories describe; then update or forget what is stale."""


class Verified(BaseModel):
    """One memory's verification."""

    memory_id: str
    status: str = Field(description="verified, stale, contradicted or unverified; elsewhere: it cites commits "
                                    "this tree's repository does not have, so it was not checked.")
    paths: list[str] | None = Field(None, description="The cited paths that changed or are gone.")
    recorded: bool = Field(description="True when the status changed and was written to the changelog.")


class VerifyOut(Envelope):
    """The verification of every sourced memory in the scopes."""

    memories: list[Verified]


class UsedOut(Envelope):
    """How many uses the server counted."""

    counted: int


def register(mcp, session: Session) -> None:
    """Adds the lifecycle tools to `mcp`, bound to `session`."""
    client = session.client

    @mcp.tool(name="recall", title="Recall a memory", description=RECALL,
              annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                          open_world_hint=False))
    def recall(id: MemoryId) -> Annotated[ToolResult, GetOut]:
        return session.run(lambda: GetOut(memory=memory_out(client.recall(session.resolve(id)), content_limit=None)))

    @mcp.tool(name="mark_used", title="Report memories used", description=USED,
              annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                          open_world_hint=False))
    def mark_used(ids: Annotated[list[MemoryId], Field(min_length=1, max_length=100,
                                                       description="Ids of the memories used.")]
                  ) -> Annotated[ToolResult, UsedOut]:
        return session.run(lambda: UsedOut(counted=client.record_use([session.resolve(i) for i in ids])))

    @mcp.tool(name="verify_memories", title="Verify memories against the code", description=VERIFY,
              annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                          open_world_hint=False))
    def verify_memories(scope: Annotated[str | None, Field(description="Only this scope (default: the "
                                                                       "session's project scope).")] = None
                        ) -> Annotated[ToolResult, VerifyOut]:
        def produce():  # against the session's own project only: a model never names the tree to read
            found = client.verify_memories(scopes=[scope or session.scope], root=session.project_dir)
            return VerifyOut(memories=[Verified(memory_id=o.memory_id, status=o.status, paths=list(o.paths) or None,
                                                recorded=o.written) for o in found])

        return session.run(produce)

    @mcp.tool(name="decay_sweep", title="Run the decay sweep (admin)", description=SWEEP,
              annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                          open_world_hint=False))
    def decay_sweep(dry_run: Annotated[bool, Field(description="Only report what it would do.")] = False
                    ) -> Annotated[ToolResult, SweepOut]:
        def produce():
            r = client.decay_sweep(dry_run=dry_run)
            archives = [Decision(memory_id=d.memory_id, op=d.op, reason=d.reason)
                        for d in r.decisions if d.op == "archive"][:50]
            return SweepOut(dry_run=r.dry_run, examined=r.examined, archived=r.archived, decayed=r.decayed,
                            entries_written=r.entries_written, archives=archives)

        return session.run(produce)

    @mcp.tool(name="consolidate", title="Run consolidation (admin)", description=CONSOLIDATE,
              annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                          open_world_hint=False))
    def consolidate(dry_run: Annotated[bool, Field(description="Only report what it would do.")] = False,
                    links_only: Annotated[bool, Field(description="Only the link work: no merges, no "
                                                                  "promotions.")] = False
                    ) -> Annotated[ToolResult, ConsolidateOut]:
        def produce():
            r = client.consolidate(dry_run=dry_run, links_only=links_only)
            return ConsolidateOut(dry_run=r.dry_run, examined=r.examined, linked=r.linked, merged=r.merged,
                                  pruned=r.pruned, promoted=r.promoted, entries_written=r.entries_written,
                                  decisions=[Decision(memory_id=d.memory_id, op=d.op, reason=d.reason)
                                             for d in r.decisions[:50]])

        return session.run(produce)
