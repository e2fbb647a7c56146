"""One shim session: the AgentClient, its boot, and what every tool result carries.

Tool calls are serialised through one lock (they arrive on worker threads and
each takes milliseconds), then `run` turns the outcome into a tool result:
agent-client errors become tool errors (`mnemosync.shim.errors`), and successful
results gain the offline note and the news of other agents' writes that
arrived since the previous call (Claude Code drops `resources/updated` and
logging notifications, so a result is the only reliable way to tell the model).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from mnemosync.agent.client import NEWS_KEPT
from mnemosync.agent.shown import Reader, session_reader
from mnemosync.kernel import secrets_scan
from mnemosync.kernel.errors import CodedError, ModelUnusable
from mnemosync.kernel.session_scopes import home_scopes
from mnemosync.kernel.wording import counted
from mnemosync.shim.config import ALL_TOOLS
from mnemosync.shim.errors import ShimError, explain
from mnemosync.shim.results import Envelope, News, NewsItem, error_result, shown_versions, tool_result
from mnemosync.shim.tool_registry import ToolResult

if TYPE_CHECKING:
    from mnemosync.kernel.entry import Entry

log = logging.getLogger(__name__)

NEWS_ITEMS = 5
NEWS_SNIPPET = 160
WARM_UP = "mnemosync warm-up pass"


def boot(client) -> str | None:
    """agent_sync at start (send queued writes, catch up), then live updates; loads the model and runs its first
    pass (about twice as slow as the next ones), so the first tool call pays for neither. Returns what failed, as
    a note for tool results, or None.

    Never raises for an unreachable server (the client starts offline and reconnects). Logs how long each part
    took (INFO).
    """
    note = None
    started = time.perf_counter()
    try:
        summary = client.start()
        if summary is not None:
            log.info("boot sync applied %d entries; offset %d of %d", summary.applied, summary.offset, summary.head)
    except CodedError as exc:
        log.error("boot sync failed: %s", exc)
        note = f"boot sync failed, answers come from the local cache: {exc}"
    synced = time.perf_counter()
    try:
        client.embedder.embed(WARM_UP)
    except ModelUnusable as exc:
        log.error("%s", exc)
        note = str(exc)
    loaded = time.perf_counter()
    log.info("boot took %.1f ms: sync %.1f ms, model load and first pass %.1f ms", (loaded - started) * 1000,
             (synced - started) * 1000, (loaded - synced) * 1000)
    return note


class Session:
    """The state one shim process keeps for its Claude Code session.

    Args:
        client: The agent client (not started; `boot` starts it).
        scope: The session's default scope for new memories and default reads.
        project_dir: The session's project (Claude Code's `CLAUDE_PROJECT_DIR`): the tree the sources a memory
            cites are relative to (None: the process's working directory).
    """

    def __init__(self, client, *, scope: str, project_dir: str | None = None, lock: threading.Lock | None = None,
                 shared: bool = False, agent_note: Callable[[], str | None] | None = None,
                 session_id: str | None = None):
        self.client = client
        self.session_id = session_id or str(uuid.uuid4())
        """Claude Code's session id when the relay knows it (its hooks record under the same one), else a new id."""
        self.scope = scope
        self.project_dir = project_dir
        self.home_scopes = home_scopes(scope)
        self.boot_note: str | None = None
        self.tools = frozenset(ALL_TOOLS)
        """The tools this session offers (`build_server` sets its set's): what its texts may send the model to."""
        self.lock = lock or threading.Lock()
        """Held while a tool call or a hook's request uses the client (one at a time)."""
        self._agent_note = agent_note
        self._heard: list | None = None
        if shared:  # several sessions share the client (`mnemosync.shim.agent_sessions`): each keeps its news
            self._heard = []
            self._heard_lock = threading.Lock()
            client.on_news(self._hear)

    def _hear(self, entries: list) -> None:
        with self._heard_lock:
            assert self._heard is not None
            self._heard.extend(entries)
            del self._heard[:-NEWS_KEPT]

    def detach(self) -> None:
        """Stops collecting news for a session that ended (the shared client goes on)."""
        self.client.off_news(self._hear)

    # -- lifecycle ---------------------------------------------------------------

    def boot(self) -> None:
        """Boots the session's own client (`boot`); a failure becomes the note on every result."""
        self.boot_note = boot(self.client)

    def close(self) -> None:
        """Stops live updates and closes the cache (acknowledging the final offset)."""
        self.client.close()

    # -- state -------------------------------------------------------------------

    @property
    def reader(self) -> Reader:
        """What this session's model was shown, and the base its writes default to (`mnemosync.agent.shown`; the
        file is opened at the first use, not while the session opens)."""
        return self.client.reader(session_reader(self.session_id))

    @property
    def live(self) -> bool:
        """True while the live update stream is connected (so the cache is current)."""
        live = self.client.live
        return bool(live is not None and live.connected.is_set())

    def resolve(self, memory_id: str) -> str:
        """A full id from an id or unique prefix (pending outbox memories included)."""
        return self.client.local.resolve_id(memory_id)

    def scopes_for(self, scopes: list[str] | None, all_scopes: bool) -> tuple[str, ...]:
        """Scopes a read covers: none (all) with all_scopes, the given ones, or the session's home scopes."""
        if all_scopes:
            return ()
        return tuple(scopes) if scopes else self.home_scopes

    def cache_note(self) -> str | None:
        """Offline note for answers read from the cache, or None while the cache is live."""
        if self.client.online and self.live:
            return None
        return (f"server unreachable: answered from this agent's local cache (synced to seq "
                f"{self.client.local.offset}); changes other agents made since then are missing")

    # -- calls -------------------------------------------------------------------

    def run(self, produce: Callable[[], Envelope], *, embed: str | None = None) -> ToolResult:
        """Runs one tool body and returns its result (or the tool error it raised), recording the memory versions
        the result shows the model (`shown_versions`, news included).

        `embed` is the text the body will embed: it is embedded first, outside the lock, so sessions sharing one
        agent embed at once (packed into one model pass, `mnemosync.agent.embeddings`) and the body finds the
        vector in the embedder's cache. A failure there is left for the body to meet and report.
        """
        if embed and embed.strip():
            try:
                self.client.embedder.embed(embed)
            except Exception:  # noqa: BLE001 - the body embeds again and reports the error as its own
                log.debug("embedding before the call failed", exc_info=True)
        with self.lock:
            try:
                out = produce()
            except (CodedError, ShimError) as exc:
                log.info("tool refused: %s", exc)
                return error_result(explain(exc, self.tools))
            except Exception as exc:  # noqa: BLE001 - a bug or a broken cache must not look like a silent crash
                log.exception("tool failed")
                return error_result(f"mnemosync failed unexpectedly ({type(exc).__name__}: {exc}). Tell the user; "
                                    "the shim's log (stderr) has the details. Retrying will likely fail the same way.")
            note = self.boot_note or (self._agent_note() if self._agent_note is not None else None)
            if note:
                out.note = f"{out.note}; {note}" if out.note else note
            out.news = self.news()
            self.saw(shown_versions(out), f"MCP {type(out).__name__.removesuffix('Out').lower() or 'tool'}")
            return tool_result(out)

    def wrote(self, result, via: str) -> None:
        """Records what a write of this session's made (`mnemosync.agent.shown.Reader.wrote`; links are not
        reads)."""
        try:
            self.reader.wrote(result, via)
        except CodedError as exc:
            log.warning("what this session wrote is not recorded: %s", exc)

    def saw(self, versions: dict[str, int], via: str) -> None:
        """Records what this session's model was shown (a failure to record is logged: the reader then writes
        blind, which its results say, and never loses an update)."""
        try:
            self.reader.saw(versions, via)
        except CodedError as exc:
            log.warning("what this session was shown is not recorded: %s", exc)

    def news(self) -> News | None:
        """Other agents' changes in this session's scopes since the previous call, or None."""
        if self._heard is None:
            return self.summarize(self.client.drain_news())
        with self._heard_lock:
            entries, self._heard = self._heard, []
        return self.summarize(entries)

    def summarize(self, entries: list[Entry], *, since: str = " since your last call") -> News | None:
        """Changelog entries by other agents as news of this session's scopes (masked, cut), or None.

        `since` follows the count in the summary line ("3 new or changed memories from other agents<since> …").
        """
        if not entries:
            return None
        latest: dict[str, Entry] = {}
        added = {e.memory_id for e in entries if e.op == "add"}
        for entry in entries:
            latest[entry.memory_id] = entry
        items, elsewhere, adds = [], 0, 0
        for entry in latest.values():
            payload = entry.payload or {}  # add carries scope, type and content; other ops may not
            memory = None if all(payload.get(k) for k in ("scope", "type", "content")) else self.client.local.memory(
                entry.memory_id)  # read only when the payload lacks something (0.3 ms a call in bench_peer)
            scope = payload.get("scope") or (memory.scope if memory else None)
            if scope is not None and scope not in self.home_scopes:
                elsewhere += 1
                continue
            content = payload.get("content") or (memory.content if memory else None)
            content = secrets_scan.mask(content) if content else content
            if content and len(content) > NEWS_SNIPPET:
                content = content[:NEWS_SNIPPET].rstrip() + "…"
            adds += entry.memory_id in added
            items.append(NewsItem(memory_id=entry.memory_id, op=entry.op, author=entry.agent_id,
                                  version=entry.version, scope=scope,
                                  type=payload.get("type") or (memory.type if memory else None), content=content))
        if not items:
            return None
        authors = sorted({i.author for i in items})
        changed = counted(len(items), "new or changed memory", "new or changed memories")
        summary = (f"{changed} from other agents{since} "
                   f"({adds} new, {len(items) - adds} changed; by {', '.join(authors)})")
        if elsewhere:
            summary += f"; {elsewhere} more in other scopes"
        shown = items[-NEWS_ITEMS:]
        more = len(items) - len(shown)
        return News(summary=summary, items=shown, more=more or None)
