"""How far a redaction reaches, and whose topics a caller is shown (issue 37, item 13).

`a_procedure_is_redacted_everywhere` has an agent write a procedure memory that carries a text of its own in
every field a memory projects (content, quote, tags, steps, preconditions, postconditions, a source and a link
reason), has the admin snapshot the data directory (`mnemosync snapshot`'s code) and then redact the memory.
Then no file of the server's data directory may hold that text (its raw bytes: the database, its WAL, the
snapshot images and replica files), no snapshot older than the redaction may be kept, the server's Get and every
cache after a sync must show none of it in any projected field, and a brand-new replica started from whatever
snapshot the server serves now must hold none of it either.

`each_agent_lists_its_topics` asks the server for the topics of every agent in turn at one changelog position
(agents of different grants: `user` only, `project:*` only, both, everything) and compares each answer with the
topics a brand-new cache of the entries that agent is sent computes (`mnemosync.kernel.topics`): topics are a
pure function of what a caller may read, so an answer computed for one caller's scopes and served to another's
differs.
"""

from __future__ import annotations

import json
import uuid

import grpc
from hypothesis import note
from hypothesis.stateful import precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
from harness import AGENT_NAMES, POLICY, ReplicationHarness, token
from helpers import RawAgent

REDACTED_EVERYWHERE = "a redaction reached every projected field, file and snapshot"
OWN_TOPICS = "agents of different grants listed their own topics at one position"


class ReachRules(ReplicationHarness):
    """The two steps; see the module docstring."""

    @precondition(lambda self: self.up and not self.store and self.slots)
    @rule(agent=AGENT_NAMES)
    def a_procedure_is_redacted_everywhere(self, agent):
        from mnemosync.agent.bootstrap import from_snapshot
        from mnemosync.agent.cache import Cache
        from mnemosync.agent.remote import Remote
        from mnemosync.agent.transparency import check_log
        from mnemosync.server import snapshots

        agent = self._agent(agent)
        admin = min(POLICY.admins)
        scope = "user" if POLICY.granted(agent, "user") else "project:x"
        self.counter += 1
        secret = f"zq{token(self.counter)}x"  # a word found nowhere else
        text = f"Rotate the {secret} credential of {secret}y"  # no near copy of another procedure's words
        memory_id, target = self._new_slot(), self.slots[0]
        add = pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, add=pb.AddOp(
            scope=scope, type="procedure", content=text, embedding=self.embedder.embed(text), tags=[f"t{secret}"],
            trust="principle", quote=f"rotate {secret}", steps=[f"open {secret}", "rotate it"],
            preconditions=[f"{secret} is due"], postconditions=[f"{secret} works"],
            sources=[pb.Source(url=f"https://wiki.example/{secret}")]))
        link = pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, link=pb.LinkOp(
            target_id=target, relation="semantic", reason=f"both about {secret}"))
        try:
            self._append_raw(agent, add)
        except grpc.RpcError as exc:  # a rule refused it (a scope, a stronger near duplicate): nothing to redact
            note(f"{agent}'s procedure was refused: {exc.details()}")
            return
        try:
            self._append_raw(agent, link)
        except grpc.RpcError as exc:
            note(f"{agent}'s link was refused: {exc.details()}")
        made = snapshots.make_in(self.tmp / "server")
        redacted = self._append_raw(admin, pb.Operation(
            op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=1,
            redact=pb.RedactOp(reason="a secret was pasted into it"))).results[0].seq
        note(f"{agent} wrote procedure {memory_id}, snapshot at {made.size}, {admin} redacted it at {redacted}")

        held = sorted(str(p.relative_to(self.tmp / "server")) for p in (self.tmp / "server").rglob("*")
                      if p.is_file() and secret.encode() in p.read_bytes())
        assert held == [], f"after the redaction at {redacted} these files still hold its text: {held}"
        kept = snapshots.Snapshots(self.tmp / "server" / "mnemosync.db", self.tmp / "server" / snapshots.DIRECTORY,
                                   None, lambda: 0).sizes()
        assert all(size >= redacted for size in kept), f"snapshots {kept} made before the redaction at {redacted}"
        auditor = RawAgent(self.address, "auditor")
        try:
            shown = auditor.get(memory_id)
        finally:
            auditor.close()
        assert secret not in str(shown), f"Get of redacted {memory_id} still shows its text: {shown}"
        for name, client in self.clients.items():
            self._wait_online(client)
            client.sync()
            state = json.dumps(client.cache.snapshot().get(memory_id), default=repr)
            assert secret not in state, f"{name}'s cache still shows the redacted text of {memory_id}: {state}"
        self.replicas += 1
        cache = Cache(self.tmp / "replicas" / f"{self.replicas}.db")
        remote = Remote(self.address, "auditor", timeout=30)
        try:
            check_log(cache, remote)
            installed = from_snapshot(cache, remote)
            assert installed is None or installed.size >= redacted, (
                f"the server served the snapshot at {installed.size}, made before the redaction at {redacted}")
            state = json.dumps(cache.snapshot(), default=repr)
        finally:
            remote.close()
            cache.close()
        assert secret not in state, f"a replica started from the server's snapshot holds the redacted text {secret}"
        reach.reached(reach.OUTCOME, REDACTED_EVERYWHERE)
        reach.reached(reach.RULE, "a_procedure_is_redacted_everywhere")

    @precondition(lambda self: self.up)
    @rule()
    def each_agent_lists_its_topics(self):
        from mnemosync.kernel import topics

        head = len(self._entries())
        answers = {}
        for agent in sorted(self.clients):  # one after another at one position: the answers the server keeps
            raw = RawAgent(self.address, agent)
            try:
                answers[agent] = raw.call("ListTopics", pb.ListTopicsRequest(limit=topics.MAX_LIMIT)).topics
            finally:
                raw.close()
        for agent, served in answers.items():
            entries = self._entries(agent)
            if len(entries) != head:
                return  # a queued write landed meanwhile: no single position to compare with
            got = [(t.id, t.scope, t.size, t.label, t.representative_id) for t in served]
            want = self._replica_topics(entries)
            assert got == want, f"{agent} was served the topics {got}; what it may read gives {want}"
        if len({POLICY.scopes.get(a) for a in answers}) > 1 and any(answers.values()):
            reach.reached(reach.OUTCOME, OWN_TOPICS)
        reach.reached(reach.RULE, "each_agent_lists_its_topics")
