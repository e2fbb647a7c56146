"""`mnemosync hook prompt`: Claude Code's UserPromptSubmit hook, on the fast path (standard library only).

Claude Code starts this for every prompt and waits for it, so it must start
and answer in well under 150 ms: it imports nothing but the standard library
and `mnemosync.agent.local_socket` (the `mnemosync` launcher, `mnemosync.__main__`,
sends it here before click, gRPC or llama.cpp load). It reads the hook's
JSON from stdin, asks the warm process of this agent over the private local
socket for the memories relevant to the prompt (`mnemosync.shim.recall`, run
there), and prints them as `additionalContext`.

It never holds up or fails a prompt: whatever goes wrong (a slow server, a
malformed input, a broken setting) it prints nothing and exits 0. The warm
process normally exists before the first prompt (the SessionStart hook starts
`mnemosync agent` when nothing answers, as the session's MCP server serves the
socket too). When none answers yet, the hook starts `mnemosync agent` itself
if none is starting (unless `MNEMOSYNC_RECALL_START_AGENT=0`) and waits for
it to answer, within `MNEMOSYNC_RECALL_START_WAIT` seconds, so the first
prompt of a session is answered too; past that it goes on with nothing.
The hook's input carries Claude Code's `session_id`, which the warm process
uses not to inject a memory twice in one session.

Settings (environment; the plugin sets them from its options):

* `MNEMOSYNC_RECALL`: `off` turns recall off.
* `MNEMOSYNC_RECALL_BUDGET`: token budget of the injected block (default 300).
* `MNEMOSYNC_RECALL_TIMEOUT`: seconds to wait for the warm process's answer (default 2).
* `MNEMOSYNC_RECALL_START_WAIT`: seconds in all to wait for a warm process that is still starting (default
  4; Claude Code gives the hook 5).
* `MNEMOSYNC_RECALL_LOG`: `1` logs each prompt's decision to `recall-log.jsonl` in the agent's cache
  directory.
* `MNEMOSYNC_SCOPE`: the scope; otherwise `project:<name>` of the hook's `cwd`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from mnemosync.agent import local_socket

TYPE_CHECKING = False  # `typing` costs the hook ~4 ms to import
if TYPE_CHECKING:
    import subprocess

OFF = {"0", "off", "false", "no"}


class PromptHookSettings:
    """The prompt hook's settings (see the module docstring); a plain class, as `dataclasses` costs ~8 ms to import.

    Args:
        enabled: Recall on.
        budget_tokens: Token budget of the injected block.
        timeout: Seconds to wait for the warm process.
        start_agent: Start `mnemosync agent` when nothing answers.
        start_wait: Seconds in all to wait for a warm process that is starting.
        log: Ask the warm process to log this prompt's decision.
    """

    __slots__ = ("enabled", "budget_tokens", "timeout", "start_agent", "start_wait", "log")

    def __init__(self, *, enabled: bool = True, budget_tokens: int = 300, timeout: float = 2.0,
                 start_agent: bool = True, start_wait: float = 4.0, log: bool = False):
        self.enabled, self.budget_tokens, self.timeout, self.start_agent = enabled, budget_tokens, timeout, start_agent
        self.start_wait, self.log = start_wait, log

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> PromptHookSettings:
        """The settings from `MNEMOSYNC_RECALL*` variables; a malformed number keeps its default."""

        def number(name: str, default: float, low: float, high: float) -> float:
            try:
                return min(high, max(low, float(environ.get(name) or default)))
            except ValueError:
                return default

        return cls(enabled=environ.get("MNEMOSYNC_RECALL", "").strip().lower() not in OFF,
                   budget_tokens=int(number("MNEMOSYNC_RECALL_BUDGET", 300, 50, 2000)),
                   timeout=number("MNEMOSYNC_RECALL_TIMEOUT", 2.0, 0.1, 20.0),
                   start_agent=environ.get("MNEMOSYNC_RECALL_START_AGENT", "").strip().lower() not in OFF,
                   start_wait=number("MNEMOSYNC_RECALL_START_WAIT", 4.0, 0.0, 60.0),
                   log=environ.get("MNEMOSYNC_RECALL_LOG", "").strip().lower() not in OFF | {""})


def read_hook_input(stream) -> dict:
    """The hook's JSON object from `stream`, or {} when there is none or it is not an object (never fails)."""
    try:
        data = json.loads(stream.read() or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def agent_log(path) -> Path:
    """The log of the agent serving the socket `path`: beside it, `agent-<key>.log`."""
    return path.with_name(path.stem + ".log")


def start_agent(environ: Mapping[str, str], path) -> subprocess.Popen:
    """Starts `mnemosync agent` detached from this process, to serve `path` (the socket); its log is
    `agent_log(path)`. (`subprocess` is imported here: a prompt answered by a warm process does not need it.)"""
    import subprocess

    log_path = agent_log(path)
    # -P: the hook runs in the user's project, whose own `server/` folder must not shadow mnemosync's
    with open(log_path, "ab") as log:
        os.chmod(log_path, 0o600)
        return subprocess.Popen([sys.executable, "-P", "-m", "mnemosync.cli", "agent"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=log, start_new_session=True, close_fds=True,
                         env=dict(environ))


def ask_when_started(path, request: dict, settings: PromptHookSettings, deadline: float) -> dict | None:
    """The warm process's answer once it serves `path`, asking again every 50 ms until `deadline`
    (`time.monotonic()`); None when it did not answer in time."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            return local_socket.ask(path, request, timeout=min(settings.timeout, left))
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def main(argv: list[str] | None = None, *, stdin=None, stdout=None, environ: Mapping[str, str] | None = None) -> int:
    """Runs the hook; always returns 0 (see the module docstring)."""
    environ = os.environ if environ is None else environ
    stdout = sys.stdout if stdout is None else stdout
    settings = PromptHookSettings.from_environment(environ)
    payload = read_hook_input(sys.stdin if stdin is None else stdin)
    prompt = payload.get("prompt")
    if not settings.enabled or not isinstance(prompt, str) or not prompt.strip():
        return 0
    session = payload.get("session_id")
    request = {"op": "recall", "prompt": prompt, "cwd": payload.get("cwd") if isinstance(payload.get("cwd"), str)
               else None, "scope": environ.get("MNEMOSYNC_SCOPE") or None, "budget_tokens": settings.budget_tokens,
               "session_id": session if isinstance(session, str) else None, "log": settings.log}
    started = time.monotonic()
    try:
        path = local_socket.socket_path(environ, create=True)
        try:
            answer: dict | None = local_socket.ask(path, request, timeout=settings.timeout)
        except (FileNotFoundError, ConnectionRefusedError):
            if not local_socket.is_starting(path):
                if not settings.start_agent:
                    return 0
                start_agent(environ, path)
            answer = ask_when_started(path, request, settings, started + settings.start_wait)
            if answer is None:
                return 0
    except (OSError, ValueError):
        return 0
    if answer is None:
        return 0
    context = answer.get("context")
    if isinstance(context, str) and context:
        stdout.write(json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                                        "additionalContext": context}}) + "\n")
    return 0
