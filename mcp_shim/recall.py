"""Recall on every prompt: the few memories relevant enough to a prompt, within a token budget, or nothing.

The UserPromptSubmit hook (`mnemosync.shim.prompt_hook`) sends the prompt to a warm
process, which calls `recall`: one hybrid search (the server; the local cache
when the server is unreachable, at once when the live stream already says so),
then `Bar` keeps only hits that clear a bar, so an unrelated prompt gets
nothing rather than the nearest noise.

The bar, tuned on the dev split of the labelled code-assistant set and
reported on its test split (`python -m ops.bench --only recall`, see
`ops/bench/bench_recall.py`): a hit is relevant when its cosine similarity
to the prompt is at least `MIN_SIMILARITY`, or when both search channels find
it and it holds at least `MIN_COVERAGE` of the prompt's rare words (the
IDF-weighted keyword coverage of the score fusion: identifiers, error codes,
file names). Plain rank fusion is no bar since the keyword channel searches
any of the prompt's words: its top hit always ranks high in both channels.
At most `MAX_ITEMS` are shown. Test split (dev in
brackets): precision 0.86 (0.91), recall 0.54 (0.62); a question whose answer
is not stored still gets something in 10% (7%) of cases, a question about
something the store knows nothing of in 0% (2%).

What the model reads: a short block with each memory's 8-character id
prefix and version (`get` and `update` take them), type, author and date,
and its content cut to fit `budget_tokens` (4 characters a token, as
`mnemosync.shim.core_memories` counts).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mnemosync.kernel import source_refs
from mnemosync.kernel.search import Filter, Hit

MIN_SIMILARITY = 0.65
"""Cosine similarity (1 - vector distance) at which a hit counts as relevant on its own."""
MIN_COVERAGE: float | None = 0.7
"""Keyword coverage at which a hit found by both channels counts as relevant (None: similarity alone)."""
MAX_ITEMS = 3
"""Most memories injected into one prompt."""
DEFAULT_BUDGET_TOKENS = 300
"""Token budget of the injected block (characters / 4)."""
SEARCH_LIMIT = 10
"""Hits fetched before the bar is applied."""
MIN_PROMPT_CHARS = 12
"""Shorter prompts ("ok", "go on") are not searched."""
MAX_QUERY_CHARS = 2000
"""The server's query limit: longer prompts are searched by their beginning."""
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Bar:
    """What makes a hit relevant enough to inject (see the module docstring)."""

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
    """What recall found: the text to inject ("" for nothing) and the memory ids in it."""

    text: str
    ids: tuple[str, ...] = ()
    offline: bool = False


def worth_searching(prompt: str) -> bool:
    """False for prompts too short to mean anything, and for slash commands."""
    text = prompt.strip()
    return len(text) >= MIN_PROMPT_CHARS and not text.startswith("/")


def recall(client, prompt: str, scopes: Sequence[str], *, budget_tokens: int = DEFAULT_BUDGET_TOKENS,
           bar: Bar = Bar(), root: str | None = None) -> Recalled:  # noqa: B008 - immutable
    """Searches `scopes` for `prompt` and renders the relevant memories (see the module docstring).

    Args:
        client: The warm process's `AgentClient`.
        prompt: The user's prompt.
        scopes: The session's home scopes.
        budget_tokens: Upper bound of the rendered block.
        bar: What counts as relevant.
        root: The session's working directory (the hook's `cwd`): cited files are checked against it.

    Raises:
        CodedError: the search failed (the caller answers with nothing).
    """
    if not worth_searching(prompt):
        return Recalled("")
    query = prompt.strip()[:MAX_QUERY_CHARS]
    live = client.live
    if live is not None and not live.connected.is_set():  # the server is away: do not wait for a call to time out
        outcome = client.local_search(query, vector=client.embedder.embed(query), limit=SEARCH_LIMIT,
                                      filter=Filter(scopes=tuple(scopes)), mode="hybrid")
    else:
        outcome = client.search(query, limit=SEARCH_LIMIT, scopes=scopes)
    chosen = bar.select(outcome.hits)
    if not chosen:
        return Recalled("", offline=outcome.offline)
    text, shown = render(chosen, budget_tokens=budget_tokens, offline=outcome.offline, root=root)
    return Recalled(text, tuple(h.memory.id for h in shown), outcome.offline)


def render(hits: Sequence[Hit], *, budget_tokens: int, offline: bool = False,
           root: str | None = None) -> tuple[str, list[Hit]]:
    """The block the model reads, and the hits that fit in `budget_tokens` (each cut to share the room).

    A memory whose cited files changed under `root` (a stat and a hash of each small cited file), or whose last
    verification found them changed, is marked "may be stale: ..." (`source_refs.staleness_note`)."""
    head = ("Shared memory (mnemosync) relevant to this prompt; ids are 8-character prefixes that get and update "
            "accept" + ("; the server is unreachable, so these come from this agent's cache" if offline else "")
            + ":")
    room = budget_tokens * CHARS_PER_TOKEN - len(head)
    lines, shown = [], []
    for i, hit in enumerate(hits):
        m = hit.memory
        day = time.strftime("%Y-%m-%d", time.gmtime(m.updated_at_ms / 1000))
        note = source_refs.staleness_note(list(m.sources), m.verification, Path(root) if root else None,
                                          m.updated_at_ms) if m.sources else ""
        label = f"- [{m.id[:8]} v{m.version}, {m.type}, {m.author_agent}, {day}{'; ' + note if note else ''}] "
        share = room // (len(hits) - i) - len(label) - 1
        if share < 40:
            break
        content = " ".join(m.content.split())
        if len(content) > share:
            content = content[: share - 1].rstrip() + "…"
        line = label + content
        lines.append(line)
        shown.append(hit)
        room -= len(line) + 1
    return ("\n".join([head, *lines]) if lines else ""), shown
