"""Sessions of different scopes on one local agent (`mnemosync.shim.agent_sessions`), in the model.

One local agent serves every Claude Code session of its agent id, and it was started by one of them, so its
environment holds that session's `MNEMOSYNC_SCOPE` or `CLAUDE_PROJECT_DIR`. `sessions_on_one_agent_write_to_their
_own_scopes` hosts real MCP sessions (`SessionHost`, the MCP server each session gets, over a socket pair, as a
relay's connection is) on one of the run's agent clients while the process environment names the scope of the
session that "started" it, and has each add a memory without naming a scope: the memory must land in the scope
that session asked for, or, when it asked for none, in the default scope (`user`) that every session naming
none gets, never in the starter's. The model's fold of the changelog then holds the memory like any other write.
"""

from __future__ import annotations

import json
import os
import socket
from contextlib import contextmanager

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import reach
from harness import POLICY, SENTENCES, ReplicationHarness
from helpers import wait_until

STARTERS = [{"MNEMOSYNC_SCOPE": "project:x"}, {"CLAUDE_PROJECT_DIR": "/home/dev/src/x"}]
"""What the environment of the session that started the agent may say: both mean `project:x`."""
SESSION_SCOPES = "sessions of different scopes on one agent each wrote to their own"


@contextmanager
def _environment(values: dict[str, str]):
    """The process environment with `values` set (the agent's, as the starting session left it), then restored."""
    saved = {k: os.environ.get(k) for k in ("MNEMOSYNC_SCOPE", "CLAUDE_PROJECT_DIR")}
    for k in saved:
        os.environ.pop(k, None)
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Session:
    """One MCP session over a socket, spoken line by line as a relay carries it."""

    def __init__(self, sock: socket.socket):
        self.sock, self.lines, self.next_id = sock, sock.makefile("rb"), 0

    def send(self, message: dict) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.lines.readline()
            assert line, f"the agent closed the session during {method}"
            message = json.loads(line)
            if message.get("id") == self.next_id and "method" not in message:
                assert "error" not in message, f"{method} failed: {message['error']}"
                return message["result"]

    def close(self) -> None:
        self.lines.close()
        self.sock.close()


class SessionScopeRules(ReplicationHarness):
    """The sessions step; see the module docstring."""

    @precondition(lambda self: self.up and any(a not in POLICY.scopes and not self.proxy.partitioned(a)
                                               for a in self.clients))
    @rule(asked=st.lists(st.sampled_from([None, "user", "project:x"]), min_size=2, max_size=3),
          starter=st.sampled_from(STARTERS), sentence=st.sampled_from(SENTENCES), pick=st.integers(0, 10))
    def sessions_on_one_agent_write_to_their_own_scopes(self, asked, starter, sentence, pick):
        from mnemosync.agent.cli_options import CONNECTION_FIELDS
        from mnemosync.shim.agent_sessions import SessionHost

        agents = sorted(a for a in self.clients if a not in POLICY.scopes and not self.proxy.partitioned(a))
        agent = agents[pick % len(agents)]
        client = self.clients[agent]
        reporter = client.remote.sessions_report
        host = SessionHost(client, connection={**dict.fromkeys(CONNECTION_FIELDS), "config_file": None})
        sessions, written = [], {}
        note(f"{agent}'s local agent, started by a session with {starter}, hosts sessions asking {asked}")
        try:
            with _environment(starter):
                for wanted in asked:
                    ours, theirs = socket.socketpair()
                    host.attach({"op": "mcp", **({"scope": wanted} if wanted else {})}, theirs)
                    session = _Session(ours)
                    sessions.append(session)
                    assert json.loads(session.lines.readline())["ok"] is True
                    session.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                   "clientInfo": {"name": "consistency", "version": "0"}})
                    session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                    text = self._text(sentence)
                    result = session.request("tools/call", {"name": "add_memory", "arguments": {"content": text}})
                    assert not result.get("isError"), result["content"][0]["text"]
                    out = result["structuredContent"]
                    if out.get("pending"):  # the server was away: the machine waits for it as for its own
                        [queued] = [p.op for p in client.outbox.pending() if p.op.memory_id == out["id"]]
                        self.made.add((agent, queued.op_id))
                        self.queued.setdefault(agent, []).append(queued.op_id)
                    else:
                        written[out["id"]] = wanted or "user"
        finally:
            for session in sessions:
                session.close()
            wait_until(lambda: host.attached() == 0, timeout=30, message="the sessions did not end")
            client.remote.sessions_report = reporter
        adds = {e.memory_id: e for e in self._entries() if e.op == "add"}
        stored = {memory_id: e.operation.add.scope for memory_id, e in adds.items()}
        for memory_id in written:
            if memory_id in adds:  # the agent's own operation, acknowledged
                self.made.add((agent, adds[memory_id].op_id))
                self.acknowledged[(agent, adds[memory_id].op_id)] = memory_id
        for memory_id, scope in written.items():
            assert stored.get(memory_id) == scope, (
                f"a session asking for {scope if scope != 'user' else 'no scope'} on an agent started with "
                f"{starter} wrote {memory_id} to {stored.get(memory_id)}, not {scope}")
        if None in asked:
            reach.reached(reach.OUTCOME, SESSION_SCOPES)
        reach.reached(reach.RULE, "sessions_on_one_agent_write_to_their_own_scopes")
