"""The reflection summary (seed 004's REFLECTION.md, in seed 002's structure), read from the projections.

Computed from what every replica folds (memories, vectors, links, the
lifecycle projection), so an agent builds it from its cache, offline, and
gets what the server would: themes (the topic clusters of
`mnemosync.kernel.topics`), the most used memories (the uses the last decay sweep
recorded), recent insights (the most surprising memories of the last
`recent_days`) and what consolidation has done so far (the system agent's
links in place by relation, `supersedes` ones being merges; the memories it
archived, by decay or merge; the live ones it last changed, which only a
promotion does; the time of the last sweep).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mnemosync.kernel import topics
from mnemosync.kernel.entry import SYSTEM_AGENT
from mnemosync.kernel.lifecycle import DAY_MS
from mnemosync.kernel.wording import counted

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

PREVIEW = 100
"""Characters of a memory's content shown in the summary."""


@dataclass(frozen=True)
class Item:
    """One memory named in the summary, with the number that put it there."""

    memory_id: str
    preview: str
    value: float


@dataclass(frozen=True)
class Theme:
    label: str
    scope: str
    size: int
    example: str


@dataclass
class Reflection:
    """The summary's sections (see the module docstring)."""

    as_of_ms: int
    live: int
    themes: list[Theme] = field(default_factory=list)
    most_accessed: list[Item] = field(default_factory=list)
    recent_insights: list[Item] = field(default_factory=list)
    consolidation: dict[str, int] = field(default_factory=dict)


def _where(scopes: Sequence[str], alias: str = "m") -> tuple[str, list[str]]:
    if not scopes:
        return "", []
    return f" AND {alias}.scope IN ({', '.join('?' for _ in scopes)})", list(scopes)


def _preview(content: str) -> str:
    text = " ".join(content.split())
    return text if len(text) <= PREVIEW else text[:PREVIEW - 1] + "…"


def compute(conn: Conn, *, now_ms: int, scopes: Sequence[str] = (), recent_days: float = 7.0, top: int = 10,
            mask: Callable[[str], str] = lambda text: text) -> Reflection:
    """The reflection of the live memories in `scopes` (all when empty) as of `now_ms`.

    Args:
        mask: Applied to every memory text shown (an agent masks secrets).
    """
    where, params = _where(scopes)
    contents = {}

    def content(memory_id: str) -> str:
        if memory_id not in contents:
            row = conn.execute("SELECT content FROM memories WHERE id = ?", (memory_id,)).fetchone()
            contents[memory_id] = _preview(mask(row[0])) if row else ""
        return contents[memory_id]

    live = conn.execute(f"SELECT count(*) FROM memories m WHERE m.archived = 0{where}", params).fetchone()[0]
    found = topics.compute(conn, scopes=scopes, limit=top, novel_since_ms=max(1, now_ms - int(recent_days * DAY_MS)),
                           novel_limit=top)
    r = Reflection(as_of_ms=now_ms, live=live)
    r.themes = [Theme(t.label, t.scope, t.size, content(t.representative_id)) for t in found.topics]
    r.most_accessed = [Item(memory_id, content(memory_id), uses) for memory_id, uses in conn.execute(
        "SELECT l.memory_id, l.uses FROM memory_lifecycle l JOIN memories m ON m.id = l.memory_id "
        f"WHERE m.archived = 0 AND l.uses > 0{where} ORDER BY l.uses DESC, l.memory_id LIMIT ?", (*params, top))]
    r.recent_insights = [Item(n.memory_id, content(n.memory_id), n.surprise) for n in found.novel]
    for relation, count in conn.execute(
            "SELECT l.relation, count(*) FROM links l JOIN memories m ON m.id = l.memory_id "
            f"WHERE l.author_agent = ?{where} GROUP BY l.relation ORDER BY l.relation", (SYSTEM_AGENT, *params)):
        r.consolidation[f"{relation} links"] = count
    r.consolidation["archived by the system"] = conn.execute(
        f"SELECT count(*) FROM memories m WHERE m.archived = 1 AND m.updated_by = ?{where}",
        (SYSTEM_AGENT, *params)).fetchone()[0]
    r.consolidation["promoted by the system"] = conn.execute(
        f"SELECT count(*) FROM memories m WHERE m.archived = 0 AND m.updated_by = ?{where}",
        (SYSTEM_AGENT, *params)).fetchone()[0]
    last = conn.execute("SELECT max(as_of_ms) FROM memory_lifecycle").fetchone()[0]
    r.consolidation["last decay sweep ms"] = last or 0
    return r


def markdown(r: Reflection, time_text: Callable[[int], str]) -> str:
    """The summary as REFLECTION.md (seed 004's format); `time_text` renders ms since the epoch."""
    lines = ["# Reflection Summary (auto-generated)", "",
             f"> As of {time_text(r.as_of_ms)} | {counted(r.live, 'live memory', 'live memories')}", "", "## Themes",
             ""]
    lines += [f"- **{t.label}** ({t.scope}): {counted(t.size, 'memory')} (\"{t.example}\")" for t in r.themes] or [
        "- none yet"]
    lines += ["", "## Most Accessed", ""]
    lines += [f"{i}. {m.preview} - {counted(int(m.value), 'use')} (`{m.memory_id}`)"
              for i, m in enumerate(r.most_accessed, 1)] or ["- no recorded uses yet (the decay sweep records them)"]
    lines += ["", "## Recent Insights", "", "The most surprising memories of the last days (1 - cosine to the "
              "nearest topic centroid):", ""]
    lines += [f"- {m.preview} - surprise {m.value:.2f} (`{m.memory_id}`)" for m in r.recent_insights] or ["- none"]
    lines += ["", "## Consolidation", ""]
    for key, value in r.consolidation.items():
        if key == "last decay sweep ms":
            lines.append(f"- last decay sweep: {time_text(value) if value else 'never'}")
        else:
            lines.append(f"- {key}: {value}")
    return "\n".join(lines) + "\n"
