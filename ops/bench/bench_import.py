#!/usr/bin/env python3
"""Bulk import of markdown notes: is it bound by the embedding model?

Writes `--notes` markdown notes with front matter into a temporary folder,
starts a real `mnemosync serve`, and imports the folder with
`AgentClient.add_many` (what `mnemosync import FOLDER` runs) with the real
model. Reports the wall time, the notes per second, and the share of the wall
time spent inside the model (`Embedder.embed_many`); the aim is at least 90%.
Then imports the first `--rerun` notes again (default: all of them) and
reports that it wrote nothing (resumable); the load average is reported too.

Examples:
    python ops/bench/bench_import.py --notes 2000
    python ops/bench/bench_import.py --notes 100000 --rerun 2000 --json import.json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mnemosync.agent import bulk  # noqa: E402
from mnemosync.agent.client import AgentClient  # noqa: E402
from mnemosync.agent.client_settings import load  # noqa: E402
from mnemosync.agent.embeddings import Embedder, default_batch_threads  # noqa: E402
from ops.bench.bench_mcp import memory_text, start_server  # noqa: E402
from ops.bench.environment import script_model, script_parser  # noqa: E402


class TimedEmbedder(Embedder):
    """The real embedder, counting the seconds spent inside `embed_many`."""

    seconds = 0.0

    def embed_many(self, texts):
        started = time.perf_counter()
        try:
            return super().embed_many(texts)
        finally:
            self.seconds += time.perf_counter() - started


def write_notes(folder: Path, count: int) -> None:
    """`count` distinct notes with front matter, 1,000 per subfolder."""
    for i in range(count):
        sub = folder / f"{i // 1000:03d}"
        if i % 1000 == 0:
            sub.mkdir(parents=True)
        (sub / f"note-{i}.md").write_text(
            f"---\ntitle: Note {i}\ntype: note\ntags: [bench, topic-{i % 17}]\n---\n{memory_text(i)} "
            f"It was written down on day {i // 24} at hour {i % 24}.\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--notes", type=int, default=2000, help="markdown notes to import (default 2000)")
    parser.add_argument("--batch", type=int, default=250, help="notes embedded and sent at a time (default 250)")
    parser.add_argument("--rerun", type=int, help="notes imported again to show nothing is written twice "
                                                  "(default: all)")
    args = parser.parse_args(argv)
    model = script_model(args)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        root = Path(tmp)
        write_notes(root / "notes", args.notes)
        proc, address = start_server(root / "server", model)
        try:
            settings = load(environ=os.environ, overrides={  # MNEMOSYNC_EMBED_BATCH_THREADS applies
                "server": address, "agent_id": "importer", "insecure": True, "cache_dir": root / "agent",
                "embed_model": model, "scope": "project:bench"})
            with TimedEmbedder(model, n_threads=settings.embed_threads,
                               n_threads_batch=settings.embed_batch_threads or None, cache_size=0) as embedder, \
                    AgentClient(settings, embedder=embedder, live=False) as client:
                started = time.perf_counter()
                items = bulk.read_source(root / "notes")
                summary = client.add_many(items, batch=args.batch)
                wall = time.perf_counter() - started
                inside = embedder.seconds
                started = time.perf_counter()
                again = client.add_many(items[:args.rerun], batch=args.batch)
                rerun = time.perf_counter() - started
        finally:
            proc.terminate()
            proc.wait(30)
    result = {"notes": args.notes, "batch_threads": settings.embed_batch_threads or default_batch_threads(),
              "written": summary.written, "refused": len(summary.refused), "wall_s": wall,
              "model_s": inside, "model_share": inside / wall, "notes_per_s": args.notes / wall,
              "rerun_notes": len(items[:args.rerun]), "rerun_written": again.written,
              "rerun_deduplicated": again.deduplicated, "rerun_refused": len(again.refused),
              "rerun_replayed": again.replayed, "rerun_s": rerun, "load_average_end": os.getloadavg(),
              "load_average_start": load_start}
    print(f"imported {summary.written} of {args.notes} notes in {wall:.1f} s ({result['notes_per_s']:.0f}/s); "
          f"{100 * result['model_share']:.1f}% of it inside the model")
    print(f"run again over {result['rerun_notes']} notes: {again.written} written, {again.replayed} already there, "
          f"{again.deduplicated} duplicates, {len(again.refused)} refused, in {rerun:.1f} s")
    for key, why in again.refused[:3]:
        print(f"  refused on the rerun: {key}: {why}")
    print(f"load average at the start {load_start[0]:.1f}, at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
