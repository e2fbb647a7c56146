#!/usr/bin/env python3
"""Benchmark the `search` and `add_memory` tool round trips through the MCP shim over stdio.

Starts a real `mnemosync serve` (plain text on loopback, a temporary data
directory), stores `--memories` memories, then runs `--calls` distinct
queries and `--calls` distinct new memories, each two ways:

* ``mcp``: `tools/call search` / `add_memory` from the real MCP client
  (`mcp.client.stdio`) to a `mnemosync-mcp` process: JSON-RPC over pipes to
  the relay and over its socket to the local agent (`mnemosync agent`, in a
  runtime directory of the run's own), argument validation, the AgentClient
  call, result conversion and structured output validation;
* ``direct``: `AgentClient.search` (query embedding, gRPC Search, decoding) /
  `AgentClient.add` (embedding, the Append round trip, the cache), the floor
  the shim adds to, in a fresh child process so it runs as alone as the shim
  does;
* ``embed``: the embedding alone (llama.cpp), the largest part of both.

Both paths embed every text (each is new to both embedders' caches): the
embedding is equal in both, so the difference is the shim's own work. The
texts of the two paths differ only in a suffix. Searches read the same
scopes with limit 10. Each run measures the MCP path, then the direct path;
the table shows p50/p95/mean in milliseconds, each the median over
``--repeats`` runs. The two paths are not interleaved call by call: two
llama.cpp processes embedding at the same moment on a small machine slow
each other down by an order of magnitude.

Examples:
    python ops/bench/bench_mcp.py
    python ops/bench/bench_mcp.py --calls 500 --memories 2000 --json bench_mcp.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import anyio  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

from mnemosync.agent.bulk import Item  # noqa: E402
from mnemosync.agent.client import AgentClient  # noqa: E402
from mnemosync.agent.client_settings import ClientSettings  # noqa: E402
from ops import local_agents  # noqa: E402
from ops.bench.environment import script_model, script_parser  # noqa: E402

SCOPE = "project:bench"
_READY = re.compile(r"mnemosync serving on (\S+)")
_SUBJECTS = ("deploy", "auth token", "database migration", "cache key", "retry policy", "release branch",
             "log rotation", "rate limit", "backup job", "feature flag", "config file", "test fixture")
_VERBS = ("uses", "requires", "breaks without", "was moved to", "is configured by", "depends on")
_OBJECTS = ("the staging cluster", "a nightly cron job", "the vault secret store", "the CI pipeline",
            "a Postgres advisory lock", "the ops/deploy.sh script", "an exponential backoff", "the monorepo")


def memory_text(i: int) -> str:
    """A distinct, plausible memory."""
    return (f"The {_SUBJECTS[i % len(_SUBJECTS)]} {_VERBS[(i // 3) % len(_VERBS)]} "
            f"{_OBJECTS[(i // 7) % len(_OBJECTS)]} (note {i}).")


def query_text(i: int, run: int) -> str:
    """A distinct question (new to the embedder cache on each run)."""
    return f"what does the {_SUBJECTS[(i * 5) % len(_SUBJECTS)]} rely on? ({run}-{i})"


def start_server(data_dir: Path, model: Path) -> tuple[subprocess.Popen, str]:
    """`mnemosync serve` on a free loopback port; returns the process and its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mnemosync.cli", "serve", "--data-dir", str(data_dir), "--listen",
         "127.0.0.1:0", "--insecure", "--synchronous", "normal", "--embed-model", str(model)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    found: list[str] = []
    ready = threading.Event()

    def pump():
        for line in proc.stderr:
            match = _READY.search(line)
            if match and not found:
                found.append(match.group(1))
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60):
        proc.kill()
        raise SystemExit("the server did not start within 60 s")
    return proc, found[0]


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p95 and mean of samples in seconds, as milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"p50_ms": statistics.median(ordered) * 1000, "p95_ms": p95 * 1000,
            "mean_ms": statistics.fmean(ordered) * 1000}


def bench_direct(settings: ClientSettings, queries: list[str], memories: list[str]) -> dict[str, list[float]]:
    """Times AgentClient.search for each query and AgentClient.add for each memory, then the embedding alone for
    as many new texts of each."""
    samples: dict[str, list[float]] = {"search.direct": [], "search.embed": [], "add.direct": [], "add.embed": []}
    with AgentClient(settings, live=True) as client:
        client.search("warm up the model and the channel", scopes=(SCOPE, "user"))
        for query in queries:
            started = time.perf_counter()
            client.search(query, limit=10, scopes=(SCOPE, "user"))
            samples["search.direct"].append(time.perf_counter() - started)
        for memory in memories:
            started = time.perf_counter()
            client.add(f"{memory} (direct)")
            samples["add.direct"].append(time.perf_counter() - started)
        for tool, texts in (("search", queries), ("add", memories)):
            for text in texts:
                started = time.perf_counter()
                client.embedder.embed(f"{text} (embedding only)")
                samples[f"{tool}.embed"].append(time.perf_counter() - started)
    return samples


async def bench_mcp(env: dict[str, str], queries: list[str], memories: list[str]) -> dict[str, list[float]]:
    """Times tools/call search for each query and tools/call add_memory for each memory through a shim process."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "mnemosync.shim"], env=env)
    samples: dict[str, list[float]] = {"search.mcp": [], "add.mcp": []}
    calls = [("search", {"query": query, "limit": 10}) for query in queries]
    calls += [("add_memory", {"content": f"{memory} (mcp)"}) for memory in memories]
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()  # the client caches output schemas to validate results
            await session.call_tool("search", {"query": "warm up the model and the channel"})
            for tool, arguments in calls:
                started = time.perf_counter()
                result = await session.call_tool(tool, arguments)
                samples["add.mcp" if tool == "add_memory" else "search.mcp"].append(time.perf_counter() - started)
                if result.is_error:
                    raise SystemExit(f"{tool} failed: {result.content[0].text}")
    return samples


def direct_in_child(address: str, cache_dir: Path, model: Path, queries: list[str],
                    memories: list[str]) -> dict[str, list[float]]:
    """bench_direct in a fresh process, as clean as the shim's (no MCP client, no event loop beside it)."""
    done = subprocess.run(
        [sys.executable, __file__, "--direct-child",
         json.dumps([address, str(cache_dir), str(model), queries, memories])],
        capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--memories", type=int, default=500, help="memories stored first (default 500)")
    parser.add_argument("--calls", type=int, default=200,
                        help="timed searches, and as many adds, per run and path (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per path; the median run counts (default 3)")
    parser.add_argument("--direct-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.direct_child:
        address, cache_dir, model_path, queries, memories = json.loads(args.direct_child)
        settings = ClientSettings(server=address, agent_id=Path(cache_dir).name, insecure=True,
                                  cache_dir=Path(cache_dir), embed_model=Path(model_path), scope=SCOPE)
        print(json.dumps(bench_direct(settings, queries, memories)))
        return 0

    model = script_model(args)
    with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
        root = Path(tmp)
        proc, address = start_server(root / "server", model)
        try:
            seed = ClientSettings(server=address, agent_id="seeder", insecure=True, cache_dir=root / "seeder",
                                  embed_model=model, scope=SCOPE)
            started = time.perf_counter()
            with AgentClient(seed, live=False) as client:
                client.add_many([Item(key=f"seed {i}", content=memory_text(i), type="fact",
                                      tags=(_SUBJECTS[i % len(_SUBJECTS)].split()[0],)) for i in range(args.memories)])
            print(f"stored {args.memories} memories in {time.perf_counter() - started:.1f}s", file=sys.stderr)

            runs: dict[str, list[dict[str, float]]] = {f"{tool}.{path}": [] for tool in ("search", "add")
                                                       for path in ("mcp", "direct", "embed")}
            for run in range(args.repeats):
                queries = [query_text(i, run) for i in range(args.calls)]
                memories = [f"{memory_text(args.memories + i)} (run {run})" for i in range(args.calls)]
                env = {"MNEMOSYNC_SERVER": address, "MNEMOSYNC_AGENT_ID": f"mcp{run}", "MNEMOSYNC_INSECURE": "1",
                       "MNEMOSYNC_CACHE_DIR": str(root / f"mcp{run}"), "MNEMOSYNC_EMBED_MODEL": str(model),
                       "MNEMOSYNC_SCOPE": SCOPE}
                if os.environ.get("PYTHONPATH"):
                    env["PYTHONPATH"] = os.environ["PYTHONPATH"]
                with local_agents.private_runtime() as runtime:  # the shim's local agent, stopped after the run
                    env["XDG_RUNTIME_DIR"] = str(runtime)
                    mcp_samples = anyio.run(bench_mcp, env, queries, memories)
                measured = {**mcp_samples,
                            **direct_in_child(address, root / f"direct{run}", model, queries, memories)}
                for path, samples in measured.items():
                    runs[path].append(percentiles(samples))
        finally:
            proc.terminate()
            proc.wait(30)

    medians = {path: {key: statistics.median(r[key] for r in results) for key in results[0]}
               for path, results in runs.items()}
    summary = {path: medians[f"search.{path}"] for path in ("mcp", "direct", "embed")}  # as ops/bench reads it
    summary["overhead_p50_ms"] = summary["mcp"]["p50_ms"] - summary["direct"]["p50_ms"]
    summary["add"] = {path: medians[f"add.{path}"] for path in ("mcp", "direct", "embed")}
    summary["add"]["overhead_p50_ms"] = summary["add"]["mcp"]["p50_ms"] - summary["add"]["direct"]["p50_ms"]
    print(f"tool round trips, {args.calls} calls each x {args.repeats} runs, {args.memories} memories, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}")
    print(f"{'tool':<8}{'path':<8}{'p50 ms':>10}{'p95 ms':>10}{'mean ms':>10}")
    for tool, table in (("search", summary), ("add", summary["add"])):
        for path in ("mcp", "direct", "embed"):
            s = table[path]
            print(f"{tool:<8}{path:<8}{s['p50_ms']:>10.2f}{s['p95_ms']:>10.2f}{s['mean_ms']:>10.2f}")
        print(f"{tool} MCP overhead at p50: {table['overhead_p50_ms']:.2f} ms")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": runs, "calls": args.calls,
                                         "memories": args.memories}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
