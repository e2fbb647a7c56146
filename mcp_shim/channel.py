"""Live news pushed into the session as it happens: Claude Code's `claude/channel` (opt-in, experimental).

Without it, other agents' writes reach the model as `news` on its next tool
result (`mnemosync.shim.session`). With `--channel` (`MNEMOSYNC_CHANNEL=1`), the
shim also declares the experimental `claude/channel` capability and sends
`notifications/claude/channel` (params `content`, a string, and `meta`,
string to string) when another session's write in this session's scopes
arrives on the live stream, or when an arriving entry opens a conflict.
Claude Code shows it to the model only when started with channels enabled
(a development flag and a claude.ai login); otherwise it is dropped, and the
tool-result news still carries everything.

Compact and rate-limited: at most one push per `interval` seconds; what
arrives in between is gathered into the next push, at most `MAX_ITEMS` lines
(each cut to `SNIPPET` characters) and a count of the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final

import anyio
import anyio.to_thread
from pydantic import BaseModel

from mnemosync.kernel.one_line import one_line, one_lines
from mnemosync.shim.session import Session

log = logging.getLogger(__name__)

METHOD: Final = "notifications/claude/channel"
CAPABILITY = "claude/channel"
MAX_ITEMS = 5
SNIPPET = 140
POLL_SECONDS = 0.5


class ChannelParams(BaseModel):
    """The notification's params, as Claude Code reads them (`notifications/claude/channel` is not in the MCP
    schema)."""

    content: str
    meta: dict[str, str] | None = None


class ChannelNews:
    """Gathers other agents' entries from the live stream and pushes them, rate-limited (see the module docstring).

    Args:
        session: The shim session (its client, scopes and news summary).
        interval: Least seconds between two pushes.
        clock: Seconds, monotonic (tests move it).
    """

    def __init__(self, session: Session, *, interval: float = 30.0, clock=time.monotonic):
        self.session = session
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: list = []
        self._last_push: float | None = None
        self.peer = None
        """The `mnemosync.shim.protocol.McpServer` pushes go out through (`build_server` sets it)."""
        self.pushed = 0

    def record(self, entries: list) -> None:
        """Takes entries from the live-update thread (`AgentClient.on_news`)."""
        with self._lock:
            self._pending.extend(entries)

    def due(self) -> bool:
        """True when something waits and the last push is at least `interval` ago."""
        with self._lock:
            waiting = bool(self._pending)
        return waiting and (self._last_push is None or self._clock() - self._last_push >= self.interval)

    def take(self) -> str | None:
        """The text of the next push from what waits (None when none of it is news for this session)."""
        with self._lock:
            entries, self._pending = self._pending, []
        return render(self.session, entries)

    async def run(self) -> None:
        """Pushes what is due until cancelled."""
        while True:
            await anyio.sleep(POLL_SECONDS)
            if self.peer is None or not self.peer.initialized or not self.due():
                continue
            text = await anyio.to_thread.run_sync(self.take)
            self._last_push = self._clock()
            if text is None:
                continue
            try:
                await self.peer.notify(METHOD, ChannelParams(content=text, meta={"source": "mnemosync"}).model_dump())
                self.pushed += 1
            except Exception as exc:  # noqa: BLE001 - a client that went away must not end the session
                log.info("channel push failed: %s", exc)


def render(session: Session, entries: list) -> str | None:
    """The push text for `entries`: news in the session's scopes and conflicts they opened, or None."""
    news = session.summarize(entries, since="")
    lines = []
    for entry in entries:
        conflict = session.client.local.conflict(entry.seq)
        if conflict is None or conflict.resolved or conflict.scope not in session.home_scopes:
            continue
        agents = one_lines(sorted({r.agent_id for r in conflict.revisions}), 80)
        lines.append(f"- new {one_line(conflict.kind, 20)} conflict #{conflict.id} on {conflict.memory_id[:8]} "
                     f"({agents}): review it with check_conflicts")
    if news is not None:
        for item in news.items:
            content = one_line(item.content or "", SNIPPET + 1, fold=True)  # a line of its own, never more
            lines.append(f"- {item.memory_id[:8]} v{item.version} {item.op} {one_line(item.type or '', 40)} by "
                         f"{one_line(item.author, 80)}: {content}".replace("  ", " "))
    if not lines:
        return None
    head = news.summary if news is not None else "Shared memory changed"
    more = len(lines) - MAX_ITEMS
    lists = "search or list_recent" if "list_recent" in session.tools else "search"
    shown = lines[:MAX_ITEMS] + ([f"- and {more} more ({lists})"] if more > 0 else [])
    return "\n".join([f"mnemosync, live: {head}.", *shown])
