"""Two paths of Sync the other rules never take: a consistency proof from a checkpoint older than the agent's
offset, and a Sync running while another agent commits.

`an_agent_checks_a_proof_from_an_older_checkpoint`: the other rules always leave an agent's accepted checkpoint at
its offset (every page it applies closes with one), so the consistency proof `transparency.check_log` checks at
the next sync goes from a size to the same size and proves nothing. Here the agent applies the server's newer
entries without their checkpoints (as the hash chain allows), so its next sync must check a real proof from the
older checkpoint to its offset, and accept a checkpoint of its offset after it.

`a_sync_runs_while_another_agent_commits`: the human commits adds one Append at a time in a thread while another
agent syncs, over and over until the writer is done. Every Sync answer must be a gap-free prefix of the final
changelog whose chain verifies (a page never shows half a commit or an entry twice), and the syncing agent's
cache ends with exactly the entries the server holds for it. The path counts only when a Sync was running while
a commit landed.

They run in `test_consistency.GraphMachine` (see `rules_graph.py` for why not in the main machine).
"""

from __future__ import annotations

import threading
import uuid

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from harness import AGENT_NAMES, LIVE, SENTENCES, ReplicationHarness
from helpers import RawAgent

OLDER_CHECKPOINT = "an agent checked a consistency proof from a checkpoint older than its offset"
SYNC_WHILE_COMMITTING = "a Sync ran while another agent committed"


class SyncRules(ReplicationHarness):
    """The two steps; see the module docstring."""

    def _human_add(self, sentence: str) -> pb.Operation:
        """An add for the human (LIVE) to append: no memory is stronger, so none is refused as a near duplicate."""
        text = self._text(sentence)
        return pb.Operation(op_id=str(uuid.uuid4()), memory_id=self._new_slot(), add=pb.AddOp(
            scope="user", type="fact", content=text, tags=["sync"], embedding=self.embedder.embed(text)))

    def _non_live(self, agent: str) -> str:
        """`agent` if it is running and not the live agent (whose entries arrive on its live stream), else another."""
        agent = self._agent(agent)
        return agent if agent != LIVE else next(a for a in sorted(self.clients) if a != LIVE)

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES, sentences=st.lists(st.sampled_from(SENTENCES), min_size=2, max_size=4))
    def an_agent_checks_a_proof_from_an_older_checkpoint(self, agent, sentences):
        from mnemosync.kernel.codec import entry_from_proto

        agent = self._non_live(agent)
        client = self.clients[agent]
        self._wait_online(client)
        client.flush()
        client.sync()
        for sentence in sentences:
            self._append_raw(LIVE, self._human_add(sentence))
        offset = client.cache.offset
        reader = RawAgent(self.address, agent)
        try:
            newer = list(reader.call("Sync", pb.SyncRequest(since_seq=offset, checkpoint_every=100_000)))
        finally:
            reader.close()
        for e in newer:
            e.ClearField("checkpoint")
        client.cache.apply([entry_from_proto(e) for e in newer])
        accepted = client.cache.checkpoint
        if accepted is None or accepted.size >= client.cache.offset:
            return  # a sync of its own came in between: nothing older to prove from
        note(f"{agent}: accepted checkpoint of {accepted.size} entries, offset {client.cache.offset}")
        summary = client.sync()
        now = client.cache.checkpoint
        assert now is not None and now.size == client.cache.offset == summary.offset, (
            f"{agent} accepted {now and now.size} entries after a sync to offset {summary.offset}")
        assert now.size > accepted.size, "the sync did not move the accepted checkpoint past the older one"
        reach.reached(reach.OUTCOME, OLDER_CHECKPOINT)
        reach.reached(reach.RULE, "an_agent_checks_a_proof_from_an_older_checkpoint")

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES, count=st.integers(6, 12))
    def a_sync_runs_while_another_agent_commits(self, agent, count):
        agent, writer = self._non_live(agent), LIVE
        client = self.clients[agent]
        self._wait_online(client)
        client.flush()
        ops = [self._human_add(SENTENCES[i % len(SENTENCES)]) for i in range(count)]
        committed = 0
        failure: list[BaseException] = []
        first = threading.Event()

        def commit() -> None:
            nonlocal committed
            try:
                for op in ops:
                    self._append_raw(writer, op)
                    committed += 1
                    first.set()
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                failure.append(exc)
                first.set()

        thread = threading.Thread(target=commit, name="committer")
        thread.start()
        answers, overlapped = [], 0
        try:
            first.wait(30)
            reader = RawAgent(self.address, agent)
            try:
                while thread.is_alive() and len(answers) < 50:
                    before = committed
                    answers.append(reader.sync(0))
                    client.sync()
                    overlapped += committed > before
            finally:
                reader.close()
        finally:
            thread.join(60)
        assert not failure, f"{writer}'s commits failed: {failure[0]}"
        final = self._entries(agent)
        digests = [ref.entry_digest(e) for e in final]
        for answer in answers:
            assert [e.seq for e in answer] == list(range(1, len(answer) + 1)), "a Sync answer has a gap"
            assert [ref.entry_digest(e) for e in answer] == digests[:len(answer)], (
                "a Sync answer during commits is not a prefix of the changelog")
            assert ref.chain_ok(answer), "a Sync answer during commits does not chain"
        client.sync()
        head = len(self._entries(agent))  # a queued write of another agent may have landed since
        assert client.cache.offset == head, f"{agent}'s cache at {client.cache.offset} after a sync, head {head}"
        note(f"{agent} synced {len(answers)} times while {writer} committed {count} adds ({overlapped} overlapped)")
        if overlapped:
            reach.reached(reach.OUTCOME, SYNC_WHILE_COMMITTING)
        reach.reached(reach.RULE, "a_sync_runs_while_another_agent_commits")
