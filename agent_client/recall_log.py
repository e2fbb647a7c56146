"""The opt-in recall log: `recall-log.jsonl` in the agent's cache folder, and its scrubbing after a redaction.

The warm process appends one JSON line per prompt when the log is on
(`mnemosync.shim.hook_answers`): the time, the session, the scope, the
prompt's beginning and every candidate memory with the start of its content.
That copy of a memory's text is this agent's file like its cache, so a
redaction must reach it too: when the cache applies a redact entry it calls
`scrub`, which writes `REDACTED_TEXT` over the content of every candidate of
the redacted memories (the decision, its features and the ids stay) and
rewrites the file in place. Appends and scrubs hold an exclusive `flock` on
the file, so a line appended by the warm process while another process (a
`mnemosync sync`, say) scrubs is never lost. The file is truncated before it is
written again, so freed blocks may keep old bytes until the file system reuses
them, as with any file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from mnemosync.kernel.entry import REDACTED_TEXT

log = logging.getLogger(__name__)

LOG_NAME = "recall-log.jsonl"


@contextmanager
def _locked(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def append(cache_dir: Path, entry: dict) -> None:
    """Appends `entry` as one line to the log in `cache_dir` (created 0600).

    Raises:
        OSError: the file cannot be written.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / LOG_NAME) as fd:
        os.write(fd, (json.dumps(entry) + "\n").encode())


def scrub(cache_dir: Path, memory_ids: Iterable[str]) -> int:
    """Writes `REDACTED_TEXT` over the content of every logged candidate of `memory_ids`; returns how many
    lines changed (0 when there is no log). Never fails the caller: a failure is logged."""
    ids, path = set(memory_ids), cache_dir / LOG_NAME
    if not ids or not path.exists():
        return 0
    try:
        with _locked(path) as fd:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            out = [_scrubbed(line, ids) for line in lines]
            changed = sum(a != b for a, b in zip(lines, out, strict=True))
            if changed:  # rewritten in place, under the lock an appender waits for (a new file would lose its line)
                os.ftruncate(fd, 0)
                os.write(fd, "".join(f"{x}\n" for x in out).encode())
            return changed
    except OSError as exc:
        log.warning("could not scrub the recall log %s after a redaction: %s", path, exc)
        return 0


def _scrubbed(line: str, ids: set[str]) -> str:
    try:
        entry = json.loads(line)
    except ValueError:
        return line
    candidates = entry.get("candidates") if isinstance(entry, dict) else None
    if not isinstance(candidates, list) or not any(isinstance(c, dict) and c.get("id") in ids for c in candidates):
        return line
    for c in candidates:
        if isinstance(c, dict) and c.get("id") in ids and "content" in c:
            c["content"] = REDACTED_TEXT
    return json.dumps(entry)
