"""Session start and memory (issue 29): one local agent per machine beside one whole agent per session, in one run.

One `mnemosync serve` subprocess is loaded with `--size` memories (synthetic vectors under the real model's
fingerprint, Appends of 500), then each design is measured with the real MCP client over stdio:

* ``agent``: `mnemosync-mcp` as shipped, a relay to the machine's one `mnemosync agent`;
* ``in-process``: `mnemosync-mcp --in-process`, the design before it (each session its own client, model and
  catch-up; sessions of one agent id share one cache, as they did).

For each: a **new machine** (no agent, empty cache): spawn to `initialize` answered and to the first `search`
answered; for the agent, **new sessions while it boots** (its catch-up and model load after the first session was
answered: sessions opened one after the other while its status says it has not booted, at most `--sessions`); then
**new sessions, warm**, on a machine that has one (the agent booted and live; for in-process, the cache the previous
session filled), `--sessions` of them one after the other, p50 and p95 (of the default 10, the p95 is the slowest: one
session slowed by another process on a loaded machine moves it); then **memory**: the resident set
(`VmRSS`, summed over every process the sessions need: the relays and the agent, or the in-process shims) of
one session and of eight at once, and of the agent alone with one session.

    .venv/bin/python -m ops.bench.bench_sessions --size 20000
    .venv/bin/python -m ops.bench.bench_sessions --size 100000 --json /tmp/sessions.json
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from mnemosync.v1 import memory_pb2 as pb
from ops import local_agents
from ops.bench.bench_append import add_operations
from ops.bench.environment import children_and, script_model, script_parser
from ops.bench.serverproc import REPO_ROOT, Client
from ops.bench.speed import model_proto
from ops.bench.workload import Workload
from ops.serve_process import ServeProcess

DESIGNS = ("agent", "in-process")
QUERY = "which service keeps the deploy logs the longest?"


def load(address: str, size: int, model: pb.EmbeddingModel, log) -> float:
    """Loads `size` memories; returns memories/s."""
    client, workload, started = Client(address), Workload(), time.perf_counter()
    for start in range(0, size, 5000):
        ops, _ = add_operations(workload, start, min(5000, size - start))
        for i in range(0, len(ops), 500):
            client.append(pb.AppendRequest(operations=ops[i:i + 500], embedding_model=model))
        log(f"loaded {start + len(ops):,} of {size:,} memories")
    return size / (time.perf_counter() - started)


def environment(address: str, model: Path, cache: Path, runtime: Path) -> dict[str, str]:
    """What a Claude Code `.mcp.json` entry gives `mnemosync-mcp` (one agent id for every session)."""
    return {**os.environ, "MNEMOSYNC_SERVER": address, "MNEMOSYNC_AGENT_ID": "bench", "MNEMOSYNC_INSECURE": "1",
            "MNEMOSYNC_CACHE_DIR": str(cache), "MNEMOSYNC_EMBED_MODEL": str(model), "XDG_RUNTIME_DIR": str(runtime),
            "MNEMOSYNC_SCOPE": "user", "MNEMOSYNC_TOOLS": "compact", "PYTHONPATH": str(REPO_ROOT)}


async def _open(stack: AsyncExitStack, params: StdioServerParameters, errlog) -> tuple[ClientSession, float, float]:
    """Opens one session: (session, seconds from spawn to `initialize` answered, to the first search answered)."""
    spawned = time.perf_counter()
    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    initialized = time.perf_counter() - spawned
    result = await session.call_tool("search", {"query": QUERY, "all_scopes": True})
    if result.is_error:
        raise SystemExit(f"search failed: {result.content[0].text}")
    return session, initialized, time.perf_counter() - spawned


def rss_mb(pids: list[int]) -> float:
    """The resident set of `pids` together, in MB."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def session_pids(runtime: Path) -> list[int]:
    """This process's `mnemosync-mcp` children and the local agents serving in `runtime`."""
    shims = [p.pid for p in children_and() if b"mnemosync.shim" in p.command]
    return shims + [s["pid"] for s in local_agents.statuses(runtime)]


async def measure(design: str, address: str, model: Path, work: Path, sessions: int, log) -> dict:
    runtime, cache = local_agents.runtime_dir(), work / f"cache-{design}"
    env = environment(address, model, cache, runtime)
    params = StdioServerParameters(command=sys.executable, args=["-m", "mnemosync.shim"] + (
        ["--in-process"] if design == "in-process" else []), env=env)
    errlog = open(work / f"{design}.err", "w")  # noqa: SIM115 - closed below
    out: dict = {}
    try:
        async with AsyncExitStack() as stack:
            _, init, search = await _open(stack, params, errlog)
            out["new_machine"] = {"initialize_s": init, "first_search_s": search}
            log(f"{design}: new machine: initialize {init:.2f} s, first search {search:.2f} s")
            if design == "agent":
                out["new_session_booting"] = await _while_booting(params, errlog, runtime, sessions, log)
                # wait for the boot, so the next sessions start on a machine like any other
                deadline = time.monotonic() + 600
                while not _booted(runtime) and time.monotonic() < deadline:
                    await anyio.sleep(0.5)
                out["agent_rss_mb"] = rss_mb([s["pid"] for s in local_agents.statuses(runtime)])
            out["one_session_rss_mb"] = rss_mb(session_pids(runtime))
        inits, searches = [], []
        for _ in range(sessions):
            async with AsyncExitStack() as stack:
                _, init, search = await _open(stack, params, errlog)
                inits.append(init)
                searches.append(search)
        out["new_session"] = {"initialize_p50_s": statistics.median(inits), "initialize_p95_s": _p95(inits),
                              "first_search_p50_s": statistics.median(searches), "first_search_p95_s": _p95(searches),
                              "initialize_s": inits}
        log(f"{design}: new session: initialize p95 {out['new_session']['initialize_p95_s'] * 1000:.0f} ms, first "
            f"search p95 {out['new_session']['first_search_p95_s'] * 1000:.0f} ms")
        async with AsyncExitStack() as stack:
            for _ in range(8):
                await _open(stack, params, errlog)
            out["eight_sessions_rss_mb"] = rss_mb(session_pids(runtime))
        out["one_session_rss_mb"] = out.get("one_session_rss_mb") or 0.0
        log(f"{design}: resident memory: one session {out['one_session_rss_mb']:.0f} MB, eight "
            f"{out['eight_sessions_rss_mb']:.0f} MB")
    finally:
        errlog.close()
        local_agents.stop_agents(runtime)
        shutil.rmtree(runtime, ignore_errors=True)
    return out


def _booted(runtime: Path) -> bool:
    """Every agent serving in `runtime` has booted (caught up, live, model loaded)."""
    states = local_agents.statuses(runtime)
    return bool(states) and all(s.get("booted") and s.get("live") for s in states)


async def _while_booting(params: StdioServerParameters, errlog, runtime: Path, most: int, log) -> dict:
    """New sessions opened one after the other while the agent has not booted (at most `most`): seconds to
    `initialize` answered, p50 and slowest, of those that started before it had."""
    inits = []
    while len(inits) < most and not _booted(runtime):
        async with AsyncExitStack() as stack:
            _, init, _ = await _open(stack, params, errlog)
            inits.append(init)
    if not inits:
        log("agent: booted before a second session could start")
        return {"sessions": 0}
    log(f"agent: {len(inits)} new sessions while it booted: initialize p50 {statistics.median(inits) * 1000:.0f} ms, "
        f"slowest {max(inits) * 1000:.0f} ms")
    return {"sessions": len(inits), "initialize_p50_s": statistics.median(inits), "initialize_max_s": max(inits),
            "initialize_s": inits}


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def markdown(r: dict) -> str:
    agent, before = r["agent"], r["in-process"]
    rows = [("new machine: `initialize` answered (s)", "new_machine", "initialize_s", 1),
            ("new machine: first `search` answered (s)", "new_machine", "first_search_s", 1),
            ("new session, warm: `initialize` p50 (ms)", "new_session", "initialize_p50_s", 1000),
            ("new session, warm: `initialize` p95 (ms)", "new_session", "initialize_p95_s", 1000),
            ("new session, warm: first `search` p95 (ms)", "new_session", "first_search_p95_s", 1000)]
    lines = [f"{r['size']:,} memories; {r['sessions']} new sessions; load average {r['load_average']:.1f}", "",
             "| | one local agent | one agent per session (before) |", "| --- | ---: | ---: |"]
    for title, part, key, scale in rows:
        fmt = "{:.2f}" if scale == 1 else "{:.0f}"
        lines.append(f"| {title} | {fmt.format(agent[part][key] * scale)} | {fmt.format(before[part][key] * scale)} |")
    booting = agent.get("new_session_booting", {})
    if booting.get("sessions"):
        lines.insert(6, f"| new session while the agent boots ({booting['sessions']}): `initialize` p50 / slowest "
                        f"(ms) | {booting['initialize_p50_s'] * 1000:.0f} / {booting['initialize_max_s'] * 1000:.0f} "
                        "| |")
    lines.append(f"| resident memory, one session (MB) | {agent['one_session_rss_mb']:.0f} | "
                 f"{before['one_session_rss_mb']:.0f} |")
    lines.append(f"| of which the local agent (MB) | {agent['agent_rss_mb']:.0f} | |")
    lines.append(f"| resident memory, eight sessions (MB) | {agent['eight_sessions_rss_mb']:.0f} | "
                 f"{before['eight_sessions_rss_mb']:.0f} |")
    per_session = (agent["eight_sessions_rss_mb"] - agent["one_session_rss_mb"]) / 7
    lines += ["", f"Each session beyond the first adds {per_session:.0f} MB with one local agent; eight sessions use "
                  f"{agent['eight_sessions_rss_mb'] / before['one_session_rss_mb']:.2f}x what one session used before."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--size", type=int, default=20_000, help="memories in the store (default 20,000)")
    parser.add_argument("--sessions", type=int, default=10, help="new sessions timed per design (default 10)")
    args = parser.parse_args(argv)
    model = script_model(args)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as tmp:
        work = Path(tmp)
        with ServeProcess(work / "server", synchronous="normal", embed_model=model,
                          env={"PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT) as served:
            rate = load(served.address, args.size, model_proto(model), log)
            result: dict = {"size": args.size, "sessions": args.sessions, "load_memories_per_s": rate}
            for design in DESIGNS:
                result[design] = anyio.run(measure, design, served.address, model, work, args.sessions, log)
            result["load_average"] = os.getloadavg()[0]
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
