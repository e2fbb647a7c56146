#!/usr/bin/env python3
"""Benchmark the cost of the transparency log: appends and sync with checkpoints, against the code before them.

The same workload runs, in alternating rounds, against two source trees in
separate processes: this checkout (the Merkle tree kept in every append
transaction, signed checkpoints closing every page of a sync, the agent's
frontier, root and consistency checks) and the previous code path (the tree as
it was before the transparency log, exported with `git archive`, default: the
parent of the commit that added `proto/mnemosync/kernel/merkle.py`). Each round starts a
development server over a fresh SQLite file in-process and measures, through the
agent client's `Remote`:

* ``batched append``: the preload, Append calls of 500 adds with 384-d vectors (memories/s);
* ``single append``: one add per Append call (median latency);
* ``catch-up``: a fresh agent cache syncing every entry (`mnemosync.agent.sync.catch_up`, entries/s);
* ``verify``: the store's check of the whole log (the server's start-up check in this checkout: chain,
  blanked entries and the Merkle tree; before it: the chain alone);
* ``checkpoint``: GetCheckpoint of the head with a consistency proof (this checkout only; median latency).

The table shows the median over rounds of each and the ratio this checkout /
previous (for latency, above 1.00 is slower; for rates, below 1.00 is slower).

Examples:
    python ops/bench/bench_checkpoints.py
    python ops/bench/bench_checkpoints.py --rounds 5 --preload 20000 --appends 1000 --json checkpoints.json
    python ops/bench/bench_checkpoints.py --baseline main~3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DIMS = 384


def _worker(preload: int, appends: int, seed: int) -> dict:
    """One round against the tree on PYTHONPATH (imports only from there)."""
    import numpy as np

    from mnemosync.agent.cache import Cache
    from mnemosync.agent.remote import Remote
    from mnemosync.agent.sync import catch_up
    from mnemosync.kernel.limits import Limits
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.kernel.operations import OpRequest, validate
    from mnemosync.server.app import run_server
    from mnemosync.server.settings import ServerSettings

    model = ModelInfo(name="bench-vectors", dimensions=DIMS, sha256="cd" * 32)
    rng = np.random.default_rng(seed)

    def add(i: int):
        v = rng.normal(size=DIMS)
        op = OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                       {"scope": "user", "content": f"bench memory {seed} {i} {uuid.uuid4().hex[:8]}"},
                       (v / np.linalg.norm(v)).astype(np.float32).tolist())
        return validate(op, Limits(), model)

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = ServerSettings(data_dir=Path(tmp) / "server", listen="127.0.0.1:0", insecure=True,
                                  synchronous="normal")
        with run_server(settings) as running:
            remote = Remote(running.address, "bench", insecure=True, timeout=120)
            batches = [[add(i + j) for j in range(min(500, preload - i))] for i in range(0, preload, 500)]
            started = time.perf_counter()
            for batch in batches:
                remote.append(batch, model)
            out["batched_append_per_s"] = preload / (time.perf_counter() - started)
            singles = [add(preload + i) for i in range(appends)]
            latencies = []
            for op in singles:
                started = time.perf_counter()
                remote.append([op], model)
                latencies.append(time.perf_counter() - started)
            out["single_append_ms"] = statistics.median(latencies) * 1000
            started = time.perf_counter()
            assert running.store.log.verify().ok
            out["verify_s"] = time.perf_counter() - started
            cache = Cache(Path(tmp) / "agent" / "cache.db")
            started = time.perf_counter()
            summary = catch_up(cache, remote)
            out["catchup_per_s"] = summary.applied / (time.perf_counter() - started)
            cache.close()
            if hasattr(remote, "checkpoint"):
                head = preload + appends
                latencies = []
                for i in range(200):
                    started = time.perf_counter()
                    remote.checkpoint(0, max(1, head - 1 - i))
                    latencies.append(time.perf_counter() - started)
                out["checkpoint_ms"] = statistics.median(latencies) * 1000
            remote.close()
    return out


def _export(revision: str, target: Path) -> str:
    """Writes the tree at `revision` into `target`; returns its commit."""
    commit = subprocess.run(["git", "rev-parse", revision], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    archive = subprocess.run(["git", "archive", commit], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return commit


def _default_baseline() -> str:
    added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", "proto/mnemosync/kernel/merkle.py"],
                           cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.split()
    if not added:
        raise SystemExit("no commit adds proto/mnemosync/kernel/merkle.py here; name the previous code path with "
                         "--baseline REV")
    return f"{added[-1]}^"


def _round(tree: Path, args, seed: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'proto'}"}
    done = subprocess.run([sys.executable, __file__, "--worker", "--preload", str(args.preload), "--appends",
                           str(args.appends), "--seed", str(seed)], env=env, cwd=tree, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"the round in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--preload", type=int, default=5000, help="entries written in batches before timing singles")
    parser.add_argument("--appends", type=int, default=500, help="single-op Append calls timed per round")
    parser.add_argument("--baseline", help="git revision of the previous code path [default: the parent of the "
                        "commit that added proto/mnemosync/kernel/merkle.py]")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.preload, args.appends, args.seed)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "previous"
        base.mkdir()
        commit = _export(args.baseline or _default_baseline(), base)
        results: dict[str, list[dict]] = {"checkpoints": [], "previous": []}
        for r in range(args.rounds):
            order = [("checkpoints", REPO_ROOT), ("previous", base)]
            for name, tree in order if r % 2 == 0 else order[::-1]:
                results[name].append(_round(tree, args, seed=r))
                print(f"round {r + 1} {name}: {results[name][-1]}", file=sys.stderr)
    rows = []
    for key, title in (("single_append_ms", "single append, median ms"),
                       ("batched_append_per_s", "batched append, memories/s"),
                       ("catchup_per_s", "catch-up of a fresh cache, entries/s"),
                       ("verify_s", "verify the whole log (start-up check), s"),
                       ("checkpoint_ms", "GetCheckpoint + consistency proof, median ms")):
        new = statistics.median(x[key] for x in results["checkpoints"]) if key in results["checkpoints"][0] else None
        old = statistics.median(x[key] for x in results["previous"]) if key in results["previous"][0] else None
        rows.append({"figure": title, "checkpoints": new, "previous": old,
                     "ratio": new / old if new is not None and old else None})
    print(f"\nmnemosync transparency-log cost, {args.rounds} rounds, {args.preload} preloaded + {args.appends} "
          f"single appends; previous code path {commit[:12]}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores\n")
    print("| figure | with checkpoints | previous | ratio |\n| --- | ---: | ---: | ---: |")
    for row in rows:
        cells = [f"{row[k]:,.2f}" if row[k] is not None else "-" for k in ("checkpoints", "previous", "ratio")]
        print(f"| {row['figure']} | {' | '.join(cells)} |")
    if args.json:
        args.json.write_text(json.dumps({"baseline": commit, "rounds": results, "table": rows}, indent=2))


if __name__ == "__main__":
    main()
