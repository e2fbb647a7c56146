"""The shim's MCP wire protocol, answer for answer (as JSON): what `mnemosync-mcp` answers to a fixed conversation
compared with the answers the MCP SDK's own server (`MCPServer`) gave before the shim served MCP itself
(`tests/data/mcp_golden.json`); and the agent that serves every session never loads the SDK.

Raw JSON-RPC lines over the process's stdio, so nothing on the client side smooths a difference over.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from helpers import AGENTS_RUNTIME, ServeProcess, wait_until

GOLDEN = Path(__file__).parent.parent / "data" / "mcp_golden.json"
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\dZ")
CLIENT_INFO = {"name": "golden-client", "version": "1.0"}

CONVERSATION: list[tuple[str, dict]] = [
    ("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT_INFO}),
    ("notifications/initialized", {}),
    ("ping", {}),
    ("tools/list", {}),
    ("tools/call", {"name": "list_recent", "arguments": {"hours": 1}}),
    ("tools/call", {"name": "get", "arguments": {"id": "0123456789abcdef"}}),
    ("tools/call", {"name": "search", "arguments": {"query": ""}}),
    ("tools/call", {"name": "search", "arguments": {"query": "x", "limit": "many", "tags": "[\"a\"]"}}),
    ("tools/call", {"name": "get", "arguments": {}}),
    ("tools/call", {"name": "no_such_tool", "arguments": {}}),
    ("tools/call", {"arguments": {}}),
    ("tools/call", {"name": "check_conflicts", "arguments": {"unexpected": 1}}),
    ("resources/list", {}),
    ("resources/templates/list", {}),
    ("prompts/list", {}),
    ("resources/read", {"uri": "memory://core"}),
    ("resources/read", {"uri": "memory://reflection"}),
    ("resources/read", {"uri": "memory://nowhere"}),
    ("resources/read", {}),
    ("logging/setLevel", {"level": "debug"}),
    ("completion/complete", {"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": ""}}),
    ("no/such/method", {}),
    ("notifications/cancelled", {"requestId": 99, "reason": "gone"}),
    ("ping", {}),
]
"""(method, params) sent in order; a method under notifications/ is sent without an id."""

VERSIONS = [("2025-03-26", "2025-03-26"), ("2025-11-25", "2025-11-25"), ("2024-11-05", "2024-11-05"),
            ("1999-01-01", "2025-11-25")]
"""(what a client asks for in `initialize`, what the SDK's server answered); the rest of its answers were the same
at every version."""


class RawMcp:
    """One `mnemosync-mcp` process spoken to in raw JSON-RPC lines."""

    def __init__(self, env: dict[str, str], stderr: Path, *args: str):
        self.errlog = open(stderr, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([sys.executable, "-m", "mnemosync.shim", *args], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.errlog, text=True, bufsize=1)
        self.lines: queue.Queue[str] = queue.Queue()
        self.next_id = 1
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, method: str, params: dict | None, *, request: bool = True) -> int | None:
        message: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        ident = None
        if request:
            ident, self.next_id = self.next_id, self.next_id + 1
            message["id"] = ident
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return ident

    def answer(self, ident: int, timeout: float = 60.0) -> dict:
        """The answer to request `ident` (other messages before it are skipped)."""
        def arrived():
            try:
                message = json.loads(self.lines.get(timeout=0.2))
            except queue.Empty:
                return None
            return message if message.get("id") == ident else None

        return wait_until(arrived, timeout=timeout, interval=0, message=f"no answer to request {ident}")

    def ask(self, method: str, params: dict | None) -> dict:
        ident = self.send(method, params)
        assert ident is not None
        return self.answer(ident)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.errlog.close()


def converse(mcp: RawMcp) -> list[dict]:
    """The answers to `CONVERSATION`, ids removed, the package version and the times masked."""
    answers = []
    for method, params in CONVERSATION:
        if method.startswith("notifications/"):
            mcp.send(method, params, request=False)
            continue
        answer = mcp.ask(method, params)
        answer.pop("id")
        info = answer.get("result", {}).get("serverInfo")
        if info:
            info["version"] = "<version>"
        answers.append({"request": [method, params], "answer": json.loads(TIME.sub("<time>", json.dumps(answer)))})
    return answers


def shim_env(address: str, cache_dir: Path, model: Path, **extra: str) -> dict[str, str]:
    env = {"MNEMOSYNC_SERVER": address, "MNEMOSYNC_AGENT_ID": "golden", "MNEMOSYNC_INSECURE": "1",
           "MNEMOSYNC_CACHE_DIR": str(cache_dir), "MNEMOSYNC_EMBED_MODEL": str(model), "MNEMOSYNC_TIMEOUT": "5",
           "CLAUDE_PROJECT_DIR": "/home/dev/src/golden", "MNEMOSYNC_TOOLS": "all", "MNEMOSYNC_CHANNEL": "1",
           "XDG_RUNTIME_DIR": str(AGENTS_RUNTIME), "MNEMOSYNC_AGENT_IDLE_MINUTES": "0.1",
           "PATH": os.environ.get("PATH", ""), **extra}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_path):
    with ServeProcess(tmp_path_factory.mktemp("golden") / "server", embed_model=model_path) as served:
        yield served


@pytest.mark.parametrize("mode", ["--in-process", "--relay"])
def test_the_shim_answers_a_conversation_exactly_as_the_mcp_sdk_server_did(server, tmp_path, model_path, mode):
    mcp = RawMcp(shim_env(server.address, tmp_path / "cache", model_path), tmp_path / "shim.err", mode)
    try:
        answers = converse(mcp)
    finally:
        mcp.close()
    golden = json.loads(GOLDEN.read_text())
    assert len(answers) == len(golden)
    for got, want in zip(answers, golden, strict=True):
        assert got == want, f"{got['request']}: {got['answer']}"


def test_initialize_answers_the_clients_protocol_version_when_supported_else_the_newest(server, tmp_path,
                                                                                        model_path):
    env = shim_env(server.address, tmp_path / "cache", model_path)
    for asked, answered in VERSIONS:
        mcp = RawMcp(env, tmp_path / "shim.err", "--relay")
        try:
            result = mcp.ask("initialize", {"protocolVersion": asked, "capabilities": {}, "clientInfo": CLIENT_INFO})
            listed = mcp.ask("tools/list", {})
        finally:
            mcp.close()
        assert result["result"]["protocolVersion"] == answered
        assert {"title", "outputSchema", "annotations"} <= listed["result"]["tools"][0].keys()


SITECUSTOMIZE = """
import atexit, json, os, sys

def _report():
    names = sorted(m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types"))
    with open(os.path.join(os.environ["MODULES_REPORT_DIR"], f"{os.getpid()}.json"), "w") as out:
        json.dump({"argv": sys.argv, "mcp": names, "pydantic": "pydantic" in sys.modules}, out)

atexit.register(_report)
"""
"""Makes every Python process of the test write, as it exits, which of the MCP SDK's modules it loaded."""


def test_neither_the_agent_nor_an_in_process_shim_loads_the_mcp_sdk(server, tmp_path, model_path):
    from test_mcp_shim import run_shim

    hooks, reports = tmp_path / "hooks", tmp_path / "reports"
    hooks.mkdir()
    reports.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    runtime = Path(tempfile.mkdtemp(prefix="mnemosync-sdk-"))  # short: a socket path has at most 107 bytes
    pythonpath = os.pathsep.join(p for p in (str(hooks), os.environ.get("PYTHONPATH")) if p)
    env = shim_env(server.address, tmp_path / "cache", model_path, PYTHONPATH=pythonpath,
                   MODULES_REPORT_DIR=str(reports), XDG_RUNTIME_DIR=str(runtime))
    for mode in ("0", "1"):
        with run_shim({**env, "MNEMOSYNC_IN_PROCESS": mode}, tmp_path / f"shim{mode}.err") as shim:
            shim.ok("list_recent", {})
            assert shim.portal.call(shim.session.read_resource, "memory://core").contents

    def exited() -> dict | None:
        found = {}
        for report in reports.glob("*.json"):
            data = json.loads(report.read_text())
            argv = " ".join(data["argv"])
            kind = "agent" if " agent" in argv else "in-process" if "--in-process" in argv or data["pydantic"] \
                else "relay"
            found.setdefault(kind, []).append(data)
        return found if {"agent", "in-process", "relay"} <= found.keys() else None

    try:
        found = wait_until(exited, timeout=60, message=lambda: f"not every process reported: {list(reports.iterdir())}")
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
    for kind, processes in found.items():
        for process in processes:
            assert process["mcp"] == [], f"the {kind} process {process['argv']} loaded {process['mcp'][:5]}"


def record(address: str, cache_dir: Path, model: Path, stderr: Path) -> None:
    """Writes `GOLDEN` from the running code's answers (how the file was made, from the SDK's server)."""
    mcp = RawMcp(shim_env(address, cache_dir, model), stderr, "--in-process")
    try:
        lines = (json.dumps(answer, ensure_ascii=False, sort_keys=True) for answer in converse(mcp))
        GOLDEN.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    finally:
        mcp.close()
