#!/usr/bin/env python3
"""Concurrent MCP writes, mnemosync beside a peer users know: the official MCP memory server.

Four MCP sessions at once each store `--calls` memories (default 50):

* ``peer``: `create_entities` (one entity with one observation per call) on the
  official `@modelcontextprotocol/server-memory`, four server processes sharing
  one `MEMORY_FILE_PATH`, as four Claude Code sessions configured alike would;
* ``mnemosync``: `add_memory` through four `mnemosync-mcp` shims against one
  `mnemosync serve` (each shim embeds its text with the real model: work the
  peer does not do).

Both are timed from the first call to the last answer, every session already
initialised and warmed up by one read call (`read_graph`; `search`, which loads
the shim's model); then what each kept is counted (entities in the peer's file,
memories on the server). The peer is installed with npm into
`ops/bench/.peer-cache/` (git-ignored) the first time; never at test time.

Examples:
    python ops/bench/bench_peer.py
    python ops/bench/bench_peer.py --calls 50 --sessions 4 --json peer.json
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import anyio  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from ops.bench.bench_mcp import memory_text, start_server  # noqa: E402
from ops.bench.environment import script_model, script_parser  # noqa: E402

PEER_PACKAGE = "@modelcontextprotocol/server-memory"
PEER_CACHE = Path(__file__).resolve().parent / ".peer-cache"


def install_peer() -> Path:
    """The peer's entry script, installed with npm into PEER_CACHE if it is not there yet."""
    script = PEER_CACHE / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
    if not script.exists():
        if shutil.which("npm") is None:
            raise SystemExit("npm is needed to install the peer (the official MCP memory server)")
        PEER_CACHE.mkdir(exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(PEER_CACHE), "--no-audit", "--no-fund", PEER_PACKAGE],
                       check=True, capture_output=True, text=True)
    return script


async def _sessions(params: list[StdioServerParameters], tool: str, arguments, calls: int,
                    warm_up: tuple[str, dict]) -> float:
    """Opens every session and makes one read call on each (`warm_up`: the shim loads its model then), then runs
    `calls` calls of `tool` on each at once; returns the seconds they took."""
    failures: list[str] = []
    async with anyio.create_task_group() as outer:
        ready = [anyio.Event() for _ in params]
        go = anyio.Event()
        finished = [anyio.Event() for _ in params]
        timing: dict[str, float] = {}

        async def session(i: int, p: StdioServerParameters) -> None:
            with open(os.devnull, "w") as errlog:
                async with stdio_client(p, errlog=errlog) as (read, write), ClientSession(read, write) as s:
                    await s.initialize()
                    await s.list_tools()
                    await s.call_tool(*warm_up)
                    ready[i].set()
                    await go.wait()
                    for n in range(calls):
                        result = await s.call_tool(tool, arguments(i, n))
                        if result.is_error:
                            failures.append(result.content[0].text if result.content else "error")
                    finished[i].set()

        for i, p in enumerate(params):
            outer.start_soon(session, i, p)
        for event in ready:
            await event.wait()
        timing["start"] = time.perf_counter()
        go.set()
        for event in finished:
            await event.wait()
        timing["end"] = time.perf_counter()
    if failures:
        print(f"{len(failures)} calls failed, first: {failures[0][:300]}", file=sys.stderr)
    return timing["end"] - timing["start"]


def run_peer(root: Path, sessions: int, calls: int) -> dict:
    script = install_peer()
    memory_file = root / "peer-memory.jsonl"
    params = [StdioServerParameters(command="node", args=[str(script)],
                                    env={**os.environ, "MEMORY_FILE_PATH": str(memory_file)}) for _ in range(sessions)]

    def arguments(i: int, n: int) -> dict:
        return {"entities": [{"name": f"session{i}-note{n}", "entityType": "note",
                              "observations": [memory_text(i * calls + n)]}]}

    seconds = anyio.run(_sessions, params, "create_entities", arguments, calls, ("read_graph", {}))
    kept = 0
    if memory_file.exists():
        for line in memory_file.read_text(encoding="utf-8").splitlines():
            try:
                kept += json.loads(line).get("type") == "entity"
            except json.JSONDecodeError:
                pass  # a torn line from two processes rewriting the file at once
    return {"seconds": seconds, "kept": kept, "sent": sessions * calls}


def run_mnemosync(root: Path, sessions: int, calls: int, model: Path) -> dict:
    from agent_client.remote import Remote

    proc, address = start_server(root / "server", model)
    try:
        params = []
        for i in range(sessions):
            env = {**os.environ, "MNEMOSYNC_SERVER": address, "MNEMOSYNC_AGENT_ID": f"session{i}",
                   "MNEMOSYNC_INSECURE": "1", "MNEMOSYNC_CACHE_DIR": str(root / f"session{i}"),
                   "MNEMOSYNC_EMBED_MODEL": str(model), "MNEMOSYNC_SCOPE": "project:bench"}
            params.append(StdioServerParameters(command=sys.executable, args=["-m", "mcp_shim"], env=env))

        def arguments(i: int, n: int) -> dict:
            return {"content": f"{memory_text(i * calls + n)} (session {i})"}

        seconds = anyio.run(_sessions, params, "add_memory", arguments, calls,
                            ("search", {"query": "warm up"}))
        remote = Remote(address, "bench-peer-count", insecure=True)
        try:
            kept = remote.stats().live_memories
        finally:
            remote.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return {"seconds": seconds, "kept": kept, "sent": sessions * calls}


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--sessions", type=int, default=4, help="concurrent MCP sessions (default 4)")
    parser.add_argument("--calls", type=int, default=50, help="writes per session (default 50)")
    args = parser.parse_args(argv)
    model = script_model(args)
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp:
        root = Path(tmp)
        peer = run_peer(root, args.sessions, args.calls)
        ours = run_mnemosync(root, args.sessions, args.calls, model)
    result = {"peer": peer, "mnemosync": ours, "ratio": ours["seconds"] / peer["seconds"],
              "sessions": args.sessions, "calls": args.calls}
    print(f"{args.sessions} MCP sessions x {args.calls} writes at once")
    for name, r in (("peer (official MCP memory server)", peer), ("mnemosync", ours)):
        print(f"{name:<36} kept {r['kept']:>4} of {r['sent']}  in {r['seconds']:.2f} s")
    print(f"mnemosync's wall time is {result['ratio']:.2f}x the peer's")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
