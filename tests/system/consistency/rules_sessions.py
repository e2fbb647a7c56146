"""Sessions and people at the command line: what each was shown, and no update that overwrites what its writer
never saw (issue 36).

The live agent (`agent-0`, whose cache the live stream moves forward the moment anyone commits) serves two MCP
sessions, as one local agent serves every session of its agent; a person works at `agent-1`'s command line, whose
every command catches the cache up before it runs. Each reads memories (as `get` does: the version shown is
recorded, `mnemosync.agent.shown`) and changes them without naming a base version, as a session's model and a
person do: the base is the product's (`Reader.base`). The machine keeps its own record of what each reader was
shown, and checks every acknowledged write against it: a write that replaced a version its writer had not seen,
without opening a conflict, is a lost update, unless it left the memory saying what it said (the server writes
such a stale write on top). A memory the reader was never shown is a blind write: allowed, and said so.

`two_sessions_and_a_person_write_after_what_they_saw_moved` makes the case deterministic in every example: both
sessions read one memory, one changes it, then the other does; the person reads one, another agent changes it,
the person's command catches up and changes it. With the old default (the cache's version) both second writes
were acknowledged without a conflict and the check fails (`ops/faults/catalogue.py`, fault
`session-base-is-the-live-cache`).

It runs in `test_consistency.SnapshotMachine` (see `rules_graph.py` for why not in the main machine).
"""

from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from harness import LIVE, POLICY, SENTENCES, ReplicationHarness

PERSON = "agent-1"
"""The agent whose command line the person uses (a cache that is not live: each command syncs first)."""
READERS = ("session:one", "session:two", "cli")
LOST_UPDATE_CHECKED = "an acknowledged write was checked against what its writer was shown"
CONFLICT_KEPT = "a write after what its writer saw had moved opened a conflict"


class SessionRules(ReplicationHarness):
    """The readers' steps and the lost-update check; see the module docstring."""

    def _shown(self) -> dict[str, dict[str, int]]:
        """The machine's record: reader -> memory id -> the newest version it was shown (or wrote)."""
        if not hasattr(self, "_readers_saw"):
            self._readers_saw: dict[str, dict[str, int]] = {who: {} for who in READERS}
        return self._readers_saw

    def _reader(self, who: str):
        """(the agent, its client, the product's reader) of `who`; the person syncs first, as a command does."""
        agent = PERSON if who == "cli" else LIVE
        client = self.clients[agent]
        if who == "cli" and self.up:
            self._wait_online(client)
            client.sync()
        return agent, client, client.reader(who)

    def _read(self, who: str, memory_id: str) -> int:
        """`who` is shown the memory (`get`); returns the version shown (0: not shown, it is refused or gone)."""
        from mnemosync.kernel.errors import MnemosyncError

        _, client, reader = self._reader(who)
        try:
            memory = client.get(memory_id)
        except MnemosyncError:
            return 0
        reader.saw({memory.id: memory.version}, "get")
        saw = self._shown()[who]
        saw[memory.id] = max(memory.version, saw.get(memory.id, 0))
        return memory.version

    def _change(self, who: str, memory_id: str, text: str):
        """`who` changes the memory's content without naming a base (the product picks it), as predicted by the
        model; an acknowledged write is checked for a lost update. Returns the result, or None."""
        agent, client, reader = self._reader(who)
        base = reader.base(memory_id)
        if base.how == "blind" and who == "cli":
            return None  # the command line refuses a memory it never showed (without --force)
        shown = self._shown()[who].get(memory_id)

        def predict(folded: ref.Folded) -> tuple[set[str], set[str]]:
            m = folded.memories.get(memory_id)
            if m is None:
                return {"NOT_FOUND"}, set()
            refusals = ref.change_refusals(folded, POLICY, agent, "update", memory_id, base.version or m.version,
                                           pb.UpdateOp(content=text))
            return (refusals, set()) if base.version else (set(), refusals)  # blind: from the cache's version

        result = self._attempt(agent, f"{who} updates {memory_id} from {base}",
                               lambda c: c.update(memory_id, base_version=base.version, content=text), predict)
        if result is None or result.pending or result.replayed:
            return result
        reader.wrote(result, "update")
        self._check_not_lost(who, memory_id, result, shown)
        if not result.conflict_id:
            saw = self._shown()[who]
            saw[memory_id] = max(result.version, saw.get(memory_id, 0))
        return result

    def _check_not_lost(self, who: str, memory_id: str, result, shown: int | None) -> None:
        """The lost-update check (see the module docstring)."""
        [entry] = [e for e in self._entries() if e.seq == result.seq]
        reach.reached(reach.OUTCOME, LOST_UPDATE_CHECKED)
        if entry.HasField("conflict") or shown is None:
            return
        replaced = entry.version - 1
        if replaced <= shown:
            return
        m = self._fold().memories[memory_id]
        assert ref._same(m.history[replaced], m.history[entry.version]), (
            f"lost update: {who}'s write (seq {entry.seq}, from v{entry.base_version}) replaced v{replaced} of "
            f"{memory_id}, which {who} had not seen (it was shown v{shown}), without a conflict")

    @precondition(lambda self: self.up and self.slots)
    @rule(who=st.sampled_from(READERS), pick=st.integers(0, 10**6))
    def a_reader_is_shown_a_memory(self, who, pick):
        if self._read(who, self._slot(pick)):
            reach.reached(reach.RULE, "a_reader_is_shown_a_memory")

    @precondition(lambda self: self.up and self.slots)
    @rule(who=st.sampled_from(READERS), pick=st.integers(0, 10**6), sentence=st.sampled_from(SENTENCES))
    def a_reader_changes_a_memory_without_naming_a_base(self, who, pick, sentence):
        done = self._change(who, self._slot(pick), self._text(sentence))
        if done is not None and not done.pending:
            reach.reached(reach.RULE, "a_reader_changes_a_memory_without_naming_a_base")

    @precondition(lambda self: self.up)
    @rule(sentences=st.lists(st.sampled_from(SENTENCES), min_size=4, max_size=4))
    def two_sessions_and_a_person_write_after_what_they_saw_moved(self, sentences):
        first, second, person = READERS
        own = self._new_slot()  # the live agent's memory: both its sessions may write it
        added = self._attempt(LIVE, f"add {own}", lambda c: c.add(self._text(sentences[0]), memory_id=own,
                                                                  scope="user"))
        if added is None or added.pending:
            return
        for who in (first, second):
            assert self._read(who, own) == 1
        written = self._change(second, own, self._text(sentences[1]))
        if written is None or written.pending:
            return
        assert not written.conflict_id, f"{second} changed {own} from the version it was shown, and it conflicted"
        later = self._change(first, own, self._text(sentences[2]))
        assert later is not None and later.conflict_id, (
            f"{first} changed {own} after {second} did, from the v1 it was shown, and opened no conflict")
        reach.reached(reach.OUTCOME, CONFLICT_KEPT)

        theirs = self._new_slot()  # the person's, then changed by the live agent (the human, authority 1)
        made = self._attempt(PERSON, f"add {theirs}", lambda c: c.add(self._text(sentences[3]), memory_id=theirs,
                                                                      scope="user"))
        if made is None or made.pending or self._read(person, theirs) != 1:
            return
        moved = self._attempt(LIVE, f"update {theirs} from v1", lambda c: c.update(
            theirs, base_version=1, content=self._text(sentences[1])))
        if moved is None or moved.pending:
            return
        note(f"the person was shown v1 of {theirs}; the live agent made v{moved.version}")
        stale = self._change(person, theirs, self._text(sentences[2]))
        assert stale is not None and stale.conflict_id, (
            f"the person's update of {theirs}, after a command caught up past the v1 they were shown, opened no "
            "conflict")
        reach.reached(reach.RULE, "two_sessions_and_a_person_write_after_what_they_saw_moved")
