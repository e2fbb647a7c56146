"""Recall on every prompt: the few memories a prompt needs, within a token budget, or nothing.

The UserPromptSubmit hook (`mnemosync.shim.prompt_hook`) sends the prompt to a warm
process, which calls `recall`: one hybrid search (the server; the local cache
when the server is unreachable, at once when the live stream already says so),
then the fitted decision (`mnemosync.kernel.recall_decision.Decision.judge`, a
small logistic regression over how far each hit stands out for this prompt in
this store, and no automated agent's memory its words do not back) keeps the
hits worth injecting, so an unrelated prompt gets nothing
rather than the nearest noise. A memory this session was already shown is
not shown again unless its version changed (`seen`).

How well it decides is measured on the labelled prompt set
(`ops/bench/data/recall/`: project stores of different teams, fitted on the
dev stores, reported on the held-out ones) by
`python -m ops.bench.bench_recall --decision`, beside `Bar`, the absolute
bar recall used before (cosine at least `MIN_SIMILARITY`, or both channels
and keyword coverage at least `MIN_COVERAGE`), which stays as the
benchmark's baseline.

What the model reads: a short block (`render`) with each memory's 8-character
id prefix and version (`get` and `update` take them), type, author and date,
and its content cut to fit `budget_tokens` (4 characters a token, as
`mnemosync.shim.core_memories` counts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mnemosync.agent import conflicts
from mnemosync.agent.source_tree import judged_root
from mnemosync.kernel import procedures, source_refs
from mnemosync.kernel.conflict_projection import Conflict
from mnemosync.kernel.memory import text_author
from mnemosync.kernel.one_line import one_line
from mnemosync.kernel.recall_decision import SEARCH_LIMIT, Candidate, Decision, shipped, worth_searching
from mnemosync.kernel.search import Filter, Hit
from mnemosync.shim.core_memories import authority, caveat

MIN_SIMILARITY = 0.65
"""The old bar's cosine similarity (1 - vector distance) at which a hit counts as relevant on its own."""
MIN_COVERAGE: float | None = 0.7
"""The old bar's keyword coverage at which a hit found by both channels counts (None: similarity alone)."""
MAX_ITEMS = 3
"""The old bar's most memories injected into one prompt (the decision's is in its model file)."""
DEFAULT_BUDGET_TOKENS = 300
"""Token budget of the injected block (characters / 4)."""
MAX_QUERY_CHARS = 2000
"""The server's query limit: longer prompts are searched by their beginning."""
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Bar:
    """The absolute bar recall used before the fitted decision, kept as the benchmark's baseline."""

    min_similarity: float = MIN_SIMILARITY
    min_coverage: float | None = MIN_COVERAGE
    max_items: int = MAX_ITEMS

    def relevant(self, hit: Hit) -> bool:
        """True when `hit` clears the bar."""
        similar = bool(hit.vector_rank) and 1.0 - hit.vector_distance >= self.min_similarity
        return similar or (self.min_coverage is not None and bool(hit.vector_rank) and bool(hit.keyword_rank)
                           and hit.keyword_coverage >= self.min_coverage)

    def select(self, hits: Sequence[Hit]) -> list[Hit]:
        """The hits that clear the bar, best first, at most `max_items`."""
        return [h for h in hits if self.relevant(h)][: self.max_items]


@dataclass(frozen=True)
class Recalled:
    """What recall found: the text to inject ("" for nothing), the memories in it (id -> version), and every
    candidate as the decision judged it (empty when the prompt was not searched)."""

    text: str
    ids: tuple[str, ...] = ()
    offline: bool = False
    versions: Mapping[str, int] | None = None
    candidates: tuple[Candidate, ...] = ()
    searched: bool = False


def shipped_decision() -> Decision:
    """The decision fitted and checked in (`mnemosync.kernel.recall_decision.shipped`)."""
    return shipped()


def recall(client, prompt: str, scopes: Sequence[str], *, budget_tokens: int = DEFAULT_BUDGET_TOKENS,
           decision: Decision | None = None, seen: Mapping[str, int] | None = None,
           root: str | None = None) -> Recalled:
    """Searches `scopes` for `prompt` and renders the memories the decision keeps (see the module docstring).

    Args:
        client: The warm process's `AgentClient`.
        prompt: The user's prompt.
        scopes: The session's home scopes.
        budget_tokens: Upper bound of the rendered block.
        decision: What is injected (the shipped one by default).
        seen: Memory id -> version this session was already shown.
        root: The session's working directory (the hook's `cwd`): cited files are checked against it.

    Raises:
        CodedError: the search failed (the caller answers with nothing).
    """
    if not worth_searching(prompt):
        return Recalled("")
    decision = decision or shipped_decision()
    query = prompt.strip()[:MAX_QUERY_CHARS]
    live = client.live
    if live is not None and not live.connected.is_set():  # the server is away: do not wait for a call to time out
        outcome = client.local_search(query, vector=client.embedder.embed(query), limit=SEARCH_LIMIT,
                                      filter=Filter(scopes=tuple(scopes)), mode="hybrid")
    else:
        outcome = client.search(query, limit=SEARCH_LIMIT, scopes=scopes)
    candidates = tuple(decision.judge(query, outcome.hits, seen=seen))
    chosen = [c.hit for c in candidates if c.injected]
    text, shown = (render(chosen, budget_tokens=budget_tokens, offline=outcome.offline, root=root,
                          conflict_of=client.local.conflict) if chosen else ("", []))
    return Recalled(text, tuple(h.memory.id for h in shown), outcome.offline,
                    {h.memory.id: h.memory.version for h in shown}, candidates, True)


def render(hits: Sequence[Hit], *, budget_tokens: int, offline: bool = False, root: str | None = None,
           conflict_of: Callable[[int], Conflict | None] | None = None) -> tuple[str, list[Hit]]:
    """The block the model reads, and the hits that fit in `budget_tokens` (each cut to share the room).

    A memory whose cited files changed under `root` (a stat and a hash of each small cited file), or whose last
    verification found them changed, is marked "may be stale: ..." (`source_refs.staleness_note`). A memory with an
    open conflict shows the conflict's sides instead of its text ("open conflict #32: bob: «…» vs alice: «…»",
    `conflict_of` finding the conflict by id), so one side is not injected as settled fact. Every field is one
    line (`mnemosync.kernel.one_line`), so only this function starts the block's lines."""
    head = ("Shared memory (mnemosync) relevant to this prompt; ids are 8-character prefixes that get and update "
            "accept" + ("; the server is unreachable, so these come from this agent's cache" if offline else "")
            + ":")
    room = budget_tokens * CHARS_PER_TOKEN - len(head)
    lines, shown = [], []
    for i, hit in enumerate(hits):
        m = hit.memory
        day = time.strftime("%Y-%m-%d", time.gmtime(m.updated_at_ms / 1000))
        warning = f" ({caveat(m)})" if caveat(m) else ""
        note = source_refs.staleness_note(list(m.sources), m.verification, judged_root(root, m.sources),
                                          m.updated_at_ms) if m.sources else ""
        label = (f"- [{m.id[:8]} v{m.version}, {one_line(m.type, 40)}, {one_line(text_author(m), 80)}, "
                 f"authority {authority(m)}{warning}, {day}{'; ' + note if note else ''}] ")
        share = room // (len(hits) - i) - len(label) - 1
        if share < 40:
            break
        content = m.content
        if m.open_conflicts:
            disputed = conflict_of(m.open_conflicts[0]) if conflict_of is not None else None
            content = (conflicts.summary(disputed) if disputed is not None
                       else f"open conflict #{m.open_conflicts[0]} (check_conflicts shows its sides): {content}")
        elif m.procedure:  # its steps are what a procedure is recalled for
            content += " — " + procedures.inline(m.procedure)
        line = label + one_line(content, share, fold=True)
        lines.append(line)
        shown.append(hit)
        room -= len(line) + 1
    return ("\n".join([head, *lines]) if lines else ""), shown
