#!/usr/bin/env python3
"""Concurrent MCP writes, mnemosync beside a peer users know: the official MCP memory server.

Four MCP sessions at once each store `--calls` memories (default 50):

* ``peer``: `create_entities` (one entity with one observation per call) on the
  official `@modelcontextprotocol/server-memory`, four server processes sharing
  one `MEMORY_FILE_PATH`, as four Claude Code sessions configured alike would;
* ``mnemosync``: `add_memory` through four `mnemosync-mcp` sessions of one
  agent against one `mnemosync serve`: the four relays share the machine's one
  local agent (`mnemosync agent`), which embeds every text with the real model
  (work the peer does not do), packing the sessions' texts that wait at once
  into one pass.

Both are timed from the first call to the last answer, every session already
initialised and warmed up by one read call (`read_graph`; `search`); then what
each kept is counted (entities in the peer's file, memories on the server).
Process start (spawn to the `initialize` answer) is reported apart, and for the
shims also the parts of their boot (from their INFO log: boot sync, model load
and first pass).

Where mnemosync's time goes: the same four-way concurrency, the same number of
calls, run three more ways against the same server, each in four fresh child
processes started together once all are ready:

* ``embed``: `Embedder.embed` of each text alone (the model, nothing else);
* ``direct``: `AgentClient.add` (live stream on, as in the shim), each call split
  into its embedding and the rest (the Append round trip and the cache);
* ``mcp``: the shims above.

So the embedding's wall is `embed`, the Append round trip's is `direct - embed`
and the shim's own work (JSON-RPC over stdio, validation, results, news) is
`mcp - direct`. Run with `--repeats N` to repeat everything N times.
The peer is installed with npm into `ops/bench/.peer-cache/` (git-ignored) the
first time; never at test time.

Examples:
    python ops/bench/bench_peer.py
    python ops/bench/bench_peer.py --calls 50 --sessions 4 --repeats 2 --json peer.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
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

from ops import local_agents  # noqa: E402
from ops.bench.bench_mcp import memory_text, percentiles, start_server  # noqa: E402
from ops.bench.environment import children_and, script_model, script_parser  # noqa: E402

PEER_PACKAGE = "@modelcontextprotocol/server-memory"
PEER_CACHE = Path(__file__).resolve().parent / ".peer-cache"
SCOPE = "project:bench"


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


def cpu_seconds(agents_runtime: Path | None = None) -> dict[str, float]:
    """CPU seconds used so far by this process (the MCP client), by its child processes and by the local agents
    serving in `agents_runtime` (the shims'), by kind."""
    used = {"client": time.process_time(), "shims": 0.0, "server": 0.0, "peer": 0.0, "other": 0.0}
    agents = {s["pid"] for s in local_agents.statuses(agents_runtime)} if agents_runtime else set()
    for p in children_and(agents):
        kind = ("shims" if b"mnemosync.shim" in p.command or p.pid in agents
                else "server" if b"mnemosync.cli" in p.command else "peer" if b"server-memory" in p.command
                else "other")
        used[kind] += p.cpu_seconds
    return used


def text(stage: str, i: int, n: int, calls: int) -> str:
    """The memory session `i` writes in call `n` of a stage (distinct across stages, so none is a duplicate)."""
    return f"{memory_text(i * calls + n)} (session {i}, {stage})"


async def _sessions(params: list[StdioServerParameters], tool: str, arguments, calls: int,
                    warm_up: tuple[str, dict], errlogs: list[Path], agents_runtime: Path | None = None) -> dict:
    """Opens every session (timing spawn to `initialize` answered) and makes one read call on each (`warm_up`),
    then runs `calls` calls of `tool` on each at once; returns the seconds from the first call to the last answer,
    each session's start seconds and every call's seconds."""
    failures: list[str] = []
    starts: list[float] = [0.0] * len(params)
    latencies: list[float] = []
    async with anyio.create_task_group() as outer:
        ready = [anyio.Event() for _ in params]
        go = anyio.Event()
        finished = [anyio.Event() for _ in params]
        counted = anyio.Event()  # sessions stay open until their CPU is counted
        timing: dict[str, float] = {}

        async def session(i: int, p: StdioServerParameters) -> None:
            with open(errlogs[i], "w") as errlog:
                spawned = time.perf_counter()
                async with stdio_client(p, errlog=errlog) as (read, write), ClientSession(read, write) as s:
                    await s.initialize()
                    starts[i] = time.perf_counter() - spawned
                    await s.list_tools()
                    await s.call_tool(*warm_up)
                    ready[i].set()
                    await go.wait()
                    for n in range(calls):
                        called = time.perf_counter()
                        result = await s.call_tool(tool, arguments(i, n))
                        latencies.append(time.perf_counter() - called)
                        if result.is_error:
                            failures.append(result.content[0].text if result.content else "error")
                    finished[i].set()
                    await counted.wait()

        for i, p in enumerate(params):
            outer.start_soon(session, i, p)
        for event in ready:
            await event.wait()
        cpu_before = cpu_seconds(agents_runtime)
        timing["start"] = time.perf_counter()
        go.set()
        for event in finished:
            await event.wait()
        timing["end"] = time.perf_counter()
        cpu = {kind: used - cpu_before[kind] for kind, used in cpu_seconds(agents_runtime).items()
               if used - cpu_before[kind]}
        counted.set()
    if failures:
        print(f"{len(failures)} calls failed, first: {failures[0][:300]}", file=sys.stderr)
    return {"seconds": timing["end"] - timing["start"], "process_start_s": statistics.fmean(starts),
            "call": percentiles(latencies), "failed": len(failures), "cpu_s": cpu}


def run_peer(root: Path, sessions: int, calls: int) -> dict:
    script = install_peer()
    memory_file = root / "peer-memory.jsonl"
    memory_file.unlink(missing_ok=True)
    params = [StdioServerParameters(command="node", args=[str(script)],
                                    env={**os.environ, "MEMORY_FILE_PATH": str(memory_file)}) for _ in range(sessions)]

    def arguments(i: int, n: int) -> dict:
        return {"entities": [{"name": f"session{i}-note{n}", "entityType": "note",
                              "observations": [text("peer", i, n, calls)]}]}

    timed = anyio.run(_sessions, params, "create_entities", arguments, calls, ("read_graph", {}),
                      [root / f"peer{i}.log" for i in range(sessions)])
    kept = 0
    if memory_file.exists():
        for line in memory_file.read_text(encoding="utf-8").splitlines():
            try:
                kept += json.loads(line).get("type") == "entity"
            except json.JSONDecodeError:
                pass  # a torn line from two processes rewriting the file at once
    return {**timed, "kept": kept, "sent": sessions * calls}


def _client_env(address: str, agent: str, root: Path, model: Path) -> dict[str, str]:
    return {**os.environ, "MNEMOSYNC_SERVER": address, "MNEMOSYNC_AGENT_ID": agent, "MNEMOSYNC_INSECURE": "1",
            "MNEMOSYNC_CACHE_DIR": str(root / agent), "MNEMOSYNC_EMBED_MODEL": str(model), "MNEMOSYNC_SCOPE": SCOPE}


def run_mcp(root: Path, address: str, sessions: int, calls: int, model: Path, stage: str, runtime: Path) -> dict:
    """The shims' run: timed calls and process start (spawn to `initialize`: the agent boots in the background)."""
    params = [StdioServerParameters(command=sys.executable, args=["-m", "mnemosync.shim"],
                                    env={**_client_env(address, stage, root, model), "MNEMOSYNC_LOG_LEVEL": "INFO",
                                         "XDG_RUNTIME_DIR": str(runtime)}) for i in range(sessions)]
    logs = [root / f"{stage}{i}.log" for i in range(sessions)]

    def arguments(i: int, n: int) -> dict:
        return {"content": text(stage, i, n, calls)}

    try:
        return anyio.run(_sessions, params, "add_memory", arguments, calls, ("search", {"query": "warm up"}), logs,
                         runtime)
    finally:
        local_agents.stop_agents(runtime)


def run_children(root: Path, address: str, sessions: int, calls: int, model: Path, stage: str, name: str) -> dict:
    """`sessions` child processes of this script running `stage` ("embed" or "direct") as agents `name`0, 1, ...,
    released together once every one is ready; the wall is from the first call of any to the last answer of any."""
    logs = [open(root / f"{name}{i}.log", "w") for i in range(sessions)]  # noqa: SIM115 - closed below
    children = [subprocess.Popen([sys.executable, __file__, "--child", json.dumps(
        [stage, name, i, calls, address, str(root), str(model)])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=logs[i], text=True) for i in range(sessions)]
    try:
        for i, child in enumerate(children):
            if child.stdout.readline().strip() != "ready":
                raise SystemExit(f"a {stage} child failed to start: {(root / f'{name}{i}.log').read_text()}")
        cpu_before = cpu_seconds()
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        results = [json.loads(child.stdout.readline()) for child in children]
        server_cpu = cpu_seconds()["server"] - cpu_before["server"]
    finally:
        for child in children:
            child.wait(60)
        for log in logs:
            log.close()
    out = {"seconds": max(r["end"] for r in results) - min(r["start"] for r in results),
           "call": percentiles([c for r in results for c in r["calls"]]),
           "cpu_s": {"children": sum(r["cpu"] for r in results), "server": server_cpu}}
    if stage == "direct":
        out["embed"] = percentiles([c for r in results for c in r["embed"]])
        out["rest"] = percentiles([c - e for r in results for c, e in zip(r["calls"], r["embed"], strict=True)])
    return out


def child(stage: str, name: str, i: int, calls: int, address: str, root: str, model: str) -> None:
    """One child of `run_children`: loads (and warms) what its stage needs, says ready, waits for go, runs, and
    prints its timings and CPU seconds."""
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import load

    settings = load(environ=_client_env(address, f"{name}{i}", Path(root), Path(model)))
    texts = [text(stage, i, n, calls) for n in range(calls)]
    result: dict[str, list[float] | float] = {"calls": [], "embed": []}
    with AgentClient(settings, live=stage == "direct") as client:
        embedder = client.embedder
        embedder.embed("warm up")
        print("ready", flush=True)
        sys.stdin.readline()
        cpu = time.process_time()
        result["start"] = time.perf_counter()
        for content in texts:
            called = time.perf_counter()
            embedder.embed(content)
            embedded = time.perf_counter()
            if stage == "direct":
                client.add(content)  # the vector is in the embedder's cache now
            result["calls"].append(time.perf_counter() - called)
            result["embed"].append(embedded - called)
        result["end"] = time.perf_counter()
        result["cpu"] = time.process_time() - cpu
    print(json.dumps(result), flush=True)


def count_kept(address: str) -> int:
    from mnemosync.agent.remote import Remote

    remote = Remote(address, "bench-peer-count", insecure=True)
    try:
        return remote.stats().live_memories
    finally:
        remote.close()


def run_mnemosync(root: Path, sessions: int, calls: int, model: Path, repeat: int, runtime: Path) -> dict:
    proc, address = start_server(root / f"server{repeat}", model)
    try:
        before = count_kept(address)
        out = {"mcp": run_mcp(root, address, sessions, calls, model, f"mcp{repeat}-", runtime)}
        out["mcp"]["kept"] = count_kept(address) - before
        out["mcp"]["sent"] = sessions * calls
        for stage in ("embed", "direct"):
            out[stage] = run_children(root, address, sessions, calls, model, stage, f"{stage}{repeat}-")
    finally:
        proc.terminate()
        proc.wait(30)
    mcp_cpu, embed_cpu, direct_cpu = out["mcp"]["cpu_s"], out["embed"]["cpu_s"], out["direct"]["cpu_s"]
    out["split"] = {
        "wall_s": {"embedding": out["embed"]["seconds"],
                   "append_round_trip": out["direct"]["seconds"] - out["embed"]["seconds"],
                   "shim": out["mcp"]["seconds"] - out["direct"]["seconds"]},
        "cpu_s": {"embedding": embed_cpu["children"],
                  "agent_client": direct_cpu["children"] - embed_cpu["children"],
                  "shim": mcp_cpu.get("shims", 0.0) - direct_cpu["children"],
                  "server": mcp_cpu.get("server", 0.0), "mcp_client": mcp_cpu.get("client", 0.0)}}
    return out


def report(peer: dict, ours: dict, sessions: int, calls: int) -> None:
    mcp, split = ours["mcp"], ours["split"]
    print(f"{sessions} MCP sessions x {calls} writes at once; wall from the first call to the last answer")
    print(f"  peer (official MCP memory server) kept {peer['kept']:>4} of {peer['sent']} in {peer['seconds']:.2f} s "
          f"(call p50 {peer['call']['p50_ms']:.1f} ms); process start {peer['process_start_s']:.2f} s; CPU s: "
          + ", ".join(f"{k} {v:.2f}" for k, v in peer["cpu_s"].items()))
    print(f"  mnemosync                         kept {mcp['kept']:>4} of {mcp['sent']} in {mcp['seconds']:.2f} s "
          f"(call p50 {mcp['call']['p50_ms']:.1f} ms); process start {mcp['process_start_s']:.2f} s")
    print(f"  mnemosync's wall time is {mcp['seconds'] / peer['seconds']:.2f}x the peer's")
    print(f"  same concurrency, one part at a time: embedding alone {ours['embed']['seconds']:.2f} s (call p50 "
          f"{ours['embed']['call']['p50_ms']:.1f} ms); AgentClient.add {ours['direct']['seconds']:.2f} s (p50 "
          f"embedding {ours['direct']['embed']['p50_ms']:.1f} ms + the rest {ours['direct']['rest']['p50_ms']:.1f} ms)")
    print("  wall split by difference of the stages (s; noisy when the machine is shared): "
          + ", ".join(f"{k} {v:.2f}" for k, v in split["wall_s"].items()))
    print("  CPU seconds by part (embedding, agent_client: from their stages; the rest: the MCP run): "
          + ", ".join(f"{k} {v:.2f}" for k, v in split["cpu_s"].items()))


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--sessions", type=int, default=4, help="concurrent MCP sessions (default 4)")
    parser.add_argument("--calls", type=int, default=50, help="writes per session (default 50)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of everything, one after the other (default 1)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*json.loads(args.child))
        return 0
    model = script_model(args)
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-peer-") as tmp, local_agents.private_runtime() as runtime:
        root = Path(tmp)
        for repeat in range(args.repeats):
            peer = run_peer(root, args.sessions, args.calls)
            ours = run_mnemosync(root, args.sessions, args.calls, model, repeat, runtime)
            runs.append({"peer": peer, "mnemosync": ours, "ratio": ours["mcp"]["seconds"] / peer["seconds"],
                         "load_average": os.getloadavg()})
            print(f"run {repeat + 1} of {args.repeats}, load {os.getloadavg()[0]:.1f}")
            report(peer, ours, args.sessions, args.calls)
    if args.json:
        args.json.write_text(json.dumps({"sessions": args.sessions, "calls": args.calls, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
