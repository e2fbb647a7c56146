"""What a warm process answers on the local socket (`mnemosync.shim.local_service`): recall for the prompt hook.

The session's `mnemosync-mcp` and `mnemosync agent` both serve these
requests with their own `AgentClient` (model loaded, connection open):

* `{"op": "recall", "prompt", "cwd", "scope", "budget_tokens"}` returns
  `{"context": text or "", "ids": [...], "offline": bool}` (`mnemosync.shim.recall`).
  The scope is the request's (the hook's `MNEMOSYNC_SCOPE`), else
  `project:<name>` of its `cwd`, else this process's own; the session reads
  that scope and `user`.
* `{"op": "ping"}` returns `{"ok": true, "agent": id, "pid": n}`.

A bad request gets `{"error": "..."}` naming the field; a failed search gets
an empty context (the hook prints nothing).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

from mnemosync.kernel.errors import CodedError
from mnemosync.shim import recall
from mnemosync.shim.config import home_scopes, project_scope

log = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 100_000


class HookAnswers:
    """Answers local-socket requests with `client` (see the module docstring).

    Args:
        client: The process's `AgentClient`, started.
        scope: This process's own scope (used when a request names none and has no `cwd`).
        lock: Held around each use of the client, shared with whatever else uses it (the shim's tool calls).
    """

    def __init__(self, client, *, scope: str, lock: threading.Lock | None = None):
        self.client = client
        self.scope = scope
        self.lock = lock or contextlib.nullcontext()

    def __call__(self, request: dict) -> dict:
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "agent": self.client.agent_id, "pid": os.getpid()}
        if op == "recall":
            return self.recall(request)
        return {"error": f"unknown op {op!r}; expected recall or ping"}

    def recall(self, request: dict) -> dict:
        """The recall answer for one prompt (see the module docstring)."""
        prompt, budget = request.get("prompt"), request.get("budget_tokens", recall.DEFAULT_BUDGET_TOKENS)
        if not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS:
            return {"error": f"prompt must be text of at most {MAX_PROMPT_CHARS} characters"}
        if not isinstance(budget, int) or isinstance(budget, bool) or not 50 <= budget <= 2000:
            return {"error": "budget_tokens must be a whole number from 50 to 2000"}
        scope = self.scope_for(request)
        try:
            with self.lock:
                found = recall.recall(self.client, prompt, home_scopes(scope), budget_tokens=budget,
                                      root=request.get("cwd") if isinstance(request.get("cwd"), str) else None)
        except CodedError as exc:
            log.info("recall failed: %s", exc)
            return {"context": "", "ids": [], "offline": True}
        return {"context": found.text, "ids": list(found.ids), "offline": found.offline}

    def scope_for(self, request: dict) -> str:
        """The scope a request reads: its own, else its cwd's project, else this process's."""
        scope, cwd = request.get("scope"), request.get("cwd")
        if isinstance(scope, str) and scope.strip():
            return scope.strip()
        return (project_scope(cwd) if isinstance(cwd, str) and cwd else None) or self.scope
