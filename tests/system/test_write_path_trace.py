"""`ops.imports --write-path`: one write traced through the relay, the local agent, the server and a second agent,
each module booked to the process it runs in."""

from __future__ import annotations

from ops.imports import AGENT, DRIVER, READER, RELAY, SERVER, SERVER_SIDE, SHIM, WRITER, package_of, trace_write


def test_one_traced_write_books_each_module_to_the_process_it_runs_in(tmp_path, model_path):
    seen = {side: set(modules) for side, modules in trace_write(tmp_path, model=model_path).seen.items()}
    assert seen[RELAY] == {"mnemosync.shim.relay"}
    assert {"mnemosync.shim.agent_sessions", "mnemosync.shim.session", "mnemosync.agent.write_path"} <= seen[WRITER]
    assert {"mnemosync.server.service", "mnemosync.server.ledger", "mnemosync.server.group_commit"} <= seen[SERVER_SIDE]
    assert "mnemosync.agent.sync" in seen[READER]
    assert [m for side in (RELAY, WRITER, READER) for m in seen[side] if package_of(m) == SERVER] == []
    assert [m for m in seen[SERVER_SIDE] if package_of(m) in (AGENT, SHIM)] == []
    assert DRIVER not in seen, "the thread playing Claude Code ran the project's code"
