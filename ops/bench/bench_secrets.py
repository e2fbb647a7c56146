#!/usr/bin/env python3
"""Measure the secret scan: what it finds in the corpus, its false alarms on prose and code, and its speed.

Reads the corpus and code sample in `tests/data/secrets/` (see the README there) and the prose
sample (the bench's conversation turns and memories, and this repository's manual: the README and the
pages its table links, `ops.manual.pages`), and prints:

* the corpus: credential kinds, secrets found under the right kind, look-alikes taken for secrets;
* false positives: units of prose and of code the scan flags, and the rate;
* speed: scanning the whole code sample, in MB/s and microseconds per KB.

Example:
    python ops/bench/bench_secrets.py [--json secrets.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mnemosync.kernel import secrets_scan  # noqa: E402
from ops import manual  # noqa: E402

DATA = REPO_ROOT / "tests" / "data" / "secrets"
BENCH = REPO_ROOT / "ops" / "bench" / "data"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    corpus = [{**c, "text": c["text"].replace("‖", "")} for c in _jsonl(DATA / "corpus.jsonl")]
    secrets = [c for c in corpus if c["secret"]]
    look_alikes = [c for c in corpus if not c["secret"]]
    named = [c for c in secrets if (f := secrets_scan.find(c["text"])) and f.kind == c["kind"]]
    false_alarms = [c["case"] for c in look_alikes if secrets_scan.find(c["text"])]
    prose = ([t["text"] for t in _jsonl(BENCH / "conversations" / "turns.jsonl")]
             + [m["content"] for m in _jsonl(BENCH / "retrieval" / "memories.jsonl")]
             + [p for page in manual.pages() for p in page.read_text(encoding="utf-8").split("\n\n") if p.strip()])
    code = [b["text"] for b in _jsonl(DATA / "code_sample.jsonl")]
    results = {
        "kinds": len({c["case"] for c in secrets}), "secrets": len(secrets), "look_alikes": len(look_alikes),
        "secrets_named": len(named), "look_alikes_flagged": false_alarms,
    }
    for name, units in (("prose", prose), ("code", code)):
        started = time.perf_counter()
        flagged = [u[:120] for u in units if secrets_scan.find(u)]
        seconds = time.perf_counter() - started
        size = sum(len(u.encode()) for u in units)
        results[name] = {"units": len(units), "flagged": len(flagged), "rate": len(flagged) / len(units),
                         "bytes": size, "mb_per_s": size / seconds / 1e6, "us_per_kb": seconds / (size / 1024) * 1e6,
                         "examples": flagged[:5]}
    print(f"corpus: {results['kinds']} kinds, {results['secrets']} secrets ({results['secrets_named']} found and "
          f"named right), {results['look_alikes']} look-alikes ({len(false_alarms)} taken for secrets)")
    for name in ("prose", "code"):
        r = results[name]
        print(f"{name}: {r['flagged']} of {r['units']} units flagged (false-positive rate {r['rate']:.2%}), "
              f"{r['bytes'] / 1024:.0f} KiB at {r['mb_per_s']:.2f} MB/s ({r['us_per_kb']:.0f} us/KiB)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
