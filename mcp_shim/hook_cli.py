"""`mnemosync hook …`: what Claude Code hooks inject into a session, and the core memories as text.

SessionStart usually fires before MCP servers have connected, so the hook is a
command, not a tool call. It must never hold a session up: it works inside a
time budget (`--timeout`), answers from the local cache when the server is
slow or down, never fails (exit 0 with a short note, whatever happens), and
stays under Claude Code's 10,000-character cap for hook output.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from dataclasses import dataclass, field

import click

from mnemosync.agent.cli_options import connection_options
from mnemosync.agent.errors import ClientError
from mnemosync.kernel.errors import CodedError, SettingsError
from mnemosync.kernel.one_line import one_line, one_lines
from mnemosync.kernel.session_scopes import home_scopes
from mnemosync.kernel.wording import counted, plural
from mnemosync.shim import core_memories
from mnemosync.shim.config import load_settings, scope_option
from mnemosync.shim.session_start_hook import AGENT_WAIT, wait_for_live

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 9500
"""Characters; Claude Code caps hook output at 10,000."""

CLOSING = ("Use the mnemosync tools: search before deciding or asking about past decisions, conventions, fixes "
           "or preferences; add_memory for durable things a later session needs; update or forget what is wrong. "
           "Tool results carry news of other agents' writes.")


@dataclass
class _Boot:
    """What the bounded start-up managed to do."""

    client: object | None = None
    applied: int | None = None
    offset: int | None = None
    head: int | None = None
    sent: int = 0
    refused: int = 0
    offline: str | None = None
    error: str | None = None
    conflicts: list = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


def _read_hook_input() -> dict:
    """The hook's JSON from stdin, or {} when there is none or it is not JSON (never fails)."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return {}
        data = json.loads(sys.stdin.read() or "{}")
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _start(settings, boot: _Boot, *, with_conflicts: bool, sync: bool) -> None:
    """Opens the client and, with `sync`, sends queued writes and catches up; runs on a daemon thread."""
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.errors import ServerUnavailable

    try:
        client = AgentClient(settings, live=False, sync_on_start=False)
        boot.client = client
        boot.offset = client.local.offset
        try:
            if sync:
                boot.sent, boot.refused = client.flush()
                summary = client.sync()
                boot.applied, boot.offset, boot.head = summary.applied, summary.offset, summary.head
            if with_conflicts:
                boot.conflicts = list(client.conflicts())
        except ServerUnavailable as exc:
            boot.offline = str(exc)
        except CodedError as exc:
            boot.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - a hook reports and carries on, whatever broke
        log.info("hook start-up failed", exc_info=True)
        boot.error = str(exc) or type(exc).__name__
    finally:
        boot.done.set()


def _open(settings, timeout: float, *, with_conflicts: bool = False, sync: bool = True) -> _Boot:
    boot = _Boot()
    threading.Thread(target=_start, args=(settings, boot), kwargs={"with_conflicts": with_conflicts, "sync": sync},
                     name="mnemosync-hook", daemon=True).start()
    boot.done.wait(timeout)
    return boot


def _finish(boot: _Boot, text: str) -> None:
    """Prints `text`, then closes the client within 2 s or leaves at once (never blocks the session)."""
    click.echo(text)
    sys.stdout.flush()
    if not boot.done.is_set():
        os._exit(0)  # the start-up thread is stuck on the network; the cache is transactional, so leaving is safe
    if boot.client is None:
        return
    closer = threading.Thread(target=boot.client.close, daemon=True)
    closer.start()
    closer.join(2)
    if closer.is_alive():
        os._exit(0)


def _status_line(settings, boot: _Boot) -> str:
    agent = (boot.client.agent_id if boot.client else None) or settings.agent_id or "this agent"
    where = _where(agent, settings)
    if not boot.done.is_set():
        return (f"{where}. The server at {settings.server} did not answer in time: memories below come from the "
                f"local cache (synced to seq {boot.offset if boot.offset is not None else '?'}).")
    if boot.error:
        return f"{where}. Shared memory had a problem at start: {one_line(boot.error, 300)}."
    if boot.offline:
        return (f"{where}. OFFLINE: the server at {settings.server} is unreachable; memories below come from the "
                f"local cache (synced to seq {boot.offset}); new writes are queued and sent when it is back.")
    sent = f"; sent {counted(boot.sent, 'queued write')}" if boot.sent else ""
    refused = (f"; {counted(boot.refused, 'queued write')} {plural(boot.refused, 'was', 'were')} refused (see "
               "mnemosync status)" if boot.refused else "")
    new = counted(boot.applied or 0, "new changelog entry", "new changelog entries")
    return f"{where}. Synced: {new} (seq {boot.offset} of {boot.head}){sent}{refused}."


def _where(agent: str, settings) -> str:
    """The status line's start: the agent and the session's scopes, each one line (`one_line`)."""
    return (f"Agent {one_line(agent, 80)}, scope {one_line(settings.scope, 128)} (also reads "
            f"{one_lines(home_scopes(settings.scope)[1:], 128) or '-'})")


def _agent_when_live(connection: dict, agent: dict, wait: float) -> dict:
    """The agent's status once its cache is live (or it cannot be: see `wait_for_live`), or after `wait` s."""
    from mnemosync.agent import local_socket

    return wait_for_live(lambda: local_socket.agent_status(os.environ, connection), agent, wait)


def _agent_line(settings, boot: _Boot, agent: dict) -> str:
    """The status line when the local agent keeps the cache (the hook does not wait for its catch-up)."""
    name = agent.get("agent") or (boot.client.agent_id if boot.client else None) or settings.agent_id or "this agent"
    where = _where(name, settings)
    offset = agent.get("cache_offset", boot.offset)
    if agent.get("starting"):
        return (f"{where}. The local agent is starting and will catch the cache up in the background (now at seq "
                f"{offset if offset is not None else '?'}); memories below may miss the newest, searches go to "
                "the server meanwhile.")
    if agent.get("live"):
        return f"{where}. Synced: the local agent keeps the cache live (seq {offset})."
    lag, head = agent.get("cache_lag"), agent.get("cache_head")
    if lag:
        return (f"{where}. The local agent is catching the cache up: seq {offset} of {head} ({lag:,} behind); "
                "memories below may miss the newest, searches go to the server meanwhile.")
    return (f"{where}. The local agent is not connected to the server at {settings.server}: memories below come "
            f"from its cache (synced to seq {offset}); new writes are queued and sent when it is back.")


def ensure_warm_agent(connection: dict) -> dict | None:
    """The local agent's status (`{"op": "status"}`), starting `mnemosync agent` in the background when nothing
    answers on this agent's local socket and none is starting, so the session's first prompt finds a warm
    process: then `{"starting": true}`. None when no agent serves or will serve this session.

    Not when recall is off (`MNEMOSYNC_RECALL`) or starting is (`MNEMOSYNC_RECALL_START_AGENT=0`), and never
    fails: a socket that cannot be used only means no recall.
    """
    from mnemosync.agent import local_socket
    from mnemosync.shim.prompt_hook import PromptHookSettings, start_agent

    settings = PromptHookSettings.from_environment(os.environ)
    if not (settings.enabled and settings.start_agent):
        return None
    environ = local_socket.agent_environment(os.environ, connection)
    try:
        path = local_socket.socket_path(environ, create=True)
        try:
            status = local_socket.ask(path, {"op": "status"}, timeout=1.0)
            return status if status.get("ok") else None
        except (FileNotFoundError, ConnectionRefusedError):
            if local_socket.is_starting(path):
                return {"starting": True}
        start_agent(environ, path)
        return {"starting": True}
    except (OSError, ValueError) as exc:
        log.info("could not start the warm agent: %s", exc)
        return None


def _conflict_lines(boot: _Boot) -> list[str]:
    """The open conflicts, each on one line with its sides' texts (`mnemosync.agent.conflicts.sides`)."""
    from mnemosync.agent.conflicts import sides

    if not boot.conflicts:
        return []
    count = len(boot.conflicts)
    lines = [f"Open conflicts: {count} (review with check_conflicts, then resolve_conflict)."]
    for view in boot.conflicts[:3]:
        c = view.conflict
        lines.append(f"- #{c.id} {one_line(c.kind, 20)} on {c.memory_id[:8]} v{view.memory_version}: {sides(c, 120)}")
    if count > 3:
        lines.append(f"- and {count - 3} more")
    return lines


def _record_shown(boot: _Boot, session_id: object, versions: dict[str, int]) -> None:
    """Records what the session start showed the session (`mnemosync.agent.shown`), so its prompt hook does not
    show it again and its writes are made from these versions. Never fails the hook."""
    from mnemosync.agent.shown import session_reader

    if boot.client is None or not isinstance(session_id, str) or not session_id or len(session_id) > 200:
        return
    try:
        boot.client.shown.record(session_reader(session_id), versions, "session start")
    except CodedError as exc:
        log.info("what the session start showed is not recorded: %s", exc)


@click.group()
def hook():
    """Claude Code hooks: context to inject into a session.

    \b
    Example (in .claude/settings.json):
      {"hooks": {"SessionStart": [{"matcher": "startup", "hooks":
        [{"type": "command", "command": "mnemosync hook session-start", "timeout": 30}]}]}}
    """


def _hook_options(func):
    func = click.option("--budget", type=click.IntRange(100, 2300), default=core_memories.DEFAULT_BUDGET_TOKENS,
                        show_default=True, help="Token budget of the core memories.")(func)
    func = click.option("--timeout", type=click.FloatRange(0.5, 60), default=8.0, show_default=True,
                        help="Most seconds to wait for the server before answering from the cache.")(func)
    return connection_options(scope_option(func))


@hook.command("session-start")
@_hook_options
@click.option("--json", "as_json", is_flag=True,
              help="Print Claude Code's hookSpecificOutput JSON instead of plain text.")
def session_start(budget, timeout, as_json, scope, connection):
    """Print what a SessionStart hook should add to the session's context.

    Reads the hook's JSON from stdin (its cwd gives the project scope) and
    prints the sync state, open conflicts and the core memories. It starts
    the local `mnemosync agent` when none runs (it answers the prompt hook and
    the session's MCP server) and waits at most 3 s for its cache to be live,
    then says how far behind the cache is rather than wait for it (and does
    not wait once the agent knows the server is down). A warm agent writes
    the block itself (without options this command only asks it). Without an
    agent (recall off) it catches the cache up itself within --timeout.
    Always exits 0: with the server down it answers from the cache and says so.

    \b
    Example:
      echo '{"cwd": "/home/me/src/webshop"}' | mnemosync hook session-start --insecure
    """
    payload = _read_hook_input()
    try:
        settings = load_settings(project_dir=payload.get("cwd") or None, scope=scope, timeout=min(3.0, timeout),
                                 **connection)
    except SettingsError as exc:
        click.echo(f"mnemosync: shared memory is not configured correctly ({exc}); no memories loaded.")
        return
    agent = ensure_warm_agent(connection)
    if agent is not None:
        agent = _agent_when_live(connection, agent, min(timeout, AGENT_WAIT))
    boot = _open(settings, timeout, with_conflicts=True, sync=agent is None)
    text = _block(settings, boot, agent, payload.get("cwd") if isinstance(payload.get("cwd"), str) else None, budget,
                  payload.get("session_id"))
    if as_json:
        text = json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}})
    _finish(boot, text)


def _block(settings, boot: _Boot, agent: dict | None, cwd: str | None, budget: int, session_id: object) -> str:
    """The SessionStart block: the status line (the local agent's when one keeps the cache), open conflicts and
    the core memories, under Claude Code's cap; what it shows is recorded as shown to `session_id`."""
    status = _status_line(settings, boot) if agent is None else _agent_line(settings, boot, agent)
    parts = ["# Shared memory (mnemosync)", status, *_conflict_lines(boot)]
    if boot.client is not None:
        head = "\n".join(parts)
        room = max(100, (OUTPUT_LIMIT - len(head) - len(CLOSING) - 10) // core_memories.CHARS_PER_TOKEN)
        built = core_memories.build(boot.client.local, home_scopes(settings.scope), budget_tokens=min(budget, room),
                                    title="Core memories", root=cwd,
                                    open_conflicts=[v.conflict for v in boot.conflicts])
        parts += ["", built.markdown]
        _record_shown(boot, session_id, {**built.versions, **{v.conflict.memory_id: v.memory_version
                                                             for v in boot.conflicts[:3]}})
    parts += ["", CLOSING]
    return "\n".join(parts)[:OUTPUT_LIMIT]


def session_start_answer(client, request: dict, *, status: dict, connection: dict, lock) -> dict:
    """The warm agent's answer to the fast SessionStart hook (`mnemosync.shim.session_start_hook`):
    `{"op": "session-start", "cwd", "scope"}` gets `{"text": block}`, the same block the full command prints,
    made with the agent's own client (its cache, and the server's open conflicts, or the cache's when `status`
    says the server is unreachable) and its `status`; a bad setting gets `{"error": ...}`.

    Args:
        client: The agent's started `AgentClient`.
        request: The hook's request (its cwd gives the project scope, as the full command's does).
        status: The agent's own status (`SessionHost.describe`).
        connection: The agent's connection options, to resolve the session's settings as its sessions do.
        lock: Held while the client is used (shared with the sessions' tool calls).
    """
    from mnemosync.agent.conflicts import cached_conflicts
    from mnemosync.shim.agent_sessions import own_environment

    cwd, scope = (request.get(k) if isinstance(request.get(k), str) and request.get(k) else None
                  for k in ("cwd", "scope"))
    try:
        settings = load_settings(environ=own_environment(os.environ), project_dir=cwd, scope=scope, **connection)
    except SettingsError as exc:
        return {"error": f"the session's settings: {exc}"}
    boot = _Boot(client=client, offset=client.local.offset)
    boot.done.set()
    with lock:
        try:
            boot.conflicts = list(cached_conflicts(client.cache) if status.get("offline") else client.conflicts())
        except CodedError as exc:
            boot.error = str(exc)
        return {"text": _block(settings, boot, status, cwd, core_memories.DEFAULT_BUDGET_TOKENS,
                               request.get("session_id"))}


@hook.command("core")
@_hook_options
@click.option("--no-sync", is_flag=True, help="Do not contact the server; read the cache as it is.")
def core_command(budget, timeout, no_sync, scope, connection):
    """Print the core memories of the current scope (the memory://core resource as text).

    \b
    Examples:
      mnemosync hook core --insecure --scope project:webshop
      mnemosync hook core --budget 3000 --no-sync
    """
    settings = load_settings(scope=scope, timeout=min(3.0, timeout), **connection)
    if no_sync:
        from mnemosync.agent.client import AgentClient

        boot = _Boot(client=AgentClient(settings, live=False, sync_on_start=False))
        boot.done.set()
    else:
        boot = _open(settings, timeout)
    if boot.client is None:
        raise ClientError(boot.error or "the local cache could not be opened in time")
    built = core_memories.build(boot.client.local, home_scopes(settings.scope), budget_tokens=budget)
    note = "" if (no_sync or (boot.done.is_set() and not boot.offline and not boot.error)) else \
        "\n\n(" + _status_line(settings, boot) + ")"
    _finish(boot, built.markdown + note)


_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True}


@hook.command("prompt", context_settings=_PASS_THROUGH)
@click.pass_context
def prompt_command(ctx):
    """Print the memories relevant to a prompt (Claude Code's UserPromptSubmit hook).

    Reads the hook's JSON from stdin and asks this agent's warm process
    (the session's mnemosync-mcp, or `mnemosync agent`, started in the
    background when none runs, and waited for while it starts) over a private
    local socket; prints Claude Code's additionalContext JSON, or nothing when
    nothing is relevant enough or anything goes wrong. A memory is injected
    once per session unless it changes. Always exits 0. Settings:
    MNEMOSYNC_RECALL (off), MNEMOSYNC_RECALL_BUDGET (tokens, default 300),
    MNEMOSYNC_RECALL_TIMEOUT (seconds, default 2), MNEMOSYNC_RECALL_START_WAIT
    (seconds, default 4), MNEMOSYNC_RECALL_LOG (1: log each decision to
    recall-log.jsonl in the agent's cache directory), MNEMOSYNC_SCOPE.
    `mnemosync recall PROMPT --explain` shows what it would inject, and why.

    \b
    Example:
      echo '{"prompt": "how do we sign JWTs?", "cwd": "/home/me/src/web"}' | mnemosync hook prompt
    """
    from mnemosync.shim.prompt_hook import main

    ctx.exit(main(ctx.args))


@hook.command("precompact", context_settings=_PASS_THROUGH)
@click.pass_context
def precompact_command(ctx):
    """Store the session's episodes before Claude Code compacts it (PreCompact hook).

    Reads the hook's JSON from stdin and starts `mnemosync ingest --partial`
    on its transcript_path in the background; exits 0 at once.

    \b
    Example:
      echo '{"transcript_path": "/home/me/.claude/projects/x/s.jsonl", "cwd": "/home/me/src/web"}' \\
        | mnemosync hook precompact
    """
    from mnemosync.shim.capture_hook import precompact

    ctx.exit(precompact(ctx.args))


@hook.command("session-end", context_settings=_PASS_THROUGH)
@click.pass_context
def session_end_command(ctx):
    """Store the session's episodes when it ends (SessionEnd hook).

    Reads the hook's JSON from stdin and starts `mnemosync ingest` on its
    transcript_path in the background; exits 0 at once.

    \b
    Example:
      echo '{"transcript_path": "/home/me/.claude/projects/x/s.jsonl", "cwd": "/home/me/src/web"}' \\
        | mnemosync hook session-end
    """
    from mnemosync.shim.capture_hook import session_end

    ctx.exit(session_end(ctx.args))
