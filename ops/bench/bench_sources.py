#!/usr/bin/env python3
"""Measure source verification (issue 31): per memory, against reading and hashing the same files.

Builds a synthetic TypeScript tree (FILES files of FUNCTIONS functions each, about 6 KiB a file) and one memory
per file citing a function in it, with the hash recorded as a write records it. In the same run it times, per
memory:

* baseline: a plain read of the cited file and the SHA-256 of its bytes (the least any check can cost);
* check: `source_refs.check`, what `verify-memories` does per memory (stat, read, find the symbol, hash it);
* hook: `source_refs.staleness_note` with the tree, what the prompt hook and the session-start block do per
  memory they show (the same with the hook's file-size cap);
* end to end (unless --no-server): `mnemosync verify-memories` through a real server and agent, first when
  every status is new (one verify entry written per memory), then again when none changed (nothing written).

Medians over --rounds rounds, in microseconds per memory.

Example:
    python -m ops.bench.bench_sources [--files 300] [--memories 100] [--json sources.json]
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mnemosync.kernel import source_refs  # noqa: E402
from ops.bench.environment import script_model, script_parser  # noqa: E402

FUNCTIONS = 20


def make_tree(root: Path, files: int) -> list[list[dict]]:
    """Writes the tree; returns each file's memory sources (one cited function, its hash recorded)."""
    sources = []
    for i in range(files):
        body = "\n".join(
            f"export function handler{i}_{f}(request, options) {{\n"
            f"  const started = Date.now();\n  const value = request.body?.items?.[{f}] ?? options.fallback;\n"
            f"  if (!value) {{\n    throw new Error('missing item {f} in file {i}');\n  }}\n"
            f"  return {{ value, took: Date.now() - started, file: {i}, function: {f} }};\n}}\n"
            for f in range(FUNCTIONS))
        path = root / "src" / f"module{i // 50}" / f"file{i}.ts"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"import {{ log }} from './log';\n\n{body}")
        cited = [{"path": path.relative_to(root).as_posix(), "symbol": f"handler{i}_{i % FUNCTIONS}"}]
        sources.append(source_refs.record(root, cited, "0" * 40))
    return sources


def per_memory_us(runs: dict, items: list, rounds: int) -> dict[str, float]:
    """For each named run, the median over `rounds` of its time per item in microseconds; the runs take turns
    within each round, so a busy machine slows them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            started = time.perf_counter()
            for item in items:
                run(item)
            times[name].append((time.perf_counter() - started) / len(items) * 1e6)
    return {f"{name}_us": statistics.median(t) for name, t in times.items()}


def measure_local(root: Path, sources: list[list[dict]], rounds: int) -> dict:
    """Baseline, check and hook cost per memory over the tree."""
    def baseline(s):
        hashlib.sha256((root / s[0]["path"]).read_bytes()).hexdigest()

    def check(s):
        assert source_refs.check(root, s).status == "verified"

    def hook(s):
        assert source_refs.staleness_note(s, None, root, 0) == ""

    size = statistics.mean((root / s[0]["path"]).stat().st_size for s in sources)
    return {"memories": len(sources), "file_bytes": round(size),
            **per_memory_us({"baseline": baseline, "check": check, "hook": hook}, sources, rounds)}


def measure_end_to_end(root: Path, sources: list[list[dict]], model: Path, work: Path) -> dict:
    """verify-memories through a real server and agent: per memory, when every status is new and when none is."""
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings
    from ops.bench.serverproc import ServerProcess

    with ServerProcess(work / "server", synchronous="normal", embed_model=model).start() as server:
        settings = ClientSettings(server=server.address, agent_id="bench-verifier", insecure=True,
                                  cache_dir=work / "agent", embed_model=model, timeout=30.0)
        with AgentClient(settings) as client:
            for i, cited in enumerate(sources):
                client.add(f"handler {i} reads item {i % FUNCTIONS} of the request body", scope="project:bench",
                           sources=cited, root=root)
            started = time.perf_counter()
            first = client.verify_memories(scopes=["project:bench"], root=root)
            first_s = time.perf_counter() - started
            started = time.perf_counter()
            again = client.verify_memories(scopes=["project:bench"], root=root)
            again_s = time.perf_counter() - started
    assert all(o.written for o in first) and not any(o.written for o in again)
    return {"memories": len(sources), "first_us": first_s / len(first) * 1e6,
            "unchanged_us": again_s / len(again) * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--files", type=int, default=300, help="files in the tree, one memory each")
    parser.add_argument("--memories", type=int, default=100, help="memories verified end to end")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-server", action="store_true", help="skip the end-to-end figures")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-sources-") as tmp:
        root = Path(tmp) / "tree"
        sources = make_tree(root, args.files)
        results = {"local": measure_local(root, sources, args.rounds)}
        local = results["local"]
        print(f"per memory, {local['memories']} memories citing a function in a {local['file_bytes']}-byte file "
              f"(median of {args.rounds} rounds):")
        print(f"  baseline (read + SHA-256 of the file) {local['baseline_us']:8.1f} us")
        print(f"  verification check (source_refs.check) {local['check_us']:8.1f} us "
              f"({local['check_us'] / local['baseline_us']:.1f}x the baseline)")
        print(f"  hook source check (staleness_note)     {local['hook_us']:8.1f} us "
              f"({local['hook_us'] / local['baseline_us']:.1f}x the baseline)")
        if not args.no_server:
            e2e = measure_end_to_end(root, sources[:args.memories], script_model(args), Path(tmp))
            results["end_to_end"] = e2e
            print(f"verify-memories end to end, {e2e['memories']} memories: {e2e['first_us'] / 1000:.2f} ms per "
                  f"memory when each status is new (a verify entry each), {e2e['unchanged_us']:.0f} us when none "
                  "changed")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
