"""Snapshots (issue 30) mid-run: a brand-new replica starts from the server's snapshot and must converge.

`a_new_replica_starts_from_a_snapshot` has the admin make a snapshot of the running server's data directory
(`mnemosync snapshot`'s code) at whatever point the run has reached, then starts a new cache for one of the
agents (of any grant) from it: the snapshot must be accepted (the server is honest here), and once the cache has
caught up on the entries written after it, its projections must equal those of a cache that replayed the same
entries from the start, memory by memory (`Cache.snapshot`), which the invariants hold to the reference fold.
"""

from __future__ import annotations

from hypothesis import note
from hypothesis.stateful import precondition, rule

import reach
from harness import AGENT_NAMES, ReplicationHarness


class SnapshotRules(ReplicationHarness):
    """The snapshot step; see the module docstring."""

    @precondition(lambda self: self.up and not self.store)
    @rule(agent=AGENT_NAMES)
    def a_new_replica_starts_from_a_snapshot(self, agent):
        from mnemosync.agent import bootstrap
        from mnemosync.agent.cache import Cache
        from mnemosync.agent.remote import Remote
        from mnemosync.agent.transparency import check_log
        from mnemosync.server import snapshots

        made = snapshots.make_in(self.tmp / "server")
        note(f"snapshot at entry {made.size}; {agent} starts a new replica from it")
        self.replicas += 1
        cache = Cache(self.tmp / "replicas" / f"{self.replicas}.db")
        remote = Remote(self.address, agent, timeout=30)
        try:
            check_log(cache, remote)
            installed = bootstrap.install(cache, remote)
            assert made.size == 0 or (installed is not None and cache.offset == made.size), (
                f"{agent}'s new replica did not start from the snapshot at {made.size} (it is at {cache.offset})")
            cache.apply(list(remote.sync(cache.offset)))  # the entries after it; no Ack: not the agent's cache
            state, offset = cache.snapshot(), cache.offset
        finally:
            remote.close()
            cache.close()
        entries = self._entries(agent)
        assert offset <= len(entries), f"the replica is at {offset}, past the {len(entries)} entries served"
        replayed = self._replica(entries[:offset])
        assert state == replayed, (
            f"{agent}'s replica from the snapshot at {made.size} differs from a replay of the first {offset} entries: "
            f"{sorted(k for k in set(state) | set(replayed) if state.get(k) != replayed.get(k))[:5]}")
        if made.size:
            reach.reached(reach.OUTCOME, "a replica started from a snapshot converged")
        reach.reached(reach.RULE, "a_new_replica_starts_from_a_snapshot")
