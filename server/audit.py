"""The audit log: every call the server refused for a security reason, one JSON object per line.

`<data_dir>/audit.jsonl` (mode 0600) records who called, what they asked and
why it was refused, for calls refused because of who made them
(`worth_auditing`): no or a revoked, expired or unknown certificate
(UNAUTHENTICATED), a governance or authority rule (PERMISSION_DENIED), a rate
limit or stream cap (RESOURCE_EXHAUSTED), an unusable revocation list, and a
credential the intake gate stopped (`intake-no-secrets`). Malformed requests
and stale versions are the caller's mistakes, not attempts, and are not
recorded. A line never holds a memory's text: the request is summarised by
kind, ids and scopes, and refusal messages never echo values.

The file is bounded: past `max_bytes` it is renamed to `audit.jsonl.1` (the
previous `.1` becomes `.2`, and so on up to `backups`; the oldest goes).
A line looks like::

    {"time": "2026-11-23T10:15:02.113Z", "method": "Append", "agent": "bob", "certificate": "5A3F…",
     "authority": 4, "peer": "ipv4:10.0.0.7:51512", "code": "PERMISSION_DENIED", "rule": "scope-not-granted",
     "reason": "scope-not-granted: agent bob may not write memories in scope 'project:ops'; …",
     "request": {"operations": [{"op": "add", "memory_id": "…", "scope": "project:ops"}]}}
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from mnemosync.kernel import secrets_scan
from mnemosync.kernel.errors import MnemosyncError
from mnemosync.server.identity import Caller
from mnemosync.server.revocation import RevocationListUnreadable

log = logging.getLogger(__name__)

AUDIT_FILE = "audit.jsonl"
AUDITED_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED"})
SECRET_RULE = "intake-no-secrets"
_RULE = re.compile(r"^(?:operations\[\d+\]: )?([a-z0-9]+(?:-[a-z0-9]+)+):")
_MAX_OPS_LISTED = 20


def worth_auditing(exc: MnemosyncError) -> bool:
    """True for refusals that say something about the caller (see the module docstring)."""
    return exc.code in AUDITED_CODES or SECRET_RULE in str(exc) or isinstance(exc, RevocationListUnreadable)


def _rule(message: str) -> str:
    found = _RULE.match(message)
    return found.group(1) if found else ""


def summarise(method: str, request: Any) -> dict[str, Any]:
    """What the call asked for, without any text a memory or query carries."""
    if method == "Append" and hasattr(request, "operations"):
        ops = []
        for op in list(request.operations)[:_MAX_OPS_LISTED]:
            kind = op.WhichOneof("op") or ""
            item = {"op": kind, "memory_id": op.memory_id[:64]}
            if kind == "add":
                item["scope"] = op.add.scope[:128]
            ops.append(item)
        return {"operations": ops, "count": len(request.operations)}
    if method in ("Get", "GetConflict") and hasattr(request, "id"):
        return {"id": str(request.id)[:64]}
    if method in ("Sync", "SyncBatches", "Subscribe") and hasattr(request, "since_seq"):
        return {"since_seq": request.since_seq}
    if method == "Search" and hasattr(request, "filter"):
        return {"scopes": [s[:128] for s in request.filter.scopes]}
    if method == "ListConflicts" and hasattr(request, "memory_id"):
        return {"memory_id": request.memory_id[:64]}
    return {}


def _masked(value: Any) -> Any:
    """`value` with every string in it passed through the secret detector: an id or scope that carried a
    credential (refused by the intake gate, and so audited) must not put it in the log."""
    if isinstance(value, str):
        return secrets_scan.mask(value)
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


class AuditLog:
    """Appends refusal records to a bounded JSON-lines file (thread-safe).

    Args:
        path: The file (created 0600; its directory must exist).
        max_bytes: Size at which it is rotated.
        backups: Rotated files kept (`audit.jsonl.1` … `.N`).
        clock: Current UTC time (tests pass a fixed one).
    """

    def __init__(self, path: Path, *, max_bytes: int = 10 * 1024 * 1024, backups: int = 5, clock=None):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._lock = threading.Lock()

    def refused(self, method: str, request: Any, peer: str, caller: Caller | None, exc: MnemosyncError) -> None:
        """Records one refused call (who, what, why). Never raises: an unwritable log is reported, not fatal."""
        message = str(exc)
        record = {
            "time": self._clock().isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "method": method,
            "agent": caller.agent_id if caller else getattr(exc, "agent_id", ""),
            "certificate": caller.certificate_serial if caller else getattr(exc, "certificate_serial", ""),
            "authority": caller.authority if caller else None,
            "peer": peer,
            "code": exc.code,
            "rule": _rule(message),
            "reason": message,
            "request": summarise(method, request),
        }
        self.write(_masked(record))

    def write(self, record: dict[str, Any]) -> None:
        """Appends one record, rotating first when the file is full."""
        line = (json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode()
        with self._lock:
            try:
                self._rotate_if_full(len(line))
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line)
                finally:
                    os.close(fd)
            except OSError as exc:
                log.error("cannot write the audit log %s: %s (refused call: %s)", self.path, exc, line.decode()[:300])

    def _rotate_if_full(self, adding: int) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size + adding <= self.max_bytes:
            return
        for n in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{n + 1}"))
        if self.backups:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink()

    def read(self) -> list[dict[str, Any]]:
        """The records in the current file, oldest first (for `mnemosync` and tests)."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]
