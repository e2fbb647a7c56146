"""The lifecycle sweep: decay and archive written into the changelog by the server's own system agent.

Every replica must converge on the same lifecycle state, so the sweep does
not change projections behind the changelog's back: it writes entries, as
`SYSTEM_AGENT` at `SYSTEM_AUTHORITY`, that every cache folds like any other.

For each memory not archived, at the sweep's time `now` (`lifecycle` has the
formulas):

* a **decay** entry when what the changelog last recorded about its use
  (uses, last use, stability, distinct days, level, HaluMem staleness)
  differs from what the access statistics and the clock say now. Retention
  itself is not recorded on every sweep (every replica computes it from these
  inputs and the time), so a memory nobody used writes nothing until it turns
  stale or is archived;
* an **archive** entry when `lifecycle.archive_verdict` says so (importance x
  strength below its layer's threshold, older than the layer's minimum age;
  never protected memories, protected tags, layers that are not archivable or
  levels 3-4). It archives the memory at a new version, like a forget, and
  says why; `recall` (restore) brings it back.

A second sweep for the same `now` writes nothing: every decay entry made the
recorded state equal to the computed one, and archived memories are skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace

from mnemosync.kernel import lifecycle, lifecycle_state, projections, signing
from mnemosync.kernel.entry import SYSTEM_AGENT, SYSTEM_AUTHORITY, Entry
from mnemosync.kernel.lifecycle import NO_USE, Decision, LayerRule, LifecycleSettings, SweepReport, Usage
from mnemosync.kernel.memory import MEMORY_COLUMNS, row_to_memory
from mnemosync.kernel.operations import ValidOp
from mnemosync.server import changelog, merkle_log

PAGE = 1000


def _rounded(usage: Usage, stale: bool) -> tuple:
    stability = 0.0 if usage.stability_days == float("inf") else round(usage.stability_days, 4)
    return usage.uses, usage.last_used_ms, stability, usage.use_days, usage.level, stale


def page(conn, now_ms: int, usage_of, settings: LifecycleSettings, layers: Mapping[int, LayerRule],
         after_num: int) -> tuple[list[Decision], int, int]:
    """The entries a sweep at `now_ms` writes for the next PAGE live memories after row `after_num`.

    Args:
        usage_of: (conn, memory ids) -> their current usage (the access statistics,
        `mnemosync.server.usage_stats.usage_for`).

    Returns:
        (decisions in row order, the last row number looked at, memories examined: 0 once past the last).
    """
    rows = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE num > ? AND archived = 0 "
                        "ORDER BY num LIMIT ?", (after_num, PAGE)).fetchall()
    if not rows:
        return [], after_num, 0
    memories = [row_to_memory(r) for r in rows]
    ids = [m.id for m in memories]
    current = usage_of(conn, ids)
    recorded = lifecycle_state.recorded(conn, ids)
    decisions = []
    for m in memories:
        usage = current.get(m.id, NO_USE)
        usage = replace(usage, level=lifecycle.level(m, usage, now_ms, settings))
        stale = lifecycle.is_stale(m, now_ms, settings)
        st = lifecycle.strength(m, usage, now_ms, settings, layers)
        was, was_stale = recorded.get(m.id, (NO_USE, False))
        target = _rounded(replace(usage, stability_days=st.stability_days if usage.uses else 0.0), stale)
        if target != _rounded(was, was_stale):
            payload = dict(zip(lifecycle_state.DECAY_FIELDS, (
                now_ms, round(st.retention, 4), target[2], usage.level, usage.uses, usage.use_days,
                usage.last_used_ms, stale), strict=True))
            reason = (f"uses {usage.uses}, level {usage.level}, stability {target[2]} days, strength "
                      f"{st.retention:.3f}" + (", stale (HaluMem: confidence x 0.7)" if stale else ""))
            decisions.append(Decision(m.id, "decay", payload, reason))
        verdict = lifecycle.archive_verdict(m, usage, now_ms, settings, layers)
        if verdict.archive:
            payload = {"as_of_ms": now_ms, "strength": round(verdict.retention, 4),
                       "effective_importance": round(verdict.effective_importance, 4), "reason": verdict.reason}
            decisions.append(Decision(m.id, "archive", payload, verdict.reason, base_version=m.version))
    return decisions, rows[-1][0], len(rows)


def run(conn, report: SweepReport, entry_time_ms: int, usage_of, settings: LifecycleSettings,
        layers: Mapping[int, LayerRule], *, pages: int | None = None) -> SweepReport:
    """Carries `report`'s sweep on by up to `pages` pages (None: to the end), writing its entries unless it is a dry
    run (caller holds the write transaction); `report.done` says whether it reached the end.

    Args:
        entry_time_ms: The server time to stamp the entries with (never before the head's).
    """
    while pages is None or pages > 0:
        pages = None if pages is None else pages - 1
        decisions, report.after_num, examined = page(conn, report.as_of_ms, usage_of, settings, layers,
                                                     report.after_num)
        if not examined:
            report.done = True
            break
        report.examined += examined
        for decision in decisions:
            if decision.op == "decay":
                report.decayed += 1
            else:
                report.archived += 1
            record(conn, report, decision, entry_time_ms)
    report.head_seq = changelog.head(conn)[0]
    return report


def record(conn, report, decision: Decision, entry_time_ms: int) -> None:
    """Lists `decision` in `report` (the first MAX_LISTED) and, unless the report is a dry run, writes it.

    `report` is a sweep's or a consolidation's: both carry `decisions`, `dry_run` and `entries_written`.
    """
    if len(report.decisions) < lifecycle.MAX_LISTED:
        report.decisions.append(decision)
    if not report.dry_run:
        write_entry(conn, decision, entry_time_ms)
        report.entries_written += 1


def write_entry(conn, d: Decision, now_ms: int) -> Entry:
    """Appends one system entry and folds it (caller holds the write transaction).

    An archive or set_layer makes the memory's next version; any other entry records `d.base_version` (0 for
    decay, the memory's version for a link or unlink, as an agent's link does)."""
    seq, prev_hash = changelog.head(conn)
    last_time = conn.execute("SELECT server_time_ms FROM changelog WHERE seq = ?", (seq,)).fetchone()
    version = d.base_version + 1 if d.op in ("archive", "set_layer") else d.base_version
    op = ValidOp(str(uuid.uuid4()), d.memory_id, d.op, d.base_version, d.payload, None)
    seal = signing.seal(SYSTEM_AGENT, "", op)
    entry = Entry(
        seq=seq + 1, op_id=op.op_id, agent_id=SYSTEM_AGENT, memory_id=d.memory_id, op=d.op,
        base_version=d.base_version, version=version, payload=d.payload, embedding=None, embedding_model="",
        server_time_ms=max(now_ms, last_time[0] if last_time else 0), prev_hash=prev_hash,
        authority=SYSTEM_AUTHORITY, payload_commit=seal.payload_commit, payload_salt=seal.payload_salt,
        embedding_sha256=seal.embedding_sha256,
    )
    entry = replace(entry, hash=entry.computed_hash())
    changelog.insert(conn, entry, "")
    merkle_log.append_leaf(conn, entry.seq, entry.hash)
    projections.apply(conn, entry)
    return entry
