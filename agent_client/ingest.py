"""Storing a session's episodes as shared memories, once each, safe to stop and run again.

`ingest_transcript` reads a Claude Code transcript as episodes
(`mnemosync.agent.transcript`) and stores each as an ephemeral (layer 4) memory
of type `episode`, tagged `episode`, `session:<id prefix>` and what the
user's text reads as (`correction`, `decision`, `instruction`), each linked
to the episode before it (a `temporal` link), so the session reads back in time order.
Corrections and decisions get importance 0.6, the rest 0.3, so the
ephemeral layer's decay archives the small talk first.

Once each, whatever happens:

* A watermark per transcript (`Watermarks`, `ingest.db` in the agent's cache
  directory) holds the byte offset after the last stored episode; a run
  starts there, so no line is read twice. It moves after each episode.
* An episode's memory id and its operations' ids are derived from the
  transcript line (its `uuid`, else the transcript and offset), so a run that
  stopped after storing an episode but before moving the watermark stores it
  again as a replay, which the server answers without writing.
* Runs of one agent take turns (`ingest.lock`), so a PreCompact and a
  SessionEnd ingestion of the same session never interleave.
* `final=False` (PreCompact: the session goes on) leaves the last turn for
  the next run, as its answer may still be coming.

Secrets never get stored: the secret detector masks credentials in the text
first (`[secret: a GitHub token]`), and an episode the intake gate still
refuses is skipped and counted; the rest of the transcript is stored. Offline,
episodes wait in the outbox like any write (`pending`).

The lifecycle work reuses this for other transcripts: `store_episodes` takes
any `Episode`s.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mnemosync.agent.errors import local_storage
from mnemosync.agent.transcript import Episode, episodes
from mnemosync.kernel import migrations, private_files, secrets_scan
from mnemosync.kernel.errors import InvalidArgument, ModelUnusable, NotFound

NAMESPACE = uuid.UUID("0f5d8a6e-51c2-4d1e-9b7a-6a6e6d6e7e31")
EPISODE_TYPE = "episode"
EPISODE_LAYER = "ephemeral"
LINK_RELATION = "temporal"
IMPORTANT_KINDS = {"correction", "decision"}


def _ingest_v1(conn) -> None:
    conn.execute(
        """CREATE TABLE transcripts (
            key TEXT PRIMARY KEY,
            path TEXT NOT NULL,
            offset INTEGER NOT NULL,
            episodes INTEGER NOT NULL DEFAULT 0,
            last_memory_id TEXT NOT NULL DEFAULT '',
            updated_at_ms INTEGER NOT NULL
        )"""
    )


def _ingest_v2(conn) -> None:
    """The captures the hooks asked for (`Watermarks.want`), kept until stored."""
    conn.execute(
        """CREATE TABLE captures (
            key TEXT PRIMARY KEY,
            path TEXT NOT NULL,
            scope TEXT NOT NULL,
            final INTEGER NOT NULL,
            requested_at_ms INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            error TEXT NOT NULL DEFAULT '',
            done_at_ms INTEGER NOT NULL DEFAULT 0
        )"""
    )


INGEST_STEPS = (_ingest_v1, _ingest_v2)


@dataclass(frozen=True)
class Capture:
    """A transcript a capture hook asked to store (PreCompact, SessionEnd), until it is stored.

    `final`: the whole transcript (the session ended), else all but its last turn. `attempts` and `error`: the
    tries that failed so far and why the last one did.
    """

    key: str
    path: str
    scope: str
    final: bool
    requested_at_ms: int
    attempts: int = 0
    error: str = ""


@dataclass(frozen=True)
class Watermark:
    """How far a transcript has been stored."""

    key: str
    offset: int = 0
    episodes: int = 0
    last_memory_id: str = ""


class Watermarks:
    """The per-transcript watermarks of one agent (`ingest.db` in its cache directory). Thread-safe.

    Args:
        path: The SQLite file; created if missing.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        private_files.private_dir(self.path.parent)
        private_files.private_file(self.path)  # 0600 before SQLite opens it, so its WAL gets the same mode
        self._lock = threading.RLock()  # taken by `local_storage` around each method
        self._open()

    @local_storage
    def _open(self) -> None:
        self._conn = migrations.open_migrated(self.path, INGEST_STEPS)

    def close(self) -> None:
        """Closes the file."""
        with self._lock:
            self._conn.close()

    @local_storage
    def get(self, key: str) -> Watermark:
        """The transcript's watermark (offset 0 when it was never read)."""
        row = self._conn.execute("SELECT offset, episodes, last_memory_id FROM transcripts WHERE key = ?",
                                 (key,)).fetchone()
        return Watermark(key, *row) if row else Watermark(key)

    @local_storage
    def advance(self, mark: Watermark, path: Path) -> None:
        """Records `mark` (durably, in its own transaction: the next run starts from it)."""
        self._conn.execute(
            "INSERT INTO transcripts (key, path, offset, episodes, last_memory_id, updated_at_ms) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET path = excluded.path, "
            "offset = excluded.offset, episodes = excluded.episodes, last_memory_id = excluded.last_memory_id, "
            "updated_at_ms = excluded.updated_at_ms",
            (mark.key, str(path), mark.offset, mark.episodes, mark.last_memory_id, int(time.time() * 1000)))


    # -- captures: what the hooks asked to store, kept until it is stored -----------------

    @local_storage
    def want(self, path: Path, scope: str, *, final: bool) -> Capture:
        """Records that `path` is to be stored in `scope` (again: a later request of the same transcript joins the
        waiting one, and a final one makes it final). A request's time is its identity (`stored` compares it), so a
        repeated request gets a strictly later one even within the same millisecond."""
        key, now = transcript_key(path), int(time.time() * 1000)
        self._conn.execute(
            "INSERT INTO captures (key, path, scope, final, requested_at_ms) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET path = excluded.path, scope = excluded.scope, requested_at_ms = "
            "max(excluded.requested_at_ms, requested_at_ms + 1), "
            "final = CASE WHEN done_at_ms = 0 THEN max(final, excluded.final) ELSE "
            "excluded.final END, done_at_ms = 0, attempts = CASE WHEN done_at_ms = 0 THEN attempts ELSE 0 END, "
            "error = CASE WHEN done_at_ms = 0 THEN error ELSE '' END",
            (key, str(path), scope, int(final), now))
        return self.waiting(key)[0]

    @local_storage
    def waiting(self, key: str = "") -> list[Capture]:
        """The captures not stored yet (only `key`'s when given), oldest request first."""
        rows = self._conn.execute(
            "SELECT key, path, scope, final, requested_at_ms, attempts, error FROM captures WHERE done_at_ms = 0 "
            "AND (? = '' OR key = ?) ORDER BY requested_at_ms", (key, key)).fetchall()
        return [Capture(k, p, sc, bool(f), at, n, e) for k, p, sc, f, at, n, e in rows]

    @local_storage
    def stored(self, capture: Capture) -> None:
        """Marks a capture stored, unless it was asked for again meanwhile (that request still waits)."""
        self._conn.execute("UPDATE captures SET done_at_ms = ?, error = '' WHERE key = ? AND requested_at_ms = ?",
                           (int(time.time() * 1000), capture.key, capture.requested_at_ms))

    @local_storage
    def failed(self, capture: Capture, error: str) -> None:
        """Counts a failed try of a capture and keeps why (it stays waiting, to be tried again)."""
        self._conn.execute("UPDATE captures SET attempts = attempts + 1, error = ? WHERE key = ?",
                           (error[:1000], capture.key))


@dataclass
class IngestReport:
    """What one ingestion run did."""

    path: str
    stored: int = 0
    already: int = 0
    pending: int = 0
    masked: int = 0
    refused: int = 0
    skipped_lines: int = 0
    offset: int = 0
    left_for_later: bool = False

    def summary(self) -> str:
        """One line for people."""
        parts = [f"{self.stored} episode{'' if self.stored == 1 else 's'} stored"]
        for count, what in ((self.already, "already stored"), (self.pending, "queued offline"),
                            (self.masked, "with secrets masked"), (self.refused, "refused by the intake gate")):
            if count:
                parts.append(f"{count} {what}")
        if self.skipped_lines:
            parts.append(f"skipped {self.skipped_lines} unreadable line{'s' * (self.skipped_lines > 1)}")
        if self.left_for_later:
            parts.append("the last turn is left for the next run")
        return f"{self.path}: {', '.join(parts)} (read to byte {self.offset})"


@contextmanager
def exclusive(cache_dir: Path) -> Iterator[None]:
    """Holds the agent's ingestion lock (waiting for a run in progress to finish)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache_dir / "ingest.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def transcript_key(path: Path) -> str:
    """The watermark key of a transcript: its absolute path."""
    return str(Path(path).resolve())


def episode_id(key: str, episode: Episode) -> str:
    """The memory id an episode is stored under (the same on every run)."""
    return str(uuid.uuid5(NAMESPACE, f"{key}#{episode.line_id or episode.offset}"))


def session_tag(session: str) -> str:
    """The tag naming an episode's session: its first 8 characters made a valid tag (lower case, no spaces), so an
    odd session id never makes every episode of a transcript a refused write."""
    return "session:" + (re.sub(r"[^a-z0-9_.-]+", "-", session[:8].lower()).strip("-") or "unknown")


def render(episode: Episode, session: str) -> str:
    """The memory content of an episode."""
    when = f", {episode.timestamp[:16].replace('T', ' ')}" if episode.timestamp else ""
    lines = [f"Session {session[:8]} episode{when} ({', '.join(episode.kinds)}):", f"User: {episode.user}"]
    if episode.conclusion:
        lines.append(f"Assistant: {episode.conclusion}")
    return "\n".join(lines)


def ingest_transcript(client, path: Path, *, watermarks: Watermarks, scope: str | None = None,
                      final: bool = True) -> IngestReport:
    """Stores the episodes of a transcript that earlier runs have not stored (see the module docstring).

    Args:
        client: A started `AgentClient`.
        path: The JSONL transcript.
        watermarks: The agent's watermarks.
        scope: Scope of the episodes (default: the client's).
        final: The transcript is complete (SessionEnd, a finished session); False leaves the last turn.

    Raises:
        FileNotFoundError: no such transcript.
        MnemosyncError: the server refused an episode for a reason other than a secret (for example the scope is
            not granted); the episodes before it are stored and the watermark says so.
    """
    path = Path(path)
    key = transcript_key(path)
    report = IngestReport(str(path))
    with exclusive(Path(watermarks.path).parent):
        mark = watermarks.get(key)
        if path.stat().st_size < mark.offset:  # rewritten from scratch: ids make a re-read harmless
            mark = Watermark(key, 0, mark.episodes, mark.last_memory_id)
        skipped: list[int] = []
        found = list(episodes(path, mark.offset, skipped))
        report.skipped_lines = len(skipped)
        if found and not final:
            found, report.left_for_later = found[:-1], True
        session = next((e.session_id for e in found if e.session_id), "") or path.stem
        store_episodes(client, found, key=key, session=session, scope=scope, watermarks=watermarks, mark=mark,
                       path=path, report=report)
        report.offset = watermarks.get(key).offset
    return report


EMBED_BATCH = 32
"""Episodes embedded together: each run of this many is embedded in packed passes before it is stored."""


def store_episodes(client, found: Iterable[Episode], *, key: str, session: str, scope: str | None,
                   watermarks: Watermarks, mark: Watermark, path: Path, report: IngestReport) -> None:
    """Stores `found` in order after `mark`, linking each to the one before and moving the watermark after each.

    The texts of each run of `EMBED_BATCH` episodes not stored yet are embedded first in packed passes (more
    than half of ingestion's time was single-text passes); each add then finds its vector in the embedder's cache
    (skipped with an embedder whose cache could not hold them).
    """
    found = list(found)
    for start in range(0, len(found), EMBED_BATCH):
        run = [(episode_id(key, e), secrets_scan.mask(render(e, session))) for e in found[start:start + EMBED_BATCH]]
        new = [masked for memory_id, masked in run
               if client.local.memory(memory_id) is None and not client.local.is_pending(memory_id)]
        try:
            if new and client.embedder.cache_size >= len(new):
                client.embedder.embed_many(new)
        except ModelUnusable:
            pass  # the add below raises it for its episode, as it did before the batch
        mark = _store_run(client, found[start:start + EMBED_BATCH], key=key, session=session, scope=scope,
                          watermarks=watermarks, mark=mark, path=path, report=report)


def _store_run(client, found: list[Episode], *, key: str, session: str, scope: str | None,
               watermarks: Watermarks, mark: Watermark, path: Path, report: IngestReport) -> Watermark:
    for episode in found:
        memory_id = episode_id(key, episode)
        content = render(episode, session)
        masked = secrets_scan.mask(content)
        linked = True
        if client.local.memory(memory_id) is not None or client.local.is_pending(memory_id):
            report.already += 1
        else:
            try:
                written = client.add(masked, scope=scope, type=EPISODE_TYPE, layer=EPISODE_LAYER,
                                     tags=["episode", session_tag(session), *episode.kinds],
                                     importance=0.6 if IMPORTANT_KINDS & set(episode.kinds) else 0.3,
                                     memory_id=memory_id, op_id=str(uuid.uuid5(NAMESPACE, memory_id + ":add")))
            except InvalidArgument as exc:
                if "intake-no-secrets" not in str(exc):
                    raise
                report.refused += 1
                mark = Watermark(key, episode.end, mark.episodes, mark.last_memory_id)
                watermarks.advance(mark, path)
                continue
            report.masked += masked != content
            report.pending += written.pending
            if written.replayed or written.deduplicated:
                report.already += 1
            else:
                report.stored += 1
            linked = not written.deduplicated  # the same text is already stored elsewhere: the chain goes on from it
            memory_id = written.memory_id
        if linked and mark.last_memory_id:
            try:  # also for an episode a stopped run stored: its link may be the part that was not sent
                client.link(memory_id, mark.last_memory_id, LINK_RELATION,
                            op_id=str(uuid.uuid5(NAMESPACE, memory_id + ":link")))
            except NotFound:
                pass  # the previous episode was forgotten meanwhile: the chain restarts here
        mark = Watermark(key, episode.end, mark.episodes + 1, memory_id)
        watermarks.advance(mark, path)
    return mark
