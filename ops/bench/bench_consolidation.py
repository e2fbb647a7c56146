"""Consolidation's costs (issue 16): one consolidation over a large store, topic clusters, and transcript ingestion.

Consolidation: a store of `size` memories written over 100 days (an in-process
`Ledger.sqlite` with a clock moved by hand), synthetic 384-dimensional vectors
around 200 topic centres (so neighbours above the 0.5 link threshold exist),
1 % of them written in the last day (what REPLAY and COMPRESS look at) and a
tenth of those near-copies of an older memory (what COMPRESS merges). Timed:
one consolidation as of the end (entries written: links, merges, prunes,
promotions), then a second for the same time (it must write nothing).
Baseline, same store and time: the decay sweep (issue 15).

Topics: `mnemosync.kernel.topics.compute` over every live memory, against reading
every live memory's vector once (the scan any clustering needs).

Ingest: a Claude Code transcript of `lines` lines (the test transcript's
turns, repeated with fresh ids) stored by `mnemosync.agent.ingest` through a
real agent client, real embeddings, into a real server. Baseline: reading
the same transcript into episodes without storing them.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ops.bench.report import Figure

DAY_MS = 86_400_000
DAYS = 100
CENTRES = 200
NEW_SHARE = 0.01
DUPLICATE_SHARE = 0.1
SPREAD = 0.9
"""Noise around a centre: cosines to the centre about 0.74, between two of its memories about 0.55."""
TRANSCRIPT = Path(__file__).resolve().parents[2] / "tests" / "data" / "claude_transcript.jsonl"


def _vectors(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    centres = rng.standard_normal((CENTRES, 384)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    topic = rng.integers(0, CENTRES, n)
    noise = rng.standard_normal((n, 384)).astype(np.float32) / np.sqrt(384) * SPREAD
    v = centres[topic] + noise
    return v / np.linalg.norm(v, axis=1, keepdims=True), topic


def build_store(path: Path, size: int, log: Callable[[str], None], seed: int = 16):
    """A store of `size` memories over DAYS days; returns (store, now_ms). The caller closes the store."""
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.kernel.operations import OpRequest
    from mnemosync.server.clock import Clock
    from mnemosync.server.identity import Caller
    from mnemosync.server.ledger import Ledger

    rng = np.random.default_rng(seed)
    vectors, _ = _vectors(size, rng)
    new = max(1, int(size * NEW_SHARE))
    old = size - new
    start = int(time.time() * 1000) - DAYS * DAY_MS
    now = {"ms": start}
    store = Ledger.sqlite(path, synchronous="normal", clock=Clock(now_ms=lambda: now["ms"]))
    model = ModelInfo("bench-clustered-unit-vectors", 384, "cb" * 32)
    caller = Caller("bench", authority=3)
    batch = store.limits.max_batch
    for begin, end in [*((b, min(old, b + batch)) for b in range(0, old, batch)),
                       *((b, min(size, b + batch)) for b in range(old, size, batch))]:
        if begin < old:
            now["ms"] = start + int((DAYS - 1) * DAY_MS * begin / max(old, 1))
        else:
            now["ms"] = start + (DAYS - 1) * DAY_MS + DAY_MS // 20 + int(DAY_MS * 0.9 * (begin - old) / new)
        ops = []
        for i in range(begin, end):
            v = vectors[i]
            if i >= old and (i - old) % int(1 / DUPLICATE_SHARE) == 0:  # a near-copy of an older memory
                original = vectors[int(rng.integers(0, old))]
                v = original + rng.standard_normal(384).astype(np.float32) * 0.01
                v /= np.linalg.norm(v)
                vectors[i] = v
            ops.append(OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                                 {"scope": "project:bench", "content": f"memory {i}", "tags": [f"t{i % 50}"],
                                  "layer": 4 if i % 10 == 0 else 3}, v.astype("<f4").tobytes()))
        store.writes.append(caller, ops, model)
        if begin % 20_000 == 0 or end == size:
            log(f"  {end:,}/{size:,} memories")
    now["ms"] = start + DAYS * DAY_MS
    return store, now["ms"]


def consolidation_cost(size: int, work: Path, log: Callable[[str], None]) -> tuple[list[Figure], dict]:
    """One consolidation and the decay sweep over the same store of `size` memories; topic clusters over it."""
    from mnemosync.kernel import topics

    store, now_ms = build_store(work / "consolidation.db", size, log)
    try:
        t = time.perf_counter()
        sweep = store.lifecycle.sweep(now_ms=now_ms, dry_run=True)
        sweep_s = time.perf_counter() - t
        t = time.perf_counter()
        first = store.lifecycle.consolidate(now_ms=now_ms)
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        second = store.lifecycle.consolidate(now_ms=now_ms)
        second_s = time.perf_counter() - t
        conn = store.context.reader()
        t = time.perf_counter()
        scanned = sum(1 for _ in conn.execute(
            "SELECT v.embedding FROM memories m JOIN memory_vec v ON v.rowid = m.num WHERE m.archived = 0"))
        scan_s = time.perf_counter() - t
        t = time.perf_counter()
        found = topics.compute(conn, limit=topics.MAX_LIMIT)
        topics_s = time.perf_counter() - t
    finally:
        store.close()
    details = {"memories": size, "new_in_replay_window": first.examined, "linked": first.linked,
               "merged": first.merged, "pruned": first.pruned, "promoted": first.promoted,
               "entries_written": first.entries_written, "consolidate_s": first_s,
               "second_run_entries": second.entries_written, "second_run_s": second_s,
               "decay_sweep_dry_run_s": sweep_s, "decay_sweep_examined": sweep.examined,
               "topics": len(found.topics), "topics_s": topics_s, "vector_scan_s": scan_s, "vectors": scanned}
    figures = [
        Figure(id="consolidation.run", title=f"consolidation over {size:,} memories ({first.examined:,} new, "
               f"{first.entries_written:,} entries written)", value=first_s, unit="s",
               baseline_title="the decay sweep over the same store and time (dry run)", baseline=sweep_s,
               better="lower", details=details),
        Figure(id="consolidation.topics", title=f"topic clusters over {scanned:,} memories ({len(found.topics)} "
               "largest listed)", value=topics_s, unit="s", baseline_title="reading every live memory's vector once",
               baseline=scan_s, better="lower", details={"topics_returned": len(found.topics)}),
    ]
    return figures, details


def _transcript(path: Path, lines: int) -> int:
    template = TRANSCRIPT.read_text().splitlines()
    written = 0
    with open(path, "w") as f:
        copy = 0
        while written < lines:
            copy += 1
            for raw in template:
                try:
                    record = json.loads(raw)
                except ValueError:  # the test transcript's line that is not JSON: kept, ingest skips it
                    f.write(raw + "\n")
                    written += 1
                    continue
                for key in ("uuid", "leafUuid"):
                    if key in record:
                        record[key] = f"{record[key]}-{copy}"
                if record.get("type") == "user" and isinstance(record["message"]["content"], str):
                    record["message"]["content"] += f" (turn {copy})"
                f.write(json.dumps(record) + "\n")
                written += 1
    return written


def ingest_rate(lines: int, work: Path, model_path: Path | None, log: Callable[[str], None]) -> tuple[Figure, dict]:
    """Transcript lines per second stored by `mnemosync ingest`'s code, against reading them only."""
    from mnemosync.agent import transcript
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings
    from mnemosync.agent.embeddings import Embedder
    from mnemosync.agent.ingest import Watermarks, ingest_transcript
    from mnemosync.server.app import run_server
    from mnemosync.server.settings import ServerSettings

    path = work / "session.jsonl"
    written = _transcript(path, lines)
    t = time.perf_counter()
    episodes = sum(1 for _ in transcript.episodes(path))
    read_s = time.perf_counter() - t
    with tempfile.TemporaryDirectory(dir=work) as tmp, Embedder(model_path) as embedder, run_server(
            ServerSettings(data_dir=Path(tmp) / "server", listen="127.0.0.1:0", insecure=True,
                           synchronous="normal")) as server:
        settings = ClientSettings(server=server.address, agent_id="bench-ingest", insecure=True,
                                  cache_dir=Path(tmp) / "agent", embed_model=model_path, timeout=30.0)
        with AgentClient(settings, embedder=embedder, live=False) as client:
            watermarks = Watermarks(Path(tmp) / "agent" / "ingest.db")
            log(f"  ingesting {written:,} transcript lines ({episodes:,} episodes) ...")
            t = time.perf_counter()
            report = ingest_transcript(client, path, watermarks=watermarks, scope="project:bench")
            ingest_s = time.perf_counter() - t
            t = time.perf_counter()
            again = ingest_transcript(client, path, watermarks=watermarks, scope="project:bench")
            again_s = time.perf_counter() - t
            watermarks.close()
    details = {"lines": written, "episodes": episodes, "stored": report.stored, "ingest_s": ingest_s,
               "read_only_s": read_s, "second_run_stored": again.stored, "second_run_s": again_s}
    figure = Figure(id="ingest.rate", title=f"transcript ingestion ({written:,} lines, {report.stored:,} episodes "
                    "stored with real embeddings)", value=written / ingest_s, unit="lines/s",
                    baseline_title="reading the transcript into episodes without storing",
                    baseline=written / read_s, better="higher", details=details)
    return figure, details


def run_into(report, work: Path, model_path: Path | None, log: Callable[[str], None], *, quick: bool) -> None:
    """The consolidation section into `report`."""
    size = 2_000 if quick else 100_000
    log(f"consolidation over {size:,} memories ...")
    figures, details = consolidation_cost(size, work, log)
    for f in figures:
        report.add(f)
    report.sections["consolidation"] = details
    if model_path is None:
        report.notes.append("ingest rate skipped: no embedding model available")
        return
    log("transcript ingestion ...")
    figure, details = ingest_rate(42 if quick else 700, work, model_path, log)
    report.add(figure)
    report.sections["ingest"] = details
