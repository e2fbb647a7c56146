"""`mnemosync hook session-start` on the fast path: the warm agent writes the block (standard library only).

Claude Code waits for the SessionStart hook before the session starts. The
block (sync state, open conflicts, core memories; `mnemosync.shim.hook_cli`)
needs the cache, the model's settings and the server: opening them in a new
process costs about a second of imports and files. When this agent's warm
process (`mnemosync agent`) answers on the local socket, it already holds
them all, so this asks it (`{"op": "session-start"}`) and prints its answer:
a new process importing only the standard library and
`mnemosync.agent.local_socket`, as the prompt hook does.

Before asking, it waits at most `AGENT_WAIT` seconds for the agent's cache
to be live (`wait_for_live`), and not at all once the agent knows the server
is unreachable (its status says `offline`): waiting would not make the cache
live, only the session late.

Anything else goes the full way (`mnemosync.shim.hook_cli.session_start`, through
the command table, with the hook's input handed on): options on the command
line, recall turned off (`MNEMOSYNC_RECALL=off`: no agent to ask), no agent
answering yet (the full way starts one), or an answer that is not a block (a
session started with --in-process holds the socket).
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from collections.abc import Callable, Mapping

from mnemosync.agent import local_socket

AGENT_WAIT = 3.0
"""Most seconds the SessionStart hook waits for the local agent's cache to be live before saying how far behind
it is."""
ANSWER_TIMEOUT = 15.0
"""Seconds to wait for the agent's block (it reads its cache and, when it is live, asks the server for open
conflicts); Claude Code gives the hook 30."""


def wait_for_live(status: Callable[[], dict | None], agent: dict, wait: float) -> dict:
    """The agent's status (`agent`, then `status()` every 100 ms) once its cache is live, once it failed to boot
    or knows the server is unreachable, or as it is after `wait` seconds (a small store is caught up by then; a
    large one is reported as behind rather than waited for)."""
    deadline = time.monotonic() + wait
    while not (agent.get("live") or agent.get("boot_error") or agent.get("offline")) and time.monotonic() < deadline:
        time.sleep(0.1)
        agent = status() or agent
    return agent


def _block(argv: list[str], raw: str, environ: Mapping[str, str]) -> str | None:
    """The warm agent's block for this hook, or None when the full way must answer (see the module docstring)."""
    from mnemosync.shim.prompt_hook import PromptHookSettings

    if argv not in ([], ["--json"]) or not PromptHookSettings.from_environment(environ).enabled:
        return None
    try:
        payload = json.loads(raw or "{}")
    except ValueError:
        payload = {}
    payload = payload if isinstance(payload, dict) else {}
    cwd, session_id = (payload.get(k) if isinstance(payload.get(k), str) else None for k in ("cwd", "session_id"))
    try:
        path = local_socket.socket_path(environ, create=True)
        agent = local_socket.ask(path, {"op": "status"}, timeout=1.0)
        if not agent.get("ok"):
            return None
        wait_for_live(lambda: local_socket.status_at(path, timeout=1.0), agent, AGENT_WAIT)
        answer = local_socket.ask(path, {"op": "session-start", "cwd": cwd, "session_id": session_id,
                                         "scope": environ.get("MNEMOSYNC_SCOPE") or None}, timeout=ANSWER_TIMEOUT)
    except (OSError, ValueError):
        return None
    text = answer.get("text")
    return text if isinstance(text, str) else None


def main(argv: list[str] | None = None, *, environ: Mapping[str, str] | None = None) -> int | None:
    """Runs the hook (see the module docstring): prints the warm agent's block and returns 0, or puts the hook's
    input back on stdin and returns None, for `mnemosync.__main__` to hand the hook to the command table."""
    argv = list(argv or [])
    raw = sys.stdin.read() if sys.stdin is not None and not sys.stdin.isatty() else ""
    text = _block(argv, raw, os.environ if environ is None else environ)
    if text is None:
        sys.stdin = io.StringIO(raw)
        return None
    if argv == ["--json"]:
        text = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}})
    sys.stdout.write(text + "\n")
    return 0
