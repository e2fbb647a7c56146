"""Claude Code session transcripts (JSONL) read as episodes: what the user asked or decided, and what came of it.

A transcript (`~/.claude/projects/<project>/<session-id>.jsonl`; a hook's
`transcript_path`) has one JSON object per line. Its format is Claude Code's
own and changes between versions, so this reader keeps to what has been
stable and skips whatever it does not know:

* `type: "user"` lines whose `message.content` is text (a string, or `text`
  blocks) start a turn: the user's instruction, decision or correction. User
  lines that only carry `tool_result` blocks, meta lines (`isMeta`), a
  compaction's summary (`isCompactSummary`), sub-agent lines (`isSidechain`),
  slash-command and local-command echoes and interruption notes are noise.
* `type: "assistant"` lines add their `text` blocks to the current turn; the
  last text of the turn is the assistant's conclusion. `thinking` and
  `tool_use` blocks are dropped.
* Everything else (`system`, `summary`, `file-history-snapshot`, …) is skipped,
  as are lines that are not JSON.

Each turn becomes one `Episode` (user text and conclusion, each cut to
`MAX_PART_CHARS`), with the byte offset where its first line starts, so a
reader can stop before a turn and continue there later (`mnemosync.agent.ingest`).
Hook-injected blocks (`<system-reminder>…`) are removed from the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_PART_CHARS = 1500
"""Most characters kept of the user's text and of the conclusion."""

_INJECTED = re.compile(r"<(system-reminder|local-command-\w+|command-\w+|user-prompt-submit-hook)>.*?</\1>",
                       re.DOTALL)
_NOISE = re.compile(r"^\s*(\[Request interrupted by user[^\]]*\]|Caveat: The messages below were generated)",
                    re.IGNORECASE)
_CORRECTION = re.compile(r"^\s*(no\b|nope\b|wrong\b|actually\b|that'?s not\b|not quite\b|don'?t\b|do not\b|stop\b|"
                         r"instead\b|undo\b|revert\b)", re.IGNORECASE)
_DECISION = re.compile(r"\b(let'?s|we'?ll|we will|go with|decided|decision|we agreed|from now on|always|never)\b",
                       re.IGNORECASE)


@dataclass
class Episode:
    """One turn of a session: what the user said and the assistant's conclusion.

    Attributes:
        offset: Byte offset of the turn's first line in the transcript.
        end: Byte offset just after the turn's last line.
        line_id: The `uuid` of the turn's first line, when the transcript has one.
        timestamp: The turn's ISO 8601 time, when the transcript has one.
        session_id: The transcript's `sessionId`, when it has one.
        user: The user's text (cleaned, cut to `MAX_PART_CHARS`).
        conclusion: The assistant's last text of the turn ("" when it said nothing).
        kinds: "correction", "decision" or "instruction" (what the user's text reads as).
    """

    offset: int
    end: int
    line_id: str = ""
    timestamp: str = ""
    session_id: str = ""
    user: str = ""
    conclusion: str = ""
    kinds: tuple[str, ...] = field(default_factory=tuple)


def clean(text: str) -> str:
    """Text without hook-injected blocks, with runs of blank lines squeezed."""
    text = _INJECTED.sub("", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _cut(text: str, limit: int = MAX_PART_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _texts(content) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
                and isinstance(b.get("text"), str)]
    return []


def _user_text(record: dict) -> str | None:
    """The user's own words on this line, or None when the line is not a user turn."""
    if record.get("isMeta") or record.get("isCompactSummary") or record.get("isSidechain"):
        return None
    message = record.get("message")
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    text = clean("\n".join(_texts(content)))
    if not text or _NOISE.match(text):
        return None
    return text


def kinds_of(text: str) -> tuple[str, ...]:
    """What the user's text reads as: a correction, a decision, or an instruction."""
    if _CORRECTION.match(text):
        return ("correction",)
    if _DECISION.search(text):
        return ("decision",)
    return ("instruction",)


def lines(path: Path, start: int = 0, skipped: list[int] | None = None) -> Iterator[tuple[int, int, dict]]:
    """(offset, end, record) of every complete JSON-object line from byte `start` (a last line without its
    newline is still being written and is left out). A line that cannot be decoded (not JSON, or nested deeper
    than the decoder goes) is passed over, its offset added to `skipped`: one bad line never stops the rest."""
    with open(path, "rb") as f:
        f.seek(start)
        offset = start
        for raw in f:
            end = offset + len(raw)
            if raw.endswith(b"\n"):
                try:
                    record = json.loads(raw)
                except (ValueError, RecursionError):
                    record = None
                    if skipped is not None:
                        skipped.append(offset)
                if isinstance(record, dict):
                    yield offset, end, record
            offset = end


def episodes(path: Path, start: int = 0, skipped: list[int] | None = None) -> Iterator[Episode]:
    """The turns of the transcript from byte `start`, in order (see the module docstring); the offsets of lines
    that could not be read go into `skipped`."""
    current: Episode | None = None
    for offset, end, record in lines(path, start, skipped):
        kind = record.get("type")
        if kind == "user":
            text = _user_text(record)
            if text is not None:
                if current is not None:
                    yield current
                current = Episode(offset=offset, end=end, line_id=str(record.get("uuid") or ""),
                                  timestamp=str(record.get("timestamp") or ""),
                                  session_id=str(record.get("sessionId") or ""), user=_cut(text),
                                  kinds=kinds_of(text))
                continue
        if current is None:
            continue
        current.end = end
        if kind == "assistant" and not record.get("isSidechain"):
            message = record.get("message")
            said = clean("\n".join(_texts(message.get("content") if isinstance(message, dict) else None)))
            if said:
                current.conclusion = _cut(said)
    if current is not None:
        yield current
