"""Consolidation (issue 16): the sleep cycle's decisions written into the changelog by the server's system agent.

`mnemosync.kernel.consolidation_rules` has the rules and the mapping onto seed 002's
four phases; this module reads the state they need, in one transaction, and
writes the decisions with the decay sweep's `mnemosync.server.sweep.record`, so
they replicate like any entry and each is undone by an ordinary operation
(an unlink removes a link, a restore brings a merged memory back, a set_layer
moves a promoted one).

What it reads, and why it stays cheap at scale: REPLAY and COMPRESS look only
at the memories created in the last `replay_hours`, against their scopes'
live memories (one read of each scope's vectors, one matrix product per 64
new memories: exact, like `vectors.knn`). COMPRESS repeats that read in
rounds until a round merges nothing: absorbing a group's second member can
leave two others near each other but not the survivor, and a second run for
the same time must find nothing left to do. PRUNE reads the associative links the system made
(one join with the changelog for each link's time) and the access
statistics of their ends; promotion reads the live ephemeral memories.

A merge is undone by restoring the absorbed memory. The survivor's
`supersedes` link to it stays as the record; a live memory that a
`supersedes` link points at is never merged again (unlink that link to let
consolidation merge it again).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from mnemosync.kernel import consolidation_rules as rules
from mnemosync.kernel import lifecycle, links, vectors
from mnemosync.kernel.consolidation_rules import ConsolidationReport, ConsolidationSettings
from mnemosync.kernel.lifecycle import NO_USE, Decision, LayerRule, LifecycleSettings
from mnemosync.kernel.memory import MEMORY_COLUMNS, MemoryRow, row_to_memory
from mnemosync.server import changelog
from mnemosync.server.sweep import record

HOUR_MS = 3_600_000
CHUNK = 500


def _memories(conn, where: str, params) -> list[MemoryRow]:
    return [row_to_memory(r) for r in conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {where}", params)]


def _by_nums(conn, nums) -> dict[int, MemoryRow]:
    found = {}
    nums = sorted(set(nums))
    for start in range(0, len(nums), CHUNK):
        chunk = nums[start:start + CHUNK]
        for m in _memories(conn, f"num IN ({', '.join('?' for _ in chunk)})", chunk):
            found[m.num] = m
    return found


def _in(conn, sql: str, ids, *params) -> list[tuple]:
    """Runs `sql` (holding one `{ids}` placeholder for an IN list) over `ids` in chunks."""
    ids = sorted(set(ids))
    rows = []
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start:start + CHUNK]
        rows += conn.execute(sql.format(ids=", ".join("?" for _ in chunk)), (*chunk, *params)).fetchall()
    return rows


def plan(conn, now_ms: int, usage_of, s: ConsolidationSettings, life: LifecycleSettings,
         layers: Mapping[int, LayerRule], report: ConsolidationReport) -> list[Decision]:
    """Everything a consolidation at `now_ms` decides, in the order it is written (merges, links, prunes,
    promotions); counts go into `report`."""
    new = _memories(conn, "archived = 0 AND created_at_ms > ? AND created_at_ms <= ? ORDER BY created_at_ms, id",
                    (now_ms - int(s.replay_hours * HOUR_MS), now_ms))
    report.examined = len(new)
    absorbed: set[str] = set()
    skip: set[int] = set()
    decisions: list[Decision] = []
    while True:  # COMPRESS again until nothing merges: two members can stay near each other but not the survivor
        near, vecs = _neighbours(conn, [m for m in new if m.num not in skip], 2 * s.max_links + 1,
                                 s.link_threshold, skip)
        rows = _by_nums(conn, {m.num for m in new} | {n for hits in near.values() for n, _ in hits})
        ids = {num: m.id for num, m in rows.items()}
        if report.links_only:
            break
        merged = _merges(conn, near, vecs, rows, now_ms, usage_of, s, life, layers, report)
        if not merged:
            break
        decisions += merged
        absorbed |= {d.memory_id for d in merged if d.op == "archive"}
        skip |= {num for num, memory_id in ids.items() if memory_id in absorbed}

    by_id = {m.id: m for m in rows.values()}
    involved = set(by_id)
    linked = {frozenset(p) for p in _in(conn, "SELECT memory_id, target_id FROM links WHERE memory_id IN ({ids})",
                                        involved)}
    removed = {frozenset((memory_id, p["target_id"]))
               for memory_id, payload in _in(conn, "SELECT memory_id, payload FROM changelog "
                                                   "WHERE memory_id IN ({ids}) AND op = 'unlink'", involved)
               if links.edge_type((p := json.loads(payload)).get("relation", "")) == rules.SEMANTIC}
    for m in new:
        if m.id in absorbed:
            continue
        for num, sim in near.get(m.num, [])[:s.max_links]:
            other = ids[num]
            pair = frozenset((m.id, other))
            if pair in linked or pair in removed:
                continue
            source, target = (m, by_id[other]) if m.layer != 1 else (by_id[other], m)
            if source.layer == 1:  # layer-1-human-only: the links of a constitutional memory are a human's
                continue
            linked.add(pair)
            why = f"cosine {sim:.3f} > {s.link_threshold} (consolidation, replay)"
            decisions.append(Decision(source.id, "link", rules.link_payload(target.id, rules.SEMANTIC, sim, why),
                                      f"{source.id} -> {target.id}: {why}", base_version=source.version))
            report.linked += 1

    decisions += _prunes(conn, now_ms, usage_of, s, report)
    if not report.links_only:
        decisions += _promotions(conn, usage_of, s, absorbed, report)
    return decisions


def _merges(conn, near: dict[int, list[tuple[int, float]]], vecs: dict[int, np.ndarray],
            rows: dict[int, MemoryRow], now_ms: int, usage_of, s: ConsolidationSettings, life: LifecycleSettings,
            layers: Mapping[int, LayerRule], report: ConsolidationReport) -> list[Decision]:
    """One round of COMPRESS over the near-duplicate groups of `near`: a `supersedes` link and an archive per
    memory absorbed."""
    by_id = {m.id: m for m in rows.values()}
    ids = {num: m.id for num, m in rows.items()}
    vetoed = {t for (t,) in _in(conn, "SELECT l.target_id FROM links l JOIN memories m ON m.id = l.target_id "
                                      "WHERE l.target_id IN ({ids}) AND l.relation = ? AND m.archived = 0",
                                set(by_id), rules.SUPERSEDES)}
    pairs = [(ids[a], ids[b]) for a, hits in near.items() for b, sim in hits
             if sim > s.merge_threshold and ids[a] not in vetoed and ids[b] not in vetoed]
    decisions: list[Decision] = []
    for group in rules.groups(pairs):
        def similarity(a: str, b: str) -> float:
            return float(vecs[by_id[a].num] @ vecs[by_id[b].num])

        usage = usage_of(conn, group)
        members = [rules.of_memory(by_id[i], lifecycle.level(by_id[i], usage.get(i, NO_USE), now_ms, life))
                   for i in group]
        for merge in rules.merges(members, similarity, s.merge_threshold):
            survivor, gone = by_id[merge.survivor], by_id[merge.absorbed]
            why = (f"merged into {survivor.id}: cosine {merge.similarity:.3f} > {s.merge_threshold} "
                   "(consolidation, compress)")
            decisions.append(Decision(survivor.id, "link", rules.link_payload(gone.id, rules.SUPERSEDES, 1.0, why),
                                      f"{survivor.id} supersedes {gone.id}: cosine {merge.similarity:.3f}",
                                      base_version=survivor.version))
            st = lifecycle.strength(gone, usage.get(gone.id, NO_USE), now_ms, life, layers)
            decisions.append(Decision(gone.id, "archive", {
                "as_of_ms": now_ms, "strength": round(st.retention, 4),
                "effective_importance": round(gone.importance * st.retention, 4), "reason": why},
                why, base_version=gone.version))
            report.merged += 1
    return decisions


def _neighbours(conn, new: list[MemoryRow], k: int, threshold: float, skip: set[int]
                ) -> tuple[dict[int, list[tuple[int, float]]], dict[int, np.ndarray]]:
    """For each new memory, its k nearest live memories of its scope above `threshold` as (num, cosine rounded to
    4 places), nearest first, ties by the smaller row number (as `vectors.knn` orders them); and the unit vector of
    every live memory of those scopes. One read of the scope's vectors and one matrix product per block of new
    memories (a k-NN query each would scan the scope once per memory). Rows in `skip` (absorbed by this run's
    merges) count as archived."""
    near: dict[int, list[tuple[int, float]]] = {}
    vecs: dict[int, np.ndarray] = {}
    if not new or vectors.dimensions(conn) is None:
        return near, vecs
    for scope in sorted({m.scope for m in new}):
        rows = [r for r in conn.execute(f"SELECT m.num, v.embedding FROM memories m JOIN {vectors.TABLE} v "
                                        "ON v.rowid = m.num WHERE m.archived = 0 AND m.scope = ? ORDER BY m.num",
                                        (scope,)) if r[0] not in skip]
        if not rows:
            continue
        nums = np.array([r[0] for r in rows])
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), -1)
        matrix = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        vecs.update(zip(nums.tolist(), matrix, strict=True))
        at = {num: i for i, num in enumerate(nums.tolist())}
        queries = [m.num for m in new if m.scope == scope and m.num in at]
        for start in range(0, len(queries), 64):
            block = queries[start:start + 64]
            sims = matrix[[at[q] for q in block]] @ matrix.T
            for q, row in zip(block, sims, strict=True):
                row[at[q]] = -2.0
                above = np.flatnonzero(row > threshold)
                order = np.lexsort((nums[above], -row[above]))[:k]
                near[q] = [(int(nums[above[i]]), round(float(row[above[i]]), 4)) for i in order]
    return near, vecs


def _prunes(conn, now_ms: int, usage_of, s: ConsolidationSettings, report: ConsolidationReport) -> list[Decision]:
    edges = [e for e in conn.execute(
        "SELECT l.memory_id, l.target_id, l.relation, c.server_time_ms, l.weight FROM links l "
        "JOIN changelog c ON c.seq = l.seq WHERE l.authority >= ? ORDER BY l.memory_id, l.target_id, l.relation",
        (rules.PRUNABLE_AUTHORITY,)) if links.decays(e[2])]
    usage = usage_of(conn, {e[0] for e in edges} | {e[1] for e in edges})
    versions = dict(_in(conn, "SELECT id, version FROM memories WHERE id IN ({ids})", {e[0] for e in edges}))
    found = []
    for source, target, relation, made_ms, weight in edges:
        last = max(made_ms, usage.get(source, NO_USE).last_used_ms, usage.get(target, NO_USE).last_used_ms)
        why = rules.prune_reason(relation, weight, last, now_ms, s)
        if why:
            found.append(Decision(source, "unlink", {"target_id": target, "relation": relation},
                                  f"{source} -> {target}: {why}", base_version=versions.get(source, 0)))
            report.pruned += 1
    return found


def _promotions(conn, usage_of, s: ConsolidationSettings, absorbed: set[str],
                report: ConsolidationReport) -> list[Decision]:
    episodes = [m for m in _memories(conn, "layer = 4 AND archived = 0 ORDER BY num", ()) if m.id not in absorbed]
    usage = usage_of(conn, [m.id for m in episodes])
    found = []
    for m in episodes:
        u = usage.get(m.id, NO_USE)
        why = rules.promotion_reason(m, u.uses, u.use_days, s)
        if why:
            found.append(Decision(m.id, "set_layer", {"layer": 3}, why, base_version=m.version))
            report.promoted += 1
    return found


def run(conn, report: ConsolidationReport, entry_time_ms: int, usage_of, s: ConsolidationSettings,
        life: LifecycleSettings, layers: Mapping[int, LayerRule]) -> ConsolidationReport:
    """Plans a consolidation for `report.as_of_ms` and, unless it is a dry run, writes it (caller holds the write
    transaction for a real run)."""
    for decision in plan(conn, report.as_of_ms, usage_of, s, life, layers, report):
        record(conn, report, decision, entry_time_ms)
    report.head_seq = changelog.head(conn)[0]
    return report

