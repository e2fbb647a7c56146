"""Topic clusters with centroids and surprise scores (seed 002's REORGANIZE phase and Titans-style surprise).

A pure function of the replicated state (live memories, their vectors and
tags), computed on read by the server (`ListTopics`) and by every agent's
cache (`AgentClient.list_topics`, offline) with this same code, so both give
the same answer for the same state and nothing has to be written.

Clustering, per scope, deterministic (no random start, no iteration to
convergence): memories are taken in creation order (created_at_ms, then id)
in blocks of BLOCK. Each memory joins the nearest topic that existed before
its block when its cosine to that topic's centroid is at least
TOPIC_THRESHOLD; the others are clustered among themselves in order, a memory
starting a new topic when no topic started in its block is that close. After
each block every centroid becomes the normalised mean of its members (seed
002: "centroids are L2-normalized after recomputation"). A topic's id is the
id of the memory that started it, so it stays the same as memories join.

Surprise (seed 002): 1 - the highest cosine between a memory and any
centroid, its own topic's centroid taken without it; 0.5 when there is no
other memory to compare with (the seed's neutral default).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mnemosync.kernel import secrets_scan

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

TOPIC_THRESHOLD = 0.5
"""Cosine to a topic's centroid at which a memory joins it (the auto-link threshold: a memory joins a topic it would
be linked to)."""
MAX_LIMIT = 200
"""Topics one call returns at most."""
BLOCK = 256
NEUTRAL_SURPRISE = 0.5
LABEL_TAGS = 3
IGNORED_TAG_PREFIXES = ("session:",)
"""Tags that name where a memory came from rather than what it is about."""


@dataclass(frozen=True)
class Topic:
    """One cluster of memories in a scope.

    Attributes:
        id: The id of the memory that started it.
        label: Its most common tags (or, without tags, the start of its most central memory), masked like every
            text on the way out (`secrets_scan.mask`): a tag stored before the gate knew a credential's shape.
        representative_id: The member closest to the centroid.
        cohesion: The members' mean cosine to the centroid.
        newest_ms: The newest member's creation time.
    """

    id: str
    scope: str
    label: str
    size: int
    representative_id: str
    cohesion: float
    newest_ms: int


@dataclass(frozen=True)
class Surprise:
    """How novel one memory is against the topics (1 - its highest cosine to a centroid)."""

    memory_id: str
    topic_id: str
    surprise: float
    created_at_ms: int


@dataclass(frozen=True)
class Topics:
    """Topics, largest first, and the memories created since the asked time, most surprising first."""

    topics: list[Topic]
    novel: list[Surprise]


def _rows(conn: Conn, scopes: Sequence[str]) -> list[tuple[Any, ...]]:
    where = "m.archived = 0"
    params: list[str] = []
    if scopes:
        where += f" AND m.scope IN ({', '.join('?' for _ in scopes)})"
        params += list(scopes)
    rows: list[tuple[Any, ...]] = conn.execute(
        "SELECT m.id, m.scope, m.tags, m.content, m.created_at_ms, v.embedding FROM memories m "
        f"JOIN memory_vec v ON v.rowid = m.num WHERE {where} ORDER BY m.scope, m.created_at_ms, m.id",
        params).fetchall()
    return rows


def compute(conn: Conn, *, scopes: Sequence[str] = (), limit: int = 20, novel_since_ms: int = 0,
            novel_limit: int = 10) -> Topics:
    """The topics of the live memories in `scopes` (all when empty), largest first, at most `limit`; and the
    `novel_limit` most surprising memories created at or after `novel_since_ms` (none when it is 0)."""
    if not _has_vectors(conn):
        return Topics([], [])
    rows = _rows(conn, scopes)
    topics: list[Topic] = []
    novel: list[Surprise] = []
    start = 0
    while start < len(rows):
        end = start
        while end < len(rows) and rows[end][1] == rows[start][1]:
            end += 1
        found, surprises = _scope(rows[start:end], novel_since_ms)
        topics += found
        novel += surprises
        start = end
    topics.sort(key=lambda t: (-t.size, t.scope, t.id))
    novel.sort(key=lambda s: (-s.surprise, s.memory_id))
    return Topics(topics[:limit], novel[:novel_limit] if novel_since_ms else [])


def _has_vectors(conn: Conn) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_vec'").fetchone() is not None


def _scope(rows: list[tuple[Any, ...]], novel_since_ms: int) -> tuple[list[Topic], list[Surprise]]:
    x = np.stack([np.frombuffer(r[5], dtype="<f4") for r in rows]).astype(np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms == 0, 1.0, norms)
    n = len(rows)
    assign = np.empty(n, dtype=np.int64)
    sums = np.zeros((0, x.shape[1]))
    counts: list[int] = []
    for b in range(0, n, BLOCK):
        block = x[b:b + BLOCK]
        known = len(counts)
        if known:
            centroids = _normalised(sums)
            sims = block @ centroids.T
            best = sims.argmax(axis=1)
            joined = sims[np.arange(len(block)), best] >= TOPIC_THRESHOLD
        else:
            best = np.zeros(len(block), dtype=np.int64)
            joined = np.zeros(len(block), dtype=bool)
        leaders = np.empty((len(block), x.shape[1]))
        started = 0
        for i in np.flatnonzero(~joined).tolist():
            if started:
                s = leaders[:started] @ block[i]
                j = int(s.argmax())
                if s[j] >= TOPIC_THRESHOLD:
                    assign[b + i] = known + j
                    continue
            leaders[started] = block[i]
            assign[b + i] = known + started
            started += 1
        assign[b:b + len(block)][joined] = best[joined]
        total = known + started
        sums = np.vstack([sums, np.zeros((started, x.shape[1]))])
        np.add.at(sums, assign[b:b + len(block)], block)
        counts += [0] * (total - known)
        for k in assign[b:b + len(block)]:
            counts[k] += 1
    centroids = _normalised(sums)
    own = (x * centroids[assign]).sum(axis=1)
    topics = []
    members_of: dict[int, list[int]] = {}
    for i, k in enumerate(assign):
        members_of.setdefault(int(k), []).append(i)
    for members in members_of.values():
        central = max(members, key=lambda i: (own[i], -i))
        tags = Counter(t for i in members for t in json.loads(rows[i][2])
                       if not t.startswith(IGNORED_TAG_PREFIXES))
        label = ", ".join(t for t, _ in sorted(tags.items(), key=lambda kv: (-kv[1], kv[0]))[:LABEL_TAGS])
        topics.append(Topic(
            id=rows[members[0]][0], scope=rows[0][1],
            label=secrets_scan.mask(label or " ".join(rows[central][3].split())[:80]),
            size=len(members), representative_id=rows[central][0], cohesion=round(float(own[members].mean()), 4),
            newest_ms=max(rows[i][4] for i in members)))
    novel = []
    if novel_since_ms:
        recent = [i for i in range(n) if rows[i][4] >= novel_since_ms]
        sims = x[recent] @ centroids.T if recent else np.zeros((0, 0))
        for row, i in enumerate(recent):
            k = int(assign[i])
            best = [float(s) for j, s in enumerate(sims[row]) if j != k]
            rest = sums[k] - x[i]
            if counts[k] > 1 and np.linalg.norm(rest):
                best.append(float(rest @ x[i] / np.linalg.norm(rest)))
            surprise = 1.0 - max(best) if best else NEUTRAL_SURPRISE
            novel.append(Surprise(rows[i][0], rows[members_of[k][0]][0], round(surprise, 4), rows[i][4]))
    return topics, novel


def _normalised(sums: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return sums / np.where(norms == 0, 1.0, norms)
