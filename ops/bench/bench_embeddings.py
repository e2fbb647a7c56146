#!/usr/bin/env python3
"""Benchmark local embedding throughput (embeddings per second).

Measures the Embedder the agents use, on distinct texts with the cache
disabled, so every embedding is a real llama.cpp computation:

* ``single``: one ``embed()`` call per text;
* ``batch N``: ``embed_many()`` on chunks of N texts (N = 1, 8, 32 by default).

Each configuration runs ``--repeats`` times on fresh texts; the table shows the
median (and the spread) of embeddings/s.

Examples:
    python ops/bench/bench_embeddings.py
    python ops/bench/bench_embeddings.py --repeats 7 --words 60 --json bench.json
    python ops/bench/bench_embeddings.py --model /path/to/model.gguf --threads 4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mnemosync.agent.embeddings import Embedder  # noqa: E402
from mnemosync.agent.model import ensure_default_model  # noqa: E402

_WORDS = (
    "agent memory server replica vector index sync conflict merge deploy release test "
    "failure retry timeout network socket reset database migration schema query cache "
    "token user planner review budget deadline design decision note reminder error log "
    "trace metric alert backup restore branch commit rollback config secret permission"
).split()


def make_texts(count: int, words: int, salt: int) -> list[str]:
    """Returns ``count`` distinct pseudo-sentences of ``words`` words each."""
    texts = []
    for i in range(count):
        n = salt * 1_000_003 + i
        picked = [_WORDS[(n * 7919 + k * 104729 + k * k) % len(_WORDS)] for k in range(words)]
        texts.append(f"note {salt}-{i}: " + " ".join(picked))
    return texts


def run_once(embedder: Embedder, texts: list[str], batch: int | None) -> float:
    """Embeds ``texts`` and returns embeddings per second."""
    started = time.perf_counter()
    if batch is None:
        for text in texts:
            embedder.embed(text)
    else:
        for start in range(0, len(texts), batch):
            embedder.embed_many(texts[start : start + batch])
    return len(texts) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    parser.add_argument("--model", type=Path, default=os.environ.get("MNEMOSYNC_EMBED_MODEL"),
                        help="GGUF model (default: the built default model, built if missing)")
    parser.add_argument("--data-home", type=Path,
                        default=Path(os.environ.get("MNEMOSYNC_HOME", "~/.local/share/mnemosync")),
                        help="data home used to find/build the default model")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--texts", type=int, default=64, help="texts per run (default 64)")
    parser.add_argument("--words", type=int, default=20, help="words per text (default 20)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per configuration (default 5)")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads")
    parser.add_argument("--json", dest="json_path", type=Path, help="also write results here")
    args = parser.parse_args(argv)

    model_path = args.model or ensure_default_model(
        args.data_home.expanduser(), progress=lambda line: print(line, file=sys.stderr)
    )
    configs: list[tuple[str, int | None]] = [("single", None)]
    configs += [(f"batch {n}", n) for n in args.batches]

    results = []
    salt = 0
    with Embedder(Path(model_path), n_threads=args.threads, cache_size=0) as embedder:
        run_once(embedder, make_texts(8, args.words, salt=-1), batch=8)  # warm-up
        for label, batch in configs:
            rates = []
            for _ in range(args.repeats):
                salt += 1
                rates.append(run_once(embedder, make_texts(args.texts, args.words, salt), batch))
            results.append({
                "mode": label,
                "batch": batch,
                "texts_per_run": args.texts,
                "repeats": args.repeats,
                "median_per_s": statistics.median(rates),
                "min_per_s": min(rates),
                "max_per_s": max(rates),
                "ms_per_text": 1000.0 / statistics.median(rates),
            })
        fingerprint = embedder.fingerprint

    print(f"model {fingerprint}  |  {args.words} words/text, {args.texts} texts/run, "
          f"{args.repeats} runs, threads={args.threads or 'auto'}, cpus={os.cpu_count()}")
    print(f"{'mode':<10} {'median emb/s':>13} {'min':>9} {'max':>9} {'ms/text':>9}")
    for row in results:
        print(f"{row['mode']:<10} {row['median_per_s']:>13.1f} {row['min_per_s']:>9.1f} "
              f"{row['max_per_s']:>9.1f} {row['ms_per_text']:>9.2f}")

    if args.json_path:
        payload = {
            "model": {"name": fingerprint.name, "dimensions": fingerprint.dimensions,
                      "sha256": fingerprint.sha256},
            "words_per_text": args.words,
            "threads": args.threads,
            "cpu_count": os.cpu_count(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "results": results,
        }
        args.json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
