"""Where one Append's time goes, part by part: decoding, validation and the secret scan, the near-duplicate and
semantic-conflict checks, hashes, the changelog and the Merkle log, the projections, FTS and vec0, the commit.

An in-process ledger (SQLite, synchronous=full, as `mnemosync serve`) is loaded with `--size` synthetic memories,
then timed while it takes `--batched` memories in Appends of 500 and `--single` single-operation Appends one
after the other (each from a request as the wire gives it: `codec.op_request` of an `Operation`). Each part is
the exclusive time of the functions and SQL statements it names (a statement's time is booked to the table it
writes or reads, the Python around it to the function calling it), in microseconds per operation. Only the wire
and gRPC's own threads are missing (`ops.bench --only append,concurrency` measures those, beside their floors).

    .venv/bin/python -m ops.bench.append_profile --size 5000
    .venv/bin/python -m ops.bench.append_profile --size 100000 --batched 5000 --single 500
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mnemosync.kernel import codec, db
from mnemosync.v1 import memory_pb2 as pb
from ops.bench.bench_append import add_operations
from ops.bench.workload import Workload

PARTS: tuple[tuple[str, str, str], ...] = (
    # (part, module, attribute): the functions whose exclusive time is the part's
    ("decode the request", "mnemosync.kernel.codec", "op_request"),
    ("validate the fields", "mnemosync.kernel.operations", "validate"),
    ("validate the fields", "mnemosync.server.ledger", "validate"),
    ("secret scan", "mnemosync.kernel.secrets_scan", "check"),
    ("check the vector", "mnemosync.kernel.operations", "embedding_bytes"),
    ("payload commitment and signature", "mnemosync.kernel.signing", "seal"),
    ("request and entry hashes", "mnemosync.server.ledger", "_request_hash"),
    ("request and entry hashes", "mnemosync.kernel.entry", "Entry.computed_hash"),
    ("near-duplicate and semantic checks", "mnemosync.server.admission", "near_candidates"),
    ("near-duplicate and semantic checks", "mnemosync.server.admission", "_semantic"),
    ("admission (state and governance)", "mnemosync.server.admission", "admit"),
    ("changelog row", "mnemosync.server.changelog", "insert"),
    ("changelog row", "mnemosync.server.changelog", "insert_many"),
    ("Merkle log", "mnemosync.server.merkle_log", "append_leaf"),
    ("Merkle log", "mnemosync.server.merkle_log", "append_leaves"),
    ("projections (memories, tags, FTS)", "mnemosync.kernel.projections", "apply"),
    ("projections (memories, tags, FTS)", "mnemosync.kernel.projections", "apply_many"),
    ("vector index (vec0 and its mirror)", "mnemosync.kernel.vectors", "insert"),
    ("vector index (vec0 and its mirror)", "mnemosync.kernel.vectors", "insert_many"),
    ("commit (fsync)", "mnemosync.server.sqlite_record", "SqliteRecord.commit"),
    ("the writer's own work", "mnemosync.server.writes", "Writes._append"),
    ("(the request waiting for the writer)", "mnemosync.server.group_commit", "GroupCommit.submit"),
    ("the writer's own work", "mnemosync.server.group_commit", "GroupCommit._run"),
)
"""Parts and the functions booked to them; one missing in this version of the code is skipped."""

_TABLES = (("memory_vec", "vector index (vec0 and its mirror)"), ("memory_fts", "projections (memories, tags, FTS)"),
           ("memory_tags", "projections (memories, tags, FTS)"), ("merkle_nodes", "Merkle log"),
           ("changelog", "changelog row"), ("memories", "projections (memories, tags, FTS)"))
_TABLE_RE = re.compile(r"\b(" + "|".join(re.escape(t) for t, _ in _TABLES) + r")\b")
_SQL_PART = dict(_TABLES)


class Timers:
    """Exclusive wall and CPU time per part, per thread stack (a part's time excludes the parts it calls). The CPU
    time (the thread's own) is what a loaded machine changes least; the wall time also holds waits (the fsync)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self._local = threading.local()
        self.on = False

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        if not self.on:
            yield
            return
        stack = self._local.__dict__.setdefault("stack", [])
        frame = [name, time.perf_counter(), 0.0, time.thread_time(), 0.0]
        stack.append(frame)
        try:
            yield
        finally:
            stack.pop()
            elapsed, cpu = time.perf_counter() - frame[1], time.thread_time() - frame[3]
            self.totals[name] += elapsed - frame[2]
            self.cpu[name] += cpu - frame[4]
            if stack:
                stack[-1][2] += elapsed
                stack[-1][4] += cpu

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.part(name):
                return fn(*args, **kwargs)
        timed.__wrapped__ = fn  # type: ignore[attr-defined]
        return timed


def _install(timers: Timers) -> None:
    import importlib

    for part, module_name, attribute in PARTS:
        module = importlib.import_module(module_name)
        owner, _, name = attribute.rpartition(".")
        target = getattr(module, owner) if owner else module
        fn = getattr(target, name, None)
        if fn is None:
            continue
        setattr(target, name, timers.wrap(part, fn))

    def sql_part(sql: str) -> str:
        if os.environ.get("APPEND_PROFILE_SQL"):
            return "SQL: " + " ".join(sql.split())[:70]
        found = _TABLE_RE.search(sql)
        kind = "SQL write" if sql.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE") else "SQL read"
        return f"{_SQL_PART[found.group(1)]}" if found and kind == "SQL write" else (
            "commit (fsync)" if sql.strip().upper() == "COMMIT" else "SQL reads (state checks, heads)")

    base_execute, base_many = db.sqlite3.Connection.execute, db.sqlite3.Connection.executemany

    def execute(self: Any, sql: str, *args: Any) -> Any:
        with timers.part(sql_part(sql)):
            return base_execute(self, sql, *args)

    def executemany(self: Any, sql: str, *args: Any) -> Any:
        with timers.part(sql_part(sql)):
            return base_many(self, sql, *args)

    db.Connection.execute = execute  # type: ignore[method-assign]
    db.Connection.executemany = executemany  # type: ignore[method-assign]


def _append(ledger: Any, caller: Any, ops: list[pb.Operation], model: Any, timers: Timers) -> int:
    with timers.part("decode the request"):
        requests = [codec.op_request(op) for op in ops]
    with timers.part("Ledger.append (rest)"):
        return len(ledger.writes.append(caller, requests, model).results)


def measure(size: int, batched: int, single: int, work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Loads `size` memories, then times `batched` memories in Appends of 500 and `single` single-op Appends."""
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.server.identity import Caller
    from mnemosync.server.ledger import Ledger

    timers = Timers()
    _install(timers)
    model = ModelInfo("bench-random-unit-vectors", 384, "be" * 32)
    # as the benchmarks do: one agent loads and sends the batches, other agents the single adds
    workload, loader, writer = Workload(), Caller("bench"), Caller("bench-agent-0")
    ledger = Ledger.sqlite(work / "mnemosync.db", synchronous="full")
    out: dict[str, Any] = {"size": size, "load_average": os.getloadavg()}
    try:
        for start in range(0, size, 500):
            ops, _ = add_operations(workload, start, min(500, size - start))
            _append(ledger, loader, ops, model, timers)
            if start % 20_000 == 0:
                log(f"loaded {start:,} of {size:,}")
        at = size
        for kind, count, per, threads in (("batched", batched, 500, 1), ("single", single, 1, 1),
                                          ("single, 8 agents at once", single, 1, 8)):
            if not count:
                continue
            ops, _ = add_operations(workload, at, count)
            at += count
            timers.totals.clear()
            timers.cpu.clear()
            timers.on = True
            started, cpu = time.perf_counter(), time.process_time()
            if threads == 1:
                for i in range(0, count, per):
                    _append(ledger, loader if per > 1 else writer, ops[i:i + per], model, timers)
            else:  # as 8 agents' single-op Appends arrive: the writer commits them in groups
                def agent(number: int, mine: list[pb.Operation]) -> None:
                    for op in mine:
                        _append(ledger, Caller(f"bench-agent-{number}"), [op], model, timers)

                workers = [threading.Thread(target=agent, args=(t, ops[t::threads])) for t in range(threads)]
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join()
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            timers.on = False
            parts = {name: (seconds * 1e6 / count, timers.cpu[name] * 1e6 / count)
                     for name, seconds in timers.totals.items()}
            out[kind] = {"ops": count, "ops_per_append": per, "wall_us_per_op": wall * 1e6 / count,
                         "cpu_us_per_op": cpu * 1e6 / count, "rate_per_s": count / wall,
                         "parts_us_per_op": dict(sorted(parts.items(), key=lambda kv: -kv[1][1]))}
            log(f"{kind}: {count / wall:,.0f} ops/s")
    finally:
        ledger.close()
    return out


def markdown(r: dict[str, Any]) -> str:
    """The profile as Markdown tables, one per kind of Append."""
    lines = [f"Append profile at {r['size']:,} memories (load {r['load_average'][0]:.1f})", ""]
    for kind in ("batched", "single", "single, 8 agents at once"):
        if kind not in r:
            continue
        k = r[kind]
        lines += [f"**{kind}** ({k['ops']:,} ops, {k['ops_per_append']} per Append): {k['rate_per_s']:,.0f} ops/s, "
                  f"{k['wall_us_per_op']:.0f} µs per op, {k['cpu_us_per_op']:.0f} µs of CPU per op", "",
                  "| part | CPU µs per op | share of the CPU | wall µs per op |", "| --- | ---: | ---: | ---: |"]
        total = k["cpu_us_per_op"]
        for name, (us, cpu) in k["parts_us_per_op"].items():
            share = "" if name.startswith("(") else f"{100 * cpu / total:.0f}%"  # overlaps the writer's parts
            lines.append(f"| {name} | {cpu:.1f} | {share} | {us:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench.append_profile", description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5000, help="memories loaded before timing [5000]")
    parser.add_argument("--batched", type=int, default=5000, help="memories timed in Appends of 500 [5000]")
    parser.add_argument("--single", type=int, default=500, help="single-operation Appends timed [500]")
    parser.add_argument("--json", type=Path, default=None, help="also write the profile here")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnemosync-append-profile-"))
    try:
        result = measure(args.size, args.batched, args.single, work, lambda m: print(m, file=sys.stderr))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
