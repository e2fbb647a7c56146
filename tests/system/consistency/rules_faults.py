"""The consistency suite's faults: each step makes one thing go wrong for real and counts it only if it happened.

* An agent process is killed with SIGKILL inside a cache transaction, at an
  entry it is guaranteed to be applying (a fresh agent identity catches up
  from an offset behind the head); it stays down until the next step brings
  it back, and meanwhile the invariants check its acknowledgement.
* A write's Append is lost on its way to the server, or its reply is lost
  after the server committed it: the write waits in the outbox and is sent
  again with the same op_id.
* An agent is cut off the network, queues writes (searchable at once), and
  its flush fails partway: exactly the writes the failed Append carried (the
  proxy records them) and those after them stay queued, those before are
  written once; the next flush sends the rest, in order, each once.
* The live stream delivers again entries the cache already applied.
* An entry arrives tampered with (any field the hash chain covers, the signed
  checkpoint closing a page, a redaction mark): the cache refuses the whole
  batch and keeps what it had.
* Someone holding the server's database rewrites an entry and recomputes every
  hash and the transparency log after it: an agent that applied the original
  refuses that server at its next sync (on a copy, so the run goes on).
* Acknowledgements arrive late (older than the one recorded) or past the head.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from contextlib import closing
from dataclasses import replace

import grpc
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
from harness import AGENT_NAMES, LIVE, POLICY, SENTENCES, ReplicationHarness, token
from helpers import RawAgent, ServeProcess, rewrite_changelog, wait_until

CRASH_SCRIPT = """
import os, signal, sys
from mnemosync.agent.cache import Cache
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import catch_up
from mnemosync.kernel import projections

path, address, agent, die_at, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
real_apply, real_add_run, applied = projections.apply, projections._add_run, [0]

def reach(count):
    applied[0] += count
    if applied[0] >= die_at:
        os.kill(os.getpid(), signal.SIGKILL)  # dies inside the open transaction, like a crash

def apply(conn, entry):
    reach(1)
    real_apply(conn, entry)

def add_run(conn, run):  # runs of adds are folded together (projections.apply_many)
    reach(len(run))
    real_add_run(conn, run)

projections.apply, projections._add_run = apply, add_run
catch_up(Cache(path), Remote(address, agent, insecure=True, timeout=10.0), batch=batch)
"""
"""An agent process that catches up in batches of `batch` and is killed -9 as it applies new entry `die_at`."""

TAMPERED_FIELDS = ["op_id", "agent_id", "memory_id", "base_version", "version", "server_time_ms", "prev_hash",
                   "authority", "conflict", "payload", "embedding", "embedding_model", "checkpoint root",
                   "checkpoint root, no key pinned yet", "checkpoint signature", "redaction mark"]
"""What a tampered entry has changed. With no key pinned yet (an agent's first sync) no signature is checked, so
only the root of the entries the agent holds can show a changed checkpoint."""


def _tamper(e: pb.ChangelogEntry, field: str, other_memory: str) -> bool:
    """Changes `field` of `e` in place; False when the entry has nothing there to change."""
    if field == "op_id":
        e.op_id = str(uuid.uuid4())
    elif field == "agent_id":
        e.agent_id = "agent-1" if e.agent_id != "agent-1" else "agent-2"
    elif field == "memory_id":
        e.memory_id = other_memory
    elif field in ("base_version", "version", "server_time_ms"):
        setattr(e, field, getattr(e, field) + 1)
    elif field == "prev_hash":
        e.prev_hash = ("1" if e.prev_hash[0] == "0" else "0") + e.prev_hash[1:]
    elif field == "authority":
        e.authority = 1 if e.authority != 1 else 2
    elif field == "conflict":
        if e.HasField("conflict"):
            e.conflict.conflict_id += 1
        else:
            e.conflict.CopyFrom(pb.ConflictMark(conflict_id=e.seq, kind="write"))
    elif field == "payload":
        if e.redacted_by:
            return False  # a blanked entry's payload can no longer be checked against its commitment
        op = getattr(e.operation, e.op)
        if e.op == "add" or (e.op == "update" and op.HasField("content")):
            op.content += " (changed in transit)"
        elif e.op == "update":
            op.type = "changed_in_transit"
        elif e.op in ("link", "unlink"):
            op.relation = "caused" if op.relation != "caused" else "related"
        elif e.op == "set_layer":
            op.layer = 4 if op.layer != 4 else 3
        elif e.op in ("forget", "redact"):
            op.reason += " (changed)"
        elif e.op == "resolve_conflict":
            op.note += " (changed)"
        else:
            return False
    elif field == "embedding":
        op = getattr(e.operation, e.op)
        if e.redacted_by or not getattr(op, "embedding", None):
            return False
        op.embedding[0] += 0.25
    elif field == "embedding_model":
        e.embedding_model += "-other"
    elif field.startswith("checkpoint root"):
        e.checkpoint.root_hash = ("1" if e.checkpoint.root_hash[0] == "0" else "0") + e.checkpoint.root_hash[1:]
    elif field == "checkpoint signature":
        e.checkpoint.time_ms += 1  # the signature no longer covers what the checkpoint says
    elif field == "redaction mark":
        if e.redacted_by or e.op != "add":
            return False
        e.redacted_by = e.seq + 1  # passed off as blanked, which excuses the texts from their commitment
        e.operation.add.content = "[redacted]"
        e.ClearField("payload_salt")
    return True


def _rewritten(e):
    """An add entry with other content, its payload commitment recomputed (the salt is in the database)."""
    from mnemosync.kernel.entry import commit_payload

    payload = {**e.payload, "content": e.payload["content"] + " (rewritten)"}
    return replace(e, payload=payload, payload_commit=commit_payload(payload, e.payload_salt))


AUDITS_PER_EXAMPLE = 2
"""Runs of each check that changes nothing (tampering in transit, a rewritten copy) per example: more would only
take steps from the rules that change the state."""


class FaultRules(ReplicationHarness):
    """The fault steps; see the module docstring."""

    # -- an agent killed inside an apply ------------------------------------------------------

    def _crash_cache(self, identity: int):
        return self.tmp / "crashing" / f"crash-{identity}" / "cache.db"

    @precondition(lambda self: self.up and self.crashed is None)
    @rule(die=st.integers(0, 10**6), batch=st.integers(1, 3))
    def an_agent_is_killed_while_applying(self, die, batch):
        """kill -9 of an agent inside a batch's transaction: its cache must be a fold of exactly the batches it
        committed, and it stays down until `the_killed_agent_starts_again` (the invariants check its ack)."""
        from mnemosync.agent.cache import Cache

        entries = self._entries()
        cache = Cache(self._crash_cache(self.crash_identity))
        offset = cache.offset
        cache.close()
        if offset >= len(entries) or any(e.op == "redact" for e in entries[offset:]):
            # Up to date, or a redaction ahead has blanked entries it applied intact, so no prefix of today's
            # changelog is what it holds: a new identity starts from nothing.
            self.crash_identity += 1
            offset = 0
        agent, path = f"crash-{self.crash_identity}", self._crash_cache(self.crash_identity)
        die_at = 1 + die % (len(entries) - offset)
        done = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(path), self.address, agent, str(die_at),
                               str(batch)], capture_output=True, text=True, timeout=120)
        assert done.returncode == -signal.SIGKILL, (
            f"{agent} was to be killed applying new entry {die_at} of {len(entries) - offset}, but it "
            f"{'caught up' if done.returncode == 0 else 'failed otherwise'}:\n{done.stderr}")
        reach.reached(reach.FAULT, "an agent was killed inside an apply")
        note(f"{agent} was killed applying new entry #{die_at} (batches of {batch}) from offset {offset}")
        self.crashed = agent
        cache = Cache(path)
        try:
            after, state = cache.offset, cache.snapshot()
        finally:
            cache.close()
        committed = offset + (die_at - 1) // batch * batch
        assert after == committed, (
            f"{agent} was killed in the batch after seq {committed}, but its cache holds offset {after}")
        assert state == self._replica(entries[:after]), "a crash left a cache that is not a fold of a prefix"
        self.agents_at_rest[agent] = path
        reach.reached(reach.RULE, "an_agent_is_killed_while_applying")

    @precondition(lambda self: self.up and self.crashed is not None)
    @rule()
    def the_killed_agent_starts_again(self):
        """Its boot sync continues from what it committed and ends as an uninterrupted fold."""
        from mnemosync.agent.cache import Cache
        from mnemosync.agent.remote import Remote
        from mnemosync.agent.sync import catch_up

        agent = self.crashed
        cache = Cache(self.agents_at_rest[agent])
        remote = Remote(self.proxy.address, agent, timeout=10.0)
        try:
            catch_up(cache, remote, batch=2)
            entries = self._entries(agent)
            assert cache.offset == len(entries), "the boot sync after a crash did not reach the head"
            assert cache.snapshot() == self._replica(entries), (
                "after a crash and a boot sync the cache differs from an uninterrupted fold")
        finally:
            remote.close()
            cache.close()
        self.crashed = None
        reach.reached(reach.RULE, "the_killed_agent_starts_again")

    # -- lost Appends and lost replies -------------------------------------------------------------

    def _flaky(self, agent: str) -> str:
        """A running agent other than the live one (whose background flush would race the step)."""
        agent = self._agent(agent)
        return agent if agent != LIVE else "agent-1"

    @precondition(lambda self: self.up and self._predictable())
    @rule(agent=AGENT_NAMES, sentence=st.sampled_from(SENTENCES), after_commit=st.booleans())
    def a_write_whose_append_or_reply_is_lost(self, agent, sentence, after_commit):
        """The write is queued as if the server were down; sent again, it is written exactly once."""
        agent = self._flaky(agent)
        client = self.clients[agent]
        scope = "project:x" if not POLICY.granted(agent, "user") else "user"
        text, memory_id = self._text(sentence), self._new_slot()
        lost = (self.proxy.replies_lost, self.proxy.appends_failed)
        self.proxy.fail_append(agent, 1, after_commit=after_commit)
        result = self._attempt(agent, f"add {memory_id} ({'reply' if after_commit else 'request'} lost)",
                               lambda c: c.add(text, memory_id=memory_id, scope=scope, tags=["lost"]))
        self.proxy.disarm(agent)
        if result is None or (self.proxy.replies_lost, self.proxy.appends_failed) == lost:
            return  # refused before it was sent, or by the server: nothing was lost
        assert result.pending, "a write whose reply was lost was reported as written"
        reach.reached(reach.FAULT, "a reply was lost after the server committed" if after_commit
                      else "an Append was lost before it reached the server")
        sent, refused = client.flush()
        keys = [(e.agent_id, e.op_id) for e in self._entries()]
        assert keys.count((agent, result.op_id)) == sent == 1 - refused, (
            f"the queued write was sent {sent} times, refused {refused} times and written "
            f"{keys.count((agent, result.op_id))} times")
        reach.reached(reach.RULE, "a_write_whose_append_or_reply_is_lost")

    @precondition(lambda self: self.up and self.slots)
    @rule(agent=AGENT_NAMES, writes=st.lists(st.tuples(st.booleans(), st.integers(0, 10**6),
                                                       st.sampled_from(SENTENCES)), min_size=2, max_size=4),
          fail_at=st.integers(1, 4), after_commit=st.booleans())
    def an_agent_cut_off_queues_writes_and_its_flush_fails_partway(self, agent, writes, fail_at, after_commit):
        agent = self._flaky(agent)
        client = self.clients[agent]
        self.proxy.partition(agent)
        scope = "user" if POLICY.granted(agent, "user") else "project:x"
        added = None
        for new, pick, sentence in writes:
            text = self._text(sentence)
            if new or not self.slots:
                memory_id = self._new_slot()
                result = self._attempt(agent, f"add {memory_id} while cut off",
                                       lambda c, t=text, m=memory_id: c.add(t, memory_id=m, scope=scope))
            else:
                memory_id = self._slot(pick)
                result = self._attempt(agent, f"update {memory_id} while cut off",
                                       lambda c, t=text, m=memory_id: c.update(m, content=t))
            seen = client.cache.get(memory_id)
            if result is not None and result.pending and not (seen is not None and seen.archived):
                added = (memory_id, token(self.counter))  # live in its pending state: searchable offline
        queued = client.outbox.counts()[0]
        if added is not None:
            outcome = client.search(added[1], mode="keyword")
            assert outcome.offline, "a search by an agent cut off the network claims to be online"
            assert added[0] in [h.memory.id for h in outcome.hits], (
                f"memory {added[0]}, written while cut off, is not found offline by its unique word")
            reach.reached(reach.OUTCOME, "a queued write was found offline")
        self.proxy.heal(agent)
        if not queued:
            return
        fail_at = 1 + (fail_at - 1) % queued
        before = [item.op.op_id for item in client.outbox.pending()]
        failures = len(self.proxy.failed_appends)
        self.proxy.fail_append(agent, fail_at, after_commit=after_commit)
        from mnemosync.agent.errors import ServerUnavailable

        try:
            client.flush()
        except ServerUnavailable:
            pass
        self.proxy.disarm(agent)
        if len(self.proxy.failed_appends) > failures:
            reach.reached(reach.FAULT, "an outbox flush failed partway")
            self._check_the_failed_flush(client, before, self.proxy.failed_appends[-1])
        client.flush()
        assert client.outbox.counts()[0] == 0, "the outbox still holds writes after a flush that succeeded"
        written = self._written_by(agent)
        parked = {op_id for op_id, *_ in client.outbox.failed()}
        twice = [op_id for op_id in before if written.get(op_id, 0) != (0 if op_id in parked else 1)]
        assert not twice, f"after the flushes, queued writes were not written exactly once (or parked): {twice}"
        reach.reached(reach.RULE, "an_agent_cut_off_queues_writes_and_its_flush_fails_partway")

    def _written_by(self, agent: str) -> dict[str, int]:
        """How often each op_id of `agent` is in the changelog."""
        written: dict[str, int] = {}
        for e in self._entries():
            if e.agent_id == agent:
                written[e.op_id] = written.get(e.op_id, 0) + 1
        return written

    def _check_the_failed_flush(self, client, before: list[str], failed) -> None:
        """The writes the failed Append carried, and every one queued after them, are still queued, in order; each
        one queued before them was written once (or parked, refused for good) and is queued no more; the failed
        Append's writes are in the changelog once if the server committed it (its reply was lost), else not."""
        carried = list(failed.op_ids)
        assert failed.agent == client.agent_id and carried, f"the failed Append was {failed}"
        start = before.index(carried[0]) if carried[0] in before else -1
        assert before[start:start + len(carried)] == carried, (
            f"the failed Append carried {carried}, not a run of the queued writes {before}")
        left = [item.op.op_id for item in client.outbox.pending()]
        assert left == before[start:], (
            f"the flush failed at the Append carrying {carried}: {before[start:]} should still be queued, in order, "
            f"but {left} are")
        written = self._written_by(client.agent_id)
        parked = {op_id for op_id, *_ in client.outbox.failed()}
        for op_id in before[:start]:
            assert written.get(op_id, 0) == (0 if op_id in parked else 1), (
                f"queued write {op_id}, sent before the failed Append, is in the changelog {written.get(op_id, 0)} "
                f"times{' (parked)' if op_id in parked else ''}")
        for op_id in before[start:]:
            expected = 1 if failed.after_commit and op_id in carried else 0
            assert written.get(op_id, 0) == expected, (
                f"queued write {op_id} is in the changelog {written.get(op_id, 0)} times after the flush failed at "
                f"the Append carrying {carried} ({'reply lost' if failed.after_commit else 'request lost'})")

    # -- the live stream delivering again ------------------------------------------------------

    @precondition(lambda self: self.up and len(self.slots) >= 1)
    @rule(back=st.integers(1, 8), sentence=st.sampled_from(SENTENCES))
    def the_live_stream_delivers_entries_again(self, back, sentence):
        live = self.clients[LIVE]
        self._wait_online(live)
        head = len(self._entries())
        wait_until(lambda: live.cache.offset >= head, message="the live cache did not catch up")
        if not head:
            return
        counted = self.proxy.redelivered
        self.proxy.redeliver(back)
        self.proxy.cut_streams(LIVE)
        wait_until(lambda: self.proxy.redelivered >= counted + min(back, head),
                   message="the live stream was not delivered again")
        self.proxy.redeliver(0)
        reach.reached(reach.FAULT, "the live stream delivered entries the cache had")
        text = self._text(sentence)
        self._append_raw(LIVE, pb.Operation(op_id=str(uuid.uuid4()), memory_id=self._new_slot(), add=pb.AddOp(
            scope="user", type="fact", content=text, embedding=self.embedder.embed(text))))
        head = len(self._entries())
        wait_until(lambda: live.cache.offset >= head or live.live.failure is not None,
                   message=lambda: f"live cache stuck at {live.cache.offset}, head {head}")
        assert live.live.failure is None, f"live updates stopped after a redelivery: {live.live.failure}"
        reach.reached(reach.RULE, "the_live_stream_delivers_entries_again")

    # -- a tampered entry ------------------------------------------------------------------------

    @precondition(lambda self: self.up and self.slots and self.audits["tamper"] < AUDITS_PER_EXAMPLE)
    @rule(pick=st.integers(0, 10**6))
    def a_tampered_entry_is_refused(self, pick):
        """Each field the hash chain covers, the signed checkpoint closing a page, and a redaction mark, changed in
        one entry in transit: the batch is refused whole. The entries come with a checkpoint each and the
        replica trusts the server's checkpoint key, as an agent does after its first sync; a second replica has
        pinned no key yet, as in an agent's first sync."""
        from mnemosync.agent.cache import Cache
        from mnemosync.agent.errors import HistoryMismatch
        from mnemosync.kernel.codec import entry_from_proto

        self.audits["tamper"] += 1
        reader = RawAgent(self.address, "auditor")
        try:
            entries = list(reader.call("Sync", pb.SyncRequest(checkpoint_every=1)))
        finally:
            reader.close()
        at = pick % len(entries)
        self.replicas += 1
        pinned = Cache(self.tmp / "replicas" / f"{self.replicas}.db")
        unpinned = Cache(self.tmp / "replicas" / f"{self.replicas}-unpinned.db")
        try:
            pinned.accept(None, entries[0].checkpoint.key, entries[0].checkpoint.log_id)
            for cache in (pinned, unpinned):
                cache.apply([entry_from_proto(e) for e in entries[:at]])
            for field in TAMPERED_FIELDS:
                cache = unpinned if field.endswith("no key pinned yet") else pinned
                forged = pb.ChangelogEntry()
                forged.CopyFrom(entries[at])
                if not _tamper(forged, field, str(uuid.uuid5(uuid.NAMESPACE_OID, forged.memory_id))):
                    continue
                try:
                    cache.apply([entry_from_proto(e) for e in [forged, *entries[at + 1:at + 3]]])
                except HistoryMismatch:
                    pass
                else:
                    raise AssertionError(f"entry {forged.seq} with a changed {field} was applied")
                assert cache.offset == at, "a refused batch left part of itself in the cache"
                reach.reached(reach.FAULT, f"an entry tampered with in transit ({field}) was refused")
        finally:
            pinned.close()
            unpinned.close()
        reach.reached(reach.RULE, "a_tampered_entry_is_refused")

    # -- a server whose history was rewritten -----------------------------------------------------

    @precondition(lambda self: self.up and self.slots and self.audits["rewrite"] < AUDITS_PER_EXAMPLE
                  and not self.store)  # it rewrites a copy of the SQLite store's file
    @rule(pick=st.integers(0, 10**6))
    def a_server_whose_history_was_rewritten_is_refused(self, pick):
        """One entry of a copy of the server's database rewritten, every hash after it and the transparency log's
        tree recomputed (the chain verifies, the copy's server starts): an agent that applied the original refuses
        the copy at its next sync and applies nothing."""
        from mnemosync.agent.cache import Cache
        from mnemosync.agent.errors import TamperDetected
        from mnemosync.agent.remote import Remote
        from mnemosync.agent.sync import catch_up

        self.audits["rewrite"] += 1
        self.replicas += 1
        cache = Cache(self.tmp / "replicas" / f"{self.replicas}.db")
        try:
            remote = Remote(self.address, "auditor", timeout=10)
            try:
                catch_up(cache, remote)
            finally:
                remote.close()
            written = [e.seq for e in self._entries()[:cache.offset] if e.op == "add" and not e.redacted_by]
            if not written:
                return
            at = written[pick % len(written)]
            copy = self.tmp / "rewritten" / str(self.replicas)
            db = self.server.db_path.relative_to(self.server.data_dir)
            shutil.copytree(self.server.data_dir, copy, ignore=shutil.ignore_patterns(f"{db.name}*"))
            with closing(sqlite3.connect(self.server.db_path)) as source, closing(sqlite3.connect(copy / db)) as to:
                source.backup(to)
            rewrite_changelog(copy / db, at, _rewritten)
            with ServeProcess(copy, embed_model=self.model_path, env={"MNEMOSYNC_POLICY_FILE": str(self.policy_file)}
                              ) as rewritten:
                remote = Remote(rewritten.address, "auditor", timeout=10)
                offset = cache.offset
                try:
                    catch_up(cache, remote)
                except TamperDetected:
                    pass
                else:
                    raise AssertionError(f"a server whose entry {at} was rewritten was not refused")
                finally:
                    remote.close()
                assert cache.offset == offset, "an agent applied entries from a server whose history was rewritten"
            shutil.rmtree(copy, ignore_errors=True)
        finally:
            cache.close()
        reach.reached(reach.FAULT, "a server whose history was rewritten was refused")
        reach.reached(reach.RULE, "a_server_whose_history_was_rewritten_is_refused")

    # -- acknowledgements ------------------------------------------------------------------------

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES, past_head=st.booleans())
    def an_acknowledgement_arrives_late_or_past_the_head(self, agent, past_head):
        agent = self._agent(agent)
        acked = self._acked_offsets().get(agent, 0)
        head = len(self._entries())
        raw = RawAgent(self.address, agent)
        try:
            if past_head:
                try:
                    raw.call("Ack", pb.AckRequest(seq=head + 1))
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.OUT_OF_RANGE, f"an ack past the head got {exc.code()}"
                else:
                    raise AssertionError(f"an ack of seq {head + 1} past the head {head} was accepted")
            else:
                applied = self.clients[agent].cache.offset
                if acked < 2 <= applied:  # it has not acknowledged enough yet: it acknowledges what it applied
                    acked = raw.call("Ack", pb.AckRequest(seq=applied)).acked_seq
                if acked < 2:
                    return
                response = raw.call("Ack", pb.AckRequest(seq=acked // 2))
                assert response.acked_seq >= acked, f"a late ack of {acked // 2} moved {agent}'s offset back"
        finally:
            raw.close()
        reach.reached(reach.FAULT, "an acknowledgement past the head" if past_head else "a late acknowledgement")
        reach.reached(reach.RULE, "an_acknowledgement_arrives_late_or_past_the_head")

