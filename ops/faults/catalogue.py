"""The fault catalogue: realistic bugs, each a small patch (anchor text and its replacement) to the code.

Each fault is a mistake someone could plausibly make in that code (an
off-by-one in an authority comparison, a comparison the wrong way round, an
entry skipped at a page boundary, an offset committed outside the
transaction, visibility by arrival order, a field the fold forgets, a
duplicate apply, an outbox entry lost on retry, a tie-break reversed, ...),
chosen across the areas of replication rather than to fit any one test.
`python -m ops.faults` applies each to a scratch copy of the tree and runs the
consistency suite against it; a fault the suite does not catch is a
survivor, and either the suite gets better or the fault says here, in
`survives`, why it cannot be caught there.

An anchor must occur exactly once in its file. When the code changes and an
anchor no longer matches, `apply` raises `FaultDoesNotApply` naming the fault,
the file and the anchor's first line, so a stale fault is reported as stale,
never counted as killed; `tests/unit/test_faults.py` checks every fault still
applies to the current tree.

The lifecycle code (decay, automatic archiving, merges) has not landed yet; its
faults join the catalogue with it.
"""

from __future__ import annotations

import ast
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

AREAS = ("admission", "governance", "changelog", "sync", "subscribe", "cache", "outbox", "conflicts", "redaction",
         "search", "transparency", "signatures", "lifecycle")


@dataclass(frozen=True)
class Edit:
    """Replace `anchor`, which must occur exactly once in `path` (relative to the repository root)."""

    path: str
    anchor: str
    replacement: str


@dataclass(frozen=True)
class Fault:
    """One injected bug.

    Attributes:
        name: Short unique id (kebab-case).
        area: One of AREAS.
        bug: The mistake, in words.
        edits: The patch.
        survives: Why the consistency suite cannot catch it, for a known survivor ("" otherwise).
    """

    name: str
    area: str
    bug: str
    edits: tuple[Edit, ...]
    survives: str = ""


class FaultDoesNotApply(Exception):
    """A fault's anchor is missing from, or not unique in, the current tree: the fault needs refreshing."""


def apply(fault: Fault, root: Path) -> list[Path]:
    """Patches the tree at `root` with `fault`; returns the files changed.

    Every edit is checked before any file is written, so a fault that does not
    apply leaves the tree untouched.

    Raises:
        FaultDoesNotApply: an anchor occurs zero or several times (the message names fault, file and anchor).
    """
    texts: dict[Path, str] = {}
    for edit in fault.edits:
        path = root / edit.path
        if path not in texts:
            if not path.is_file():
                raise FaultDoesNotApply(f"fault {fault.name}: {edit.path} does not exist any more")
            texts[path] = path.read_text(encoding="utf-8")
        count = texts[path].count(edit.anchor)
        if count != 1:
            first = edit.anchor.strip().splitlines()[0]
            where = "is not in" if count == 0 else f"occurs {count} times in"
            raise FaultDoesNotApply(
                f"fault {fault.name}: the anchor {first!r} {where} {edit.path}; the code changed, so refresh the "
                "fault's anchor in ops/faults/catalogue.py")
        texts[path] = texts[path].replace(edit.anchor, edit.replacement)
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    return list(texts)


def check(fault: Fault, root: Path) -> None:
    """Applies `fault` to a throwaway copy of the files it edits under `root`; each must still parse.

    Raises:
        FaultDoesNotApply: an anchor is missing or not unique, or the patched file is no longer Python.
    """
    with tempfile.TemporaryDirectory() as tmp:
        for edit in fault.edits:
            if (root / edit.path).is_file():
                (Path(tmp) / edit.path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(root / edit.path, Path(tmp) / edit.path)
        for path in apply(fault, Path(tmp)):
            try:
                ast.parse(path.read_text(encoding="utf-8"))
            except SyntaxError as exc:
                raise FaultDoesNotApply(f"fault {fault.name}: {path.relative_to(tmp)} no longer parses once "
                                        f"patched ({exc.msg}, line {exc.lineno})") from None


def _fault(name: str, area: str, bug: str, path: str, anchor: str, replacement: str, survives: str = "") -> Fault:
    return Fault(name, area, bug, (Edit(path, anchor, replacement),), survives)


CATALOGUE: tuple[Fault, ...] = (
    # -- admission and governance ------------------------------------------------------------------
    _fault("authority-off-by-one", "governance",
           "an agent one step weaker than a memory's writer may overwrite it (> writer + 1)",
           "server/governance.py",
           "    if caller.authority > writer:\n",
           "    if caller.authority > writer + 1:\n"),
    _fault("human-check-off-by-one", "governance",
           "authority 2 passes the human-only checks (layer 1, protected, layers 1-2)",
           "server/governance.py",
           "    if caller.authority != HUMAN_AUTHORITY:\n",
           "    if caller.authority > HUMAN_AUTHORITY + 1:\n"),
    _fault("stale-write-judged-on-current-writer", "governance",
           "a stale write is judged against the memory's current writer, not the version its writer saw",
           "server/governance.py",
           'writer = effective(base_state["authority"])',
           "writer = effective(memory.authority)"),
    _fault("protected-only-as-seen", "governance",
           "a memory protected after the writer's base version can be forgotten from that older version",
           "server/governance.py",
           'protected = bool(base_state["protected"] or memory.protected)',
           'protected = bool(base_state["protected"])'),
    _fault("legislative-forgettable", "governance",
           "agents may forget legislative (layer 2) memories: only layer 1 is checked",
           "server/governance.py",
           "        if memory.layer in (1, 2):\n            _require_human(caller, \"layers-1-2-not-forgotten\",\n"
           "                           f\"memory {memory.id} is {_layer_name(memory.layer)}; only a human",
           "        if memory.layer == 1:\n            _require_human(caller, \"layers-1-2-not-forgotten\",\n"
           "                           f\"memory {memory.id} is {_layer_name(memory.layer)}; only a human"),
    _fault("layer-2-moved-down", "governance",
           "moving a legislative memory to layer 3 is not seen as moving it down (> 3 instead of > 2)",
           "server/governance.py",
           'if op == "set_layer" and memory.layer in (1, 2) and payload["layer"] > 2:',
           'if op == "set_layer" and memory.layer in (1, 2) and payload["layer"] > 3:'),
    _fault("resolve-needs-weakest-authority", "governance",
           "resolving a conflict needs the authority of its weakest revision, not its strongest",
           "server/governance.py",
           "strongest = min(effective(a) for a in revision_authorities)",
           "strongest = max(effective(a) for a in revision_authorities)"),
    _fault("unlink-judged-by-memory", "governance",
           "unlink (or a new weight) is judged against the memory's writer instead of the link's author",
           "server/governance.py",
           'if link_authority is not None and caller.authority > effective(link_authority):',
           'if link_authority is not None and caller.authority > effective(source.authority):'),
    _fault("inference-target-unchecked", "governance",
           "only the source of a causal link is checked for trust 'inference'",
           "server/governance.py",
           'for end, memory in (("source", source), ("target", target)):',
           'for end, memory in (("source", source),):'),
    _fault("scope-prefix-pattern-broken", "governance",
           "a scope pattern ending in '*' is compared with the star still on it, so it never matches",
           "server/governance.py",
           'p == scope or (p.endswith("*") and scope.startswith(p[:-1]))',
           'p == scope or (p.endswith("*") and scope.startswith(p))'),
    _fault("search-ignores-grant", "search",
           "a search that names no scope covers every scope, whatever the caller is granted",
           "server/governance.py",
           "    if wanted or caller.scopes is None:\n        return wanted or None\n",
           "    if True:\n        return wanted or None\n"),
    _fault("semantic-threshold-exclusive", "admission",
           "a new memory exactly at the semantic threshold is not flagged (<= instead of <)",
           "server/admission.py",
           "    if similarity < rules.semantic_threshold:\n",
           "    if similarity <= rules.semantic_threshold:\n"),
    _fault("semantic-blocks-equal-authority", "governance",
           "a near duplicate of an equally strong author's memory is blocked instead of flagged",
           "server/governance.py",
           "    if owner < caller.authority:\n",
           "    if owner <= caller.authority:\n"),
    _fault("semantic-flags-own-memories", "admission",
           "an agent's own memories count as near duplicates of its new one",
           "server/admission.py",
           "    return vectors.Restrict(scopes=(scope,), exclude_authors=(caller.agent_id,))\n",
           "    return vectors.Restrict(scopes=(scope,), exclude_authors=())\n"),
    _fault("stale-repeat-not-rechecked", "admission",
           "a weaker agent's stale write that repeats the current state is not judged against its current writer "
           "(the bug the suite once found)",
           "server/admission.py",
           "        governance.check_change(caller, op.op, op.payload, memory, revisions.memory_state(memory))\n",
           ""),
    _fault("stale-update-of-forgotten-refused", "admission",
           "an update made from a live version of a memory forgotten since is refused instead of becoming a conflict",
           "server/admission.py",
           'if op.op == "update" and seen["archived"]:',
           'if op.op == "update" and memory.archived:'),
    _fault("stale-set-layer-admitted", "admission",
           "a set_layer from a stale version is admitted instead of refused with ABORTED",
           "server/admission.py",
           'if stale and op.op in ("restore", "set_layer"):',
           'if stale and op.op == "restore":'),
    # -- the changelog and its hash chain ---------------------------------------------------------------
    _fault("hash-omits-authority", "changelog",
           "the entry hash does not cover the writer's authority, so it can be changed unnoticed",
           "proto/mnemosync/kernel/entry.py",
           "        if self.authority:\n            doc[\"authority\"] = self.authority\n",
           ""),
    _fault("hash-omits-conflict-mark", "changelog",
           "the entry hash does not cover the conflict mark",
           "proto/mnemosync/kernel/entry.py",
           "        if self.conflict:\n            doc[\"conflict\"] = self.conflict\n",
           ""),
    _fault("commitments-checked-only-when-signed", "changelog",
           "a payload is checked against its commitment only when the entry is signed",
           "proto/mnemosync/kernel/entry.py",
           "        if not self.payload_commit or self.redacted_by:\n",
           "        if not self.payload_commit or self.redacted_by or not self.signature:\n"),
    _fault("read-includes-since", "changelog",
           "reading the changelog after a seq includes that seq (>= instead of >)",
           "server/changelog.py",
           'f"SELECT {_COLUMNS} FROM changelog WHERE seq > ? ORDER BY seq LIMIT ?"',
           'f"SELECT {_COLUMNS} FROM changelog WHERE seq >= ? ORDER BY seq LIMIT ?"'),
    _fault("op-id-replay-ignored", "changelog",
           "a resent op_id is not looked up, so a retry after a lost reply is appended again",
           "server/writes.py",
           "        written = changelog.find_ops(conn, caller.agent_id, [op.op_id for op, _, _ in ops])",
           "        written = {}"),
    _fault("ack-moves-back", "changelog",
           "a late acknowledgement moves an agent's recorded offset back",
           "server/sqlite_record.py",
           '"acked_at_ms = excluded.acked_at_ms WHERE excluded.acked_seq > acked_seq"',
           '"acked_at_ms = excluded.acked_at_ms"'),
    _fault("ack-past-head-accepted", "changelog",
           "an acknowledgement one past the head is accepted",
           "server/writes.py",
           "        if seq > head:\n",
           "        if seq > head + 1:\n"),
    # -- Sync and Subscribe --------------------------------------------------------------------------------
    _fault("sync-skips-page-boundary", "sync",
           "Sync continues after the last entry of a page plus one, skipping an entry at every page boundary",
           "server/service.py",
           "            since = last\n",
           "            since = last + 1\n"),
    _fault("subscribe-skips-page-boundary", "subscribe",
           "Subscribe skips an entry at every page boundary",
           "server/service.py",
           "                since = entries[-1].seq\n",
           "                since = entries[-1].seq + 1\n"),
    _fault("subscribe-starts-at-head", "subscribe",
           "Subscribe starts at the head, so entries committed between a catch-up and the subscription never arrive",
           "server/service.py",
           "        since = request.since_seq\n        if since < 0:",
           "        since = max(request.since_seq, self.store.head_seq())\n        if since < 0:"),
    _fault("other-scopes-not-withheld", "sync",
           "Sync sends entries of scopes the agent is not granted in full",
           "server/log_reads.py",
           "        if caller is None or caller.scopes is None or not entries:\n            return entries\n",
           "        if True:\n            return entries\n"),
    # -- the agent: cache, catch-up, outbox --------------------------------------------------------------
    _fault("cache-reapplies-last-entry", "cache",
           "the cache skips only entries before its offset, not the one at it (< instead of <=)",
           "agent_client/cache.py",
           "                if entry.seq <= offset:\n",
           "                if entry.seq < offset:\n"),
    Fault("cache-applies-outside-transaction", "cache",
          "entries are applied in autocommit mode; only the offset is written in a transaction",
          (Edit("agent_client/cache.py",
                '        conn.execute("BEGIN IMMEDIATE")\n        try:\n            offset, last_hash =',
                "        try:\n            offset, last_hash ="),
           Edit("agent_client/cache.py",
                "            conn.execute(\"UPDATE cache_state SET value = ? WHERE key = 'offset'\", (offset,))\n",
                "            conn.execute(\"BEGIN IMMEDIATE\")\n"
                "            conn.execute(\"UPDATE cache_state SET value = ? WHERE key = 'offset'\", (offset,))\n"))),
    _fault("ack-before-commit", "cache",
           "a catch-up acknowledges a batch before applying it",
           "agent_client/sync.py",
           "    applied = cache.apply(entries)\n    remote.ack(cache.offset)\n",
           "    remote.ack(entries[-1].seq)\n    applied = cache.apply(entries)\n"),
    _fault("fold-forgets-confidence", "cache",
           "the fold drops confidence from updates (a forgotten field)",
           "proto/mnemosync/kernel/revisions.py",
           "after.update({k: v for k, v in payload.items() if k in STATE_FIELDS and k not in _WHO})",
           'after.update({k: v for k, v in payload.items() if k in STATE_FIELDS and k not in _WHO '
           'and k != "confidence"})'),
    _fault("update-vector-not-indexed", "cache",
           "an update's new content keeps the old content's vector in the index",
           "proto/mnemosync/kernel/projections.py",
           '    embedding = e.embedding if "content" in e.payload else None\n',
           "    embedding = None\n"),
    _fault("archived-flag-not-in-vector-index", "search",
           "forgetting a memory leaves it live in the vector index",
           "proto/mnemosync/kernel/projections.py",
           '    if bool(state["archived"]) != m.archived:\n'
           '        vectors.set_attribute(conn, m.num, "archived", int(state["archived"]))\n',
           ""),
    _fault("tag-index-not-refreshed", "search",
           "a change of tags alone does not refresh the tag and keyword indexes",
           "proto/mnemosync/kernel/projections.py",
           '    if state["content"] != m.content or list(state["tags"]) != list(m.tags):\n',
           '    if state["content"] != m.content:\n'),
    _fault("outbox-marked-sent-before-sending", "outbox",
           "a queued write is removed from the outbox before it is sent, so a failed send loses it",
           "agent_client/write_path.py",
           "            for batch in _batches(self.outbox.pending(), self.limits):\n",
           "            for batch in _batches(self.outbox.pending(), self.limits):\n"
           "                self.outbox.mark_sent(*(item.position for item in batch))\n"),
    _fault("outbox-parks-a-lost-connection", "outbox",
           "a send that fails because the server went away parks the write as refused for good",
           "agent_client/write_path.py",
           "                except MnemosyncError as exc:\n                    if exc.code not in FINAL_REFUSALS:\n",
           "                except CodedError as exc:\n"
           "                    if exc.code not in FINAL_REFUSALS | {\"UNAVAILABLE\"}:\n"),
    _fault("outbox-grouped-by-memory", "outbox",
           "queued writes are sent grouped by memory rather than in the order they were made",
           "agent_client/outbox.py",
           "\"created_at_ms, state, error, attempts, salt, signature FROM outbox WHERE state = 'pending' \"\n"
           '            "ORDER BY position"',
           "\"created_at_ms, state, error, attempts, salt, signature FROM outbox WHERE state = 'pending' \"\n"
           '            "ORDER BY memory_id, position"'),
    _fault("outbox-new-op-id-when-queued", "outbox",
           "a write queued after a failed send gets a new op_id, so a retry after a lost reply is a second write",
           "agent_client/write_path.py",
           "        self.outbox.enqueue(valid, model, self.agent_id, base,",
           "        self.outbox.enqueue(self.validated(kind, memory_id, base_version, fields, embedding), model,\n"
           "                            self.agent_id, base,"),
    # -- conflicts ------------------------------------------------------------------------------------
    _fault("visible-by-arrival-order", "conflicts",
           "a write conflict shows the latest write instead of the strongest authority's",
           "proto/mnemosync/kernel/conflict_projection.py",
           "    return min(revisions, key=lambda r: r.precedence)\n",
           "    return max(revisions, key=lambda r: r.seq)\n"),
    _fault("tie-break-reversed", "conflicts",
           "between revisions of equal authority the later write wins instead of the earlier",
           "proto/mnemosync/kernel/conflict_projection.py",
           "        return (self.authority or LEGACY_AUTHORITY, self.seq)\n",
           "        return (self.authority or LEGACY_AUTHORITY, -self.seq)\n"),
    _fault("revision-authority-kept-on-extend", "conflicts",
           "a stronger write on top of the visible revision does not make that revision stronger",
           "proto/mnemosync/kernel/conflict_projection.py",
           '"UPDATE conflict_revisions SET state = ?, version = ?, authority = min(authority, ?), "',
           '"UPDATE conflict_revisions SET state = ?, version = ?, authority = ?, "',
           survives="equivalent: only an ordinary write on top of the visible revision extends it, and governance "
                    "lets only an authority at least as strong as that revision's write there (the sweep's archive "
                    "keeps the visible authority), so min(old, new) is always the new one; it would differ only "
                    "for a weaker write on top, which no path admits"),
    _fault("first-revision-seq-wrong", "conflicts",
           "revision 1 of a new write conflict takes the memory's latest seq instead of the first after the base",
           "proto/mnemosync/kernel/revisions.py",
           "seq=version_seq(conn, m, e.base_version + 1)",
           "seq=m.version_seq"),
    _fault("keep-revision-zero-based", "conflicts",
           "keep_revision is used as a 0-based index (wrapped), so resolving keeps the next revision",
           "proto/mnemosync/kernel/revisions.py",
           "            kept = conflict.revisions[keep - 1]\n",
           "            kept = conflict.revisions[keep % len(conflict.revisions)]\n"),
    _fault("merge-leaves-conflict-open", "conflicts",
           "a conflict resolved with merged content is not closed",
           "proto/mnemosync/kernel/projections.py",
           "    conflict_projection.close(conn, conflict.id,",
           '    if "merged_content" not in p:\n        conflict_projection.close(conn, conflict.id,'),
    _fault("session-base-is-the-live-cache", "conflicts",
           "a write without a base version is made from the agent's cache (the old default) instead of the version "
           "its session or person was shown, so an update after another writer's is last-writer-wins (issue 36)",
           "agent_client/shown.py",
           '        return Base(seen.version, "shown", seen.via) if seen is not None else Base(None, "blind")\n',
           '        return Base(None, "blind")\n'),
    _fault("check-log-reads-a-moving-cache", "transparency",
           "the log check reads the cache's offset and its root apart, so an apply between them (the live stream "
           "reconnecting while a write's entries apply) makes a sound server look rewritten",
           "agent_client/transparency.py",
           "    offset, root, accepted = cache.position()",
           "    offset, accepted = cache.offset, cache.checkpoint\n    root = cache.root()",
           survives="a race of two threads inside one agent: the suite meets it only by chance (it did, once the "
                    "live stream retried every second); killed by tests/unit/test_transparency.py::"
                    "test_the_check_holds_while_another_thread_applies_entries"),
    # -- issue 33: faults an outside run injected that no test noticed, and the holes it found ----------
    _fault("causal-chain-ignores-scopes", "governance",
           "the causal chain walks without the caller's readable scopes (traverse kept them)",
           "proto/mnemosync/kernel/graph.py",
           '    walks = [traverse(conn, start, readable=readable, edge_types=("causal",)',
           '    walks = [traverse(conn, start, readable=None, edge_types=("causal",)'),
    _fault("links-into-hidden-scopes-shown", "governance",
           "an answer keeps links whose target is in a scope the caller may not read",
           "server/link_visibility.py",
           "            if scope is not None and scope_granted(caller, scope):",
           "            if scope is not None:"),
    _fault("prefilter-margin-rules-out-near", "search",
           "the near-duplicate pre-filter's floor sits above the threshold, ruling out an add truly near",
           "proto/mnemosync/kernel/vector_mirror.py",
           "        floor = min_similarity - SLACK - NEAR_MARGIN\n",
           "        floor = min_similarity + SLACK\n"),
    _fault("prefilter-bound-too-tight", "search",
           "the pre-filter's prefix bound has its margin the wrong way, ruling out rows at the threshold",
           "proto/mnemosync/kernel/vector_mirror.py",
           "        bound = _bound(min_similarity) + NEAR_MARGIN\n",
           "        bound = _bound(min_similarity) - NEAR_MARGIN\n"),
    _fault("promotion-counts-uses-as-days", "lifecycle",
           "every use counts as a new day of use, so several uses on one day promote an ephemeral memory",
           "proto/mnemosync/kernel/lifecycle.py",
           "        use_days=usage.use_days + (1 if new_day else 0), level=usage.level,",
           "        use_days=usage.use_days + 1, level=usage.level,"),
    _fault("use-counted-per-listing", "lifecycle",
           "RecordUse counts an id once per time it is listed, so one call can buy a memory's activation",
           "server/service.py",
           "        ids = list(dict.fromkeys(request.memory_ids))",
           "        ids = list(request.memory_ids)"),
    _fault("redaction-keeps-link-reasons", "redaction",
           "a redaction leaves the reasons of the memory's links in the projection and every cache",
           "proto/mnemosync/kernel/projections.py",
           "    conn.execute(\"UPDATE links SET reason = ? WHERE memory_id = ? AND reason != ''\", "
           "(REDACTED_TEXT, m.id))\n",
           ""),
    _fault("stream-outlives-revocation", "subscribe",
           "an open Subscribe stream is not checked again, so a revoked agent keeps receiving entries",
           "server/service.py",
           "found broken since (`broken`, DATA_LOSS).\"\"\"\n        self.identity(context)\n",
           "found broken since (`broken`, DATA_LOSS).\"\"\"\n"),
    _fault("sync-page-not-rechecked", "sync",
           "Sync checks its caller only when the stream opens, so a catch-up under way outlives a revocation",
           "server/service.py",
           "            self._still_valid(context)\n            yield page_out\n",
           "            yield page_out\n",
           survives="the consistency suite runs in development mode, with no certificates to revoke (killed by "
                    "tests/unit/test_ca.py::test_a_revocation_ends_an_open_sync_stream_before_its_next_page)"),
    _fault("operator-view-shows-hidden-link-targets", "governance",
           "the changelog view and a memory's history keep a link entry's target and reason into a hidden scope",
           "server/link_visibility.py",
           "    if _may_read(caller, scope_of, entry.payload.get(\"target_id\", \"\")):\n",
           "    if True:\n",
           survives="the consistency suite does not read the operator's view (killed by tests/system/"
                    "test_memory_graph.py::test_no_read_path_shows_a_memory_of_a_scope_the_caller_may_not_read_not_"
                    "even_as_a_links_target[ListChangelog])"),
    _fault("cache-shows-links-to-memories-it-lacks", "cache",
           "a cache's reads show its links into memories it never received (of scopes it may not read)",
           "proto/mnemosync/kernel/projections.py",
           "        \"AND EXISTS (SELECT 1 FROM memories t WHERE t.id = l.target_id) ORDER BY target_id, relation\",\n",
           "        \"ORDER BY target_id, relation\",\n",
           survives="the consistency suite's agents are granted every scope, so a cache holds every target (killed "
                    "by tests/system/test_memory_graph.py::test_no_read_of_the_agents_own_cache_shows_a_link_into_a_"
                    "scope_it_may_not_read)"),
    _fault("topic-labels-unmasked", "search",
           "topic labels, built from tags, are not masked, so a credential in a tag shows in ListTopics",
           "proto/mnemosync/kernel/topics.py",
           "            label=secrets_scan.mask(label or \" \".join(rows[central][3].split())[:80]),\n",
           "            label=label or \" \".join(rows[central][3].split())[:80],\n",
           survives="the consistency suite stores no credential (the gate refuses them; killed by tests/system/"
                    "test_redaction.py::test_a_tag_holding_a_secret_is_masked_in_topic_labels_tag_listings_"
                    "reflection_and_the_operators_views)"),
    _fault("vault-reads-linked-notes", "admission",
           "vault sync reads a note that is a symbolic link, importing a file from outside the vault",
           "agent_client/vault.py",
           "                (links.append((here / name, \"a symbolic link\")) if (here / name).is_symlink()\n",
           "                (links.append((here / name, \"a symbolic link\")) if False\n",
           survives="the consistency suite does not use the vault (killed by tests/system/test_vault.py::"
                    "test_vault_sync_and_export_neither_read_nor_write_through_a_link_out_of_the_vault)"),
    _fault("vault-writes-through-links", "admission",
           "vault export writes through a link standing where a note or the index goes, overwriting its target",
           "agent_client/vault.py",
           "        if path.is_symlink():\n            path.unlink()\n",
           "        pass\n",
           survives="the consistency suite does not use the vault (killed by tests/system/test_vault.py::"
                    "test_vault_sync_and_export_neither_read_nor_write_through_a_link_out_of_the_vault)"),
    _fault("session-inherits-the-starters-scope", "governance",
           "a session on the local agent that names no scope gets the scope and project of the session that started "
           "the agent (its environment), so its writes land in another project's scope",
           "mcp_shim/agent_sessions.py",
           "        environ = own_environment(os.environ)\n",
           "        environ = dict(os.environ)\n"),
    _fault("source-range-skips-its-first-line", "admission",
           "a cited line range is hashed without its first line, so a change there is never seen as stale",
           "proto/mnemosync/kernel/source_refs.py",
           'return "\\n".join(lines[source["line_start"] - 1:source["line_end"]])',
           'return "\\n".join(lines[source["line_start"]:source["line_end"]])',
           survives="the consistency suite cites no sources (killed by tests/unit/test_source_refs.py::"
                    "test_a_cited_range_is_exactly_its_lines_and_a_change_to_its_first_line_makes_it_stale)"),
    _fault("socket-folder-open-to-its-group", "admission",
           "a local socket folder its group may enter is accepted as private, so the group reaches the agent",
           "agent_client/local_socket.py",
           "info.st_mode & 0o077:  # the group too",
           "info.st_mode & 0o007:  # the group too",
           survives="the consistency suite talks to no local socket (killed by tests/unit/test_local_socket.py::"
                    "test_a_socket_folder_its_group_may_enter_is_not_private)"),
    # -- redaction -----------------------------------------------------------------------------------
    _fault("redaction-blanks-nothing", "redaction",
           "the redaction plan keeps only entries already blanked, so no earlier entry loses the text",
           "server/redaction.py",
           "planned = [b for b in planned if not b.entry.redacted_by and _changes(b)]",
           "planned = [b for b in planned if b.entry.redacted_by and _changes(b)]"),
    _fault("redaction-keeps-history", "redaction",
           "a redaction leaves the text in the memory's history",
           "proto/mnemosync/kernel/projections.py",
           "    revisions.scrub(conn, m.id)\n    conflict_projection.scrub(conn, m.id)\n",
           "    conflict_projection.scrub(conn, m.id)\n"),
    _fault("redaction-keeps-vector", "redaction",
           "a redaction leaves the memory's vector in the index",
           "proto/mnemosync/kernel/projections.py",
           "    vectors.delete(conn, m.num)\n    conn.execute(\"DELETE FROM memory_fts WHERE rowid = ?\", (m.num,))\n"
           "    conn.execute(\"DELETE FROM memory_tags",
           "    conn.execute(\"DELETE FROM memory_fts WHERE rowid = ?\", (m.num,))\n"
           "    conn.execute(\"DELETE FROM memory_tags"),
    _fault("redaction-records-unblanked-digest", "redaction",
           "the redaction records the digest of the payload before blanking, so no blanked entry can prove itself",
           "proto/mnemosync/kernel/blanking.py",
           "    return BlankedEntry(entry.seq, payload_digest(scrub_payload(entry.payload, fields)), drop_embedding)\n",
           "    return BlankedEntry(entry.seq, payload_digest(entry.payload), drop_embedding)\n"),
    _fault("blanking-checked-only-with-proof", "redaction",
           "the agent checks a blanked entry only when the redaction's proof came with it, so a bare mark passes",
           "agent_client/cache.py",
           "                if entry.redacted_by and not entry.withheld:\n",
           "                if entry.redacted_by and not entry.withheld and entry.redaction is not None:\n"),
    Fault("snapshot-older-than-redaction-kept", "redaction",
          "a snapshot made before a redaction is neither deleted nor filtered out: it is kept, holding the text, and "
          "served to new caches",
          (Edit("server/snapshots.py", "        for size in (s for s in sizes if s < last):\n",
                "        for size in (s for s in sizes if s < 0):\n"),
           Edit("server/snapshots.py", "        return [s for s in sizes if s >= last]\n", "        return sizes\n"))),
    _fault("redaction-keeps-procedure", "redaction",
           "a redaction leaves the memory's procedure (steps, preconditions, postconditions) in the projection",
           "proto/mnemosync/kernel/projections.py",
           "    procedures.scrub(conn, m.id)\n",
           ""),
    _fault("blanking-keeps-lists", "redaction",
           "blanking empties an entry's tags but leaves its steps, conditions, sources and paths in the changelog",
           "proto/mnemosync/kernel/entry.py",
           "            return [] if k == \"tags\" else [item(x) for x in v]\n",
           "            return [] if k == \"tags\" else v\n"),
    _fault("topics-shared-across-scopes", "search",
           "the topics cache ignores the caller's scopes: topics computed for one caller are served to another at "
           "the same changelog position",
           "server/costly_reads.py",
           "        key = (head, scopes, novel_since_ms)\n",
           "        key = (head, novel_since_ms)\n"),
    # -- the transparency log: checkpoints and their checks ----------------------------------------------------
    _fault("cache-checkpoint-root-unchecked", "transparency",
           "the agent checks only the size of a page's checkpoint, not its root",
           "agent_client/cache.py",
           "    if checkpoint.size != tree.size or checkpoint.root != root:\n",
           "    if checkpoint.size != tree.size:\n"),
    _fault("cache-checkpoint-signature-unchecked", "transparency",
           "the agent checks the log id of a page's checkpoint but not its signature",
           "agent_client/cache.py",
           "    if not checkpoint.signed_by(key) or (log_id and checkpoint.log_id != log_id):\n",
           "    if log_id and checkpoint.log_id != log_id:\n"),
    _fault("checkpoint-one-behind", "transparency",
           "the checkpoint closing a page covers the entries before its last one (seq - 1)",
           "server/notary.py",
           "            entry = replace(entry, checkpoint=self.checkpoint(entry.seq))\n",
           "            entry = replace(entry, checkpoint=self.checkpoint(entry.seq - 1))\n"),
    Fault("sync-check-only-checks-the-signature", "transparency",
          "before a sync the agent checks that the server's checkpoint is signed, but neither that it extends the "
          "checkpoint it accepted nor that it has the root of the entries it holds",
          (Edit("agent_client/transparency.py",
                "    if accepted is not None and not merkle.verify_consistency(",
                "    if False and accepted is not None and not merkle.verify_consistency("),
           Edit("agent_client/transparency.py",
                "    if offset and (checkpoint.size != offset or checkpoint.root != root):\n",
                "    if offset and checkpoint.size != offset:\n"))),
    # -- signatures ------------------------------------------------------------------------------------
    _fault("unsigned-write-of-a-signing-agent-accepted", "signatures",
           "an agent whose certificate carries a signing key may still write unsigned operations",
           "proto/mnemosync/kernel/signing.py",
           "    if not op.signature:\n        raise PermissionDenied(\n            f\"signature-required",
           "    if not op.signature:\n        return Seal(salt, commit, digest)\n    if False:\n"
           "        raise PermissionDenied(\n            f\"signature-required",
           survives="signatures exist only under mTLS with CA-issued signing keys; the consistency suite runs in "
                    "development mode, where no agent signs (killed by tests/unit/test_signing.py::"
                    "test_the_server_refuses_unsigned_forged_and_unverifiable_signatures_and_writes_nothing)"),
    # -- search --------------------------------------------------------------------------------------
    _fault("keyword-returns-archived", "search",
           "keyword search does not leave out forgotten memories",
           "proto/mnemosync/kernel/search.py",
           '    if not f.include_archived:\n        where.append("m.archived = 0")\n',
           ""),
    _fault("recall-lone-hit-has-no-rival", "search",
           "the recall decision measures a hit's margin against the other hits only, so with fewer than four hits "
           "(none, at worst) the background floor is lost and a lone memory never stands out",
           "proto/mnemosync/kernel/recall_decision.py",
           "        rival = max([background, *sims[:i], *sims[i + 1:]])\n",
           "        rival = max([*sims[:i], *sims[i + 1:]], default=sim)\n",
           survives="the consistency suite does not run the prompt hook's decision (killed by tests/unit/"
                    "test_recall_decision.py::test_with_fewer_than_four_hits_every_feature_is_defined_by_the_prior_"
                    "and_the_hits_there_are)"),
    _fault("set-layer-not-in-vector-index", "search",
           "moving a memory to another layer leaves its old layer in the vector index",
           "proto/mnemosync/kernel/projections.py",
           '        vectors.set_attribute(conn, m.num, "layer", e.payload["layer"])\n',
           ""),
)
"""Every fault, by area."""
