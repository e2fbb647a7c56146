"""Searches, on the server and offline on an agent's cache, checked against the reference model.

An agent, and then (online when it can) one not granted its scope if there is one, searches for one memory the
machine made: by its unique word (keyword), by its own content (vector: the real model embeds it to the vector
the memory carries; hybrid: both), optionally narrowed by one of its tags, its type, its layer or its scope, and
with or without archived memories. Offline searches happen when the server is down, when the agent is cut off the
network for the step, or when its outbox holds writes.

Whatever the mode, a result must be a memory the agent may see in that state (the server's, or its cache's),
not archived unless asked for, matching the filter, with the fields the model gives it; a keyword result must
contain the word and a vector result must have a vector. And the memory searched for must be found when the
model says it is live (or archived ones were asked for), in a granted scope, matching the filter and, for a
vector search, carrying the vector of its content. Memories shown in their pending state (the outbox overlay)
are left out of the comparison.
"""

from __future__ import annotations

import re

import numpy as np
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import reach
import reference_model as ref
from harness import AGENT_NAMES, POLICY, ReplicationHarness, model_of

_TOKEN = re.compile(r"\(note (n\d+q)\)")


class SearchRules(ReplicationHarness):
    """The search step; see the module docstring."""

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), offline=st.booleans(),
          narrow=st.sampled_from([None, None, "tag", "type", "layer", "scope"]), include_archived=st.booleans())
    def search(self, agent, pick, offline, narrow, include_archived):
        """A keyword, a vector and a hybrid search for one memory (see the module docstring), by the agent and, on
        the server when it is up, by one that may not see it, if there is one."""
        agent = self._agent(agent)
        entries = self._entries() if self.up else self.seen
        wanted = model_of(entries).memories.get(self._slot(pick))
        outside = sorted(a for a in self.clients if wanted is not None and not POLICY.granted(a, wanted.scope))
        searched = [self._search_as(agent, entries, pick, offline, narrow, include_archived)]
        if outside and outside[pick % len(outside)] != agent:  # on the server, which must apply its grant
            searched.append(self._search_as(outside[pick % len(outside)], entries, pick, False, narrow,
                                            include_archived))
        if any(searched):
            reach.reached(reach.RULE, "search")

    def _search_as(self, agent, entries, pick, offline, narrow, include_archived, tag: str = "") -> bool:
        """The three searches by one agent (narrowed to `tag`, if given); False when there was nothing to compare."""
        folded = model_of(entries)
        client = self.clients[agent]
        expect_offline = offline or not self.up or client.outbox.counts()[0] > 0
        offset = client.cache.offset
        skip: frozenset[str] = frozenset()
        if expect_offline:  # the cache's state; a redaction it has not applied yet blanked entries it has
            folded, skip = model_of(entries[:offset], redacted=folded.redacted), folded.redacted
        target = folded.memories.get(self._slot(pick))
        if target is None or target.id in skip:
            return False
        if narrow == "tag" and not tag and target.state["tags"]:
            tag = target.state["tags"][0]
        kwargs = {"tags": [tag] if tag else [],
                  "types": [target.state["type"]] if narrow == "type" else [],
                  "layers": [target.layer] if narrow == "layer" else [],
                  "scopes": [target.scope] if narrow == "scope" else []}
        cut_off = offline and self.up
        if cut_off:
            self.proxy.partition(agent)
        try:
            for mode in ("keyword", "vector", "hybrid"):
                if not self._search_once(agent, client, folded, target, mode, kwargs, include_archived, skip,
                                         expect_offline, offset):
                    return False
        finally:
            if cut_off:
                self.proxy.heal(agent)
        where = "offline" if expect_offline else "on the server"
        reach.reached(reach.OUTCOME, f"a search {where}")
        if not POLICY.granted(agent, target.scope):
            reach.reached(reach.OUTCOME, f"a search {where} for a memory the agent may not see")
        return True

    def _search_once(self, agent, client, folded, target, mode, kwargs, include_archived, skip, expect_offline,
                     offset) -> bool:
        """One search and its checks; False when there is nothing to compare (so the step ends)."""
        from mnemosync.kernel.errors import MnemosyncError

        found_word = _TOKEN.search(target.state["content"])
        if mode == "keyword" and not found_word:
            return True  # redacted: no word left to look for
        query = found_word.group(1) if mode == "keyword" else target.state["content"]
        try:
            outcome = client.search(query, mode=mode, limit=10, include_archived=include_archived, **kwargs)
        except MnemosyncError as exc:
            assert kwargs["scopes"] and not POLICY.granted(agent, target.scope) and exc.code == "PERMISSION_DENIED", (
                f"{agent}'s {mode} search for {query!r} was refused: {exc}")
            reach.reached(reach.OUTCOME, "a search of a scope not granted was refused")
            return False
        assert outcome.offline == expect_offline, (
            f"a search {'expected' if expect_offline else 'not expected'} to run offline said offline="
            f"{outcome.offline}")
        if outcome.offline and client.cache.offset != offset:
            return False  # a live update landed during the search: no single state to compare with
        pending = client.outbox.overlay_ids() if outcome.offline else set()
        where = "offline" if outcome.offline else "on the server"
        hits = [h for h in outcome.hits if h.memory.id not in pending and h.memory.id not in skip]
        note(f"{agent} searched {where} ({mode}, {kwargs}, archived {include_archived}) for {query!r}: "
             f"{[h.memory.id for h in outcome.hits]}")
        for hit in hits:
            m = folded.memories.get(hit.memory.id)
            assert m is not None, f"a {mode} search {where} returned {hit.memory.id}, which does not exist there"
            assert POLICY.granted(agent, m.scope), f"{agent}'s search {where} returned {m.id} of scope {m.scope}"
            assert include_archived or not m.state["archived"], f"a search {where} returned archived memory {m.id}"
            readable = {mid for mid, other in folded.memories.items() if POLICY.granted(agent, other.scope)}
            assert ref.visible(hit.memory) == ref.visible_to(m, readable), (
                f"a search {where} returned {m.id} in another state")
            assert tuple(hit.memory.open_conflicts) == folded.open_conflicts(m.id), (
                f"a search {where} returned {m.id} with other open conflicts")
            assert _matches(m, kwargs), f"a search {where} filtered by {kwargs} returned {m.id}"
            if mode == "keyword":
                assert _has_word(m, query), f"a keyword search {where} for {query!r} returned {m.id}, without it"
            if mode == "vector":
                assert folded.vector_of(m) is not None, f"a vector search {where} returned {m.id}, which has none"
        wanted = (POLICY.granted(agent, target.scope) and (include_archived or not target.state["archived"])
                  and _matches(target, kwargs) and target.id not in pending
                  and (mode == "keyword" or self._embedded_from(folded, target)))
        if wanted:
            assert target.id in [h.memory.id for h in hits], (
                f"{agent}'s {mode} search {where} for {query!r} missed {target.id}")
            reach.reached(reach.OUTCOME, f"a {mode} search {where} found what it looked for")
        return True

    def _embedded_from(self, folded: ref.Folded, m: ref.RefMemory) -> bool:
        """True when the memory's vector is its content's embedding (so searching its content finds it)."""
        vector = folded.vector_of(m)
        if vector is None:
            return False
        return bool(np.allclose(vector, self.embedder.embed(m.state["content"]), atol=1e-4))


def _matches(m: ref.RefMemory, kwargs: dict) -> bool:
    return (all(t in m.state["tags"] for t in kwargs["tags"]) and (not kwargs["types"] or m.state["type"] in kwargs[
        "types"]) and (not kwargs["layers"] or m.layer in kwargs["layers"]) and (
        not kwargs["scopes"] or m.scope in kwargs["scopes"]))


def _has_word(m: ref.RefMemory, word: str) -> bool:
    text = " ".join([m.state["content"], *m.state["tags"]]).lower()
    return re.search(rf"\b{re.escape(word.lower())}\b", text) is not None
