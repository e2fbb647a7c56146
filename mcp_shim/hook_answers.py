"""What a warm process answers on the local socket (`mnemosync.shim.local_service`): recall for the prompt hook.

The session's `mnemosync-mcp` and `mnemosync agent` both serve these
requests with their own `AgentClient` (model loaded, connection open):

* `{"op": "recall", "prompt", "cwd", "scope", "budget_tokens", "session_id", "log"}` returns
  `{"context": text or "", "ids": [...], "offline": bool}` (`mnemosync.shim.recall`).
  The scope is the request's (the hook's `MNEMOSYNC_SCOPE`), else
  `project:<name>` of its `cwd`, else this process's own; the session reads
  that scope and `user`.
* `{"op": "ping"}` returns `{"ok": true, "agent": id, "pid": n}`.

No repetition: per `session_id` (Claude Code's, from the hook's input) the
agent records which memory versions the session was shown (`mnemosync.agent.shown`:
what this hook injected, what the session start showed, and what the session's
MCP tools returned when they know the same id), and does not inject them again
in that session unless they changed. A request without a session id is answered
without that record. The record is a file in the agent's cache directory, so an
agent that exited when idle, or was restarted, does not repeat itself in a
session that goes on.

The hook log: with `"log": true` in the request (the hook's
`MNEMOSYNC_RECALL_LOG`) or `MNEMOSYNC_RECALL_LOG` set for this process, each
prompt's decision is appended as one JSON line to `recall-log.jsonl` in the
agent's cache directory (time, session, scope, the prompt's first 200
characters, what was injected, and every candidate with its features,
probability and reason), so "why did nothing come back?" has an answer
(`mnemosync.agent.recall_log`, which a redaction scrubs).

A bad request gets `{"error": "..."}` naming the field; a failed search gets
an empty context (the hook prints nothing).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

from mnemosync.agent import recall_log
from mnemosync.agent.recall_log import LOG_NAME
from mnemosync.agent.shown import session_reader
from mnemosync.kernel.errors import CodedError
from mnemosync.kernel.session_scopes import home_scopes
from mnemosync.shim import recall
from mnemosync.shim.config import project_scope
from mnemosync.shim.recall import Recalled

log = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 100_000
MAX_SESSION_ID_CHARS = 200
LOGGED_PROMPT_CHARS = 200
OFF = {"", "0", "off", "false", "no"}


class HookAnswers:
    """Answers local-socket requests with `client` (see the module docstring).

    Args:
        client: The process's `AgentClient`, started.
        scope: This process's own scope (used when a request names none and has no `cwd`).
        lock: Held around each use of the client, shared with whatever else uses it (the shim's tool calls).
        log_all: Log every prompt's decision, whatever the request says (default: `MNEMOSYNC_RECALL_LOG`).
    """

    def __init__(self, client, *, scope: str, lock: threading.Lock | None = None, log_all: bool | None = None):
        self.client = client
        self.scope = scope
        self.lock = lock or contextlib.nullcontext()
        self.log_all = (os.environ.get("MNEMOSYNC_RECALL_LOG", "").strip().lower() not in OFF
                        if log_all is None else log_all)
        self._log_lock = threading.Lock()

    def __call__(self, request: dict) -> dict:
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "agent": self.client.agent_id, "pid": os.getpid()}
        if op == "recall":
            return self.recall(request)
        return {"error": f"unknown op {op!r}; expected recall or ping"}

    @property
    def log_path(self) -> Path:
        """Where the hook log is written: `recall-log.jsonl` in the agent's cache directory."""
        return self.client.settings.resolved_cache_dir() / LOG_NAME

    def recall(self, request: dict) -> dict:
        """The recall answer for one prompt (see the module docstring)."""
        prompt, budget = request.get("prompt"), request.get("budget_tokens", recall.DEFAULT_BUDGET_TOKENS)
        session = request.get("session_id")
        if not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS:
            return {"error": f"prompt must be text of at most {MAX_PROMPT_CHARS} characters"}
        if not isinstance(budget, int) or isinstance(budget, bool) or not 50 <= budget <= 2000:
            return {"error": "budget_tokens must be a whole number from 50 to 2000"}
        if session is not None and (not isinstance(session, str) or len(session) > MAX_SESSION_ID_CHARS):
            return {"error": f"session_id must be text of at most {MAX_SESSION_ID_CHARS} characters"}
        scope = self.scope_for(request)
        seen = self.client.shown.seen(session_reader(session)) if session else {}
        try:
            with self.lock:
                found = recall.recall(self.client, prompt, home_scopes(scope), budget_tokens=budget, seen=seen,
                                      root=request.get("cwd") if isinstance(request.get("cwd"), str) else None)
        except CodedError as exc:
            log.info("recall failed: %s", exc)
            self.write_log(request, scope, None, error=str(exc))
            return {"context": "", "ids": [], "offline": True}
        if session and found.versions:
            self.client.shown.record(session_reader(session), found.versions, "prompt hook")
        self.write_log(request, scope, found)
        return {"context": found.text, "ids": list(found.ids), "offline": found.offline}

    def write_log(self, request: dict, scope: str, found: Recalled | None, *, error: str | None = None
                  ) -> None:
        """Appends the prompt's decision to the hook log when it is on (never fails the answer)."""
        if not (self.log_all or request.get("log") is True):
            return
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "session_id": request.get("session_id"),
                 "scope": scope, "prompt": str(request.get("prompt", ""))[:LOGGED_PROMPT_CHARS]}
        if error is not None:
            entry["error"] = error
        elif found is not None:
            entry.update({"searched": found.searched, "offline": found.offline, "injected": list(found.ids),
                          "candidates": [c.as_dict() for c in found.candidates]})
            if not found.searched:
                entry["reason"] = "not searched: shorter than a question or a slash command"
        try:
            with self._log_lock:
                recall_log.append(self.log_path.parent, entry)
        except OSError as exc:
            log.info("could not write the recall log: %s", exc)

    def scope_for(self, request: dict) -> str:
        """The scope a request reads: its own, else its cwd's project, else this process's."""
        scope, cwd = request.get("scope"), request.get("cwd")
        if isinstance(scope, str) and scope.strip():
            return scope.strip()
        return (project_scope(cwd) if isinstance(cwd, str) and cwd else None) or self.scope
