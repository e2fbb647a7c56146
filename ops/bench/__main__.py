"""Runs every mnemosync benchmark and writes a JSON report and a Markdown table.

Each figure is measured next to a baseline taken in the same run on the same
data (raw SQLite inserts, an empty gRPC call, NumPy brute force, embedding
alone), so ratios hold on a noisy machine. Targets from issue 6 are checked and
a missed one says by how much.

Examples:
    .venv/bin/python -m ops.bench                 # full run: 10k and 100k memories (~10 minutes on 2 cores)
    .venv/bin/python -m ops.bench --quick         # small sizes, well under a minute (the smoke test runs this)
    .venv/bin/python -m ops.bench --only search quality --out /tmp/bench
    .venv/bin/python -m ops.bench --only catchup --size 100000   # the large size only, 100k memories
    .venv/bin/python -m ops.bench --only append,concurrency --size 100000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ops.bench import environment
from ops.bench.plan import SECTIONS, Plan
from ops.bench.run import run

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    """Parses arguments, runs the benchmarks and prints the table; returns the exit status."""
    cleared = environment.clear_blas_overrides()  # before anything loads NumPy (and its OpenBLAS)
    doc = (__doc__ or "").splitlines()
    parser = argparse.ArgumentParser(prog="python -m ops.bench", description=doc[0],
                                     epilog="\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and short runs (for smoke tests)")
    parser.add_argument("--size", type=int, default=None,
                        help="the large size in memories (the small one is at most this) [default: the plan's]")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"directory for report.json and report.md [default {DEFAULT_OUT}/<timestamp>]")
    parser.add_argument("--only", nargs="+", metavar="SECTION",
                        help=f"run only these sections (space- or comma-separated: {', '.join(SECTIONS)})")
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full",
                        help="the benchmark server's SQLite durability [default full, the server's default]")
    parser.add_argument("--external", action=argparse.BooleanOptionalAction, default=None,
                        help="also run ops/bench/bench_embeddings.py and bench_mcp.py if present "
                             "[default: on for full runs, off with --quick]")
    parser.add_argument("--model", type=Path, default=None,
                        help="GGUF embedding model [default: the default model, built if missing]")
    parser.add_argument("--workdir", type=Path, default=None, help="where temporary databases go [default: /tmp]")
    args = parser.parse_args(argv)
    out = args.out or DEFAULT_OUT / time.strftime("%Y%m%d-%H%M%S")
    plan = Plan.quick() if args.quick else Plan.full()
    only = [name for value in args.only or () for name in value.split(",") if name]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"--only: unknown section {', '.join(unknown)} (choose from {', '.join(SECTIONS)})")
    plan.sections = tuple(only or SECTIONS)
    if args.size is not None:
        if args.size < 1:
            parser.error(f"--size must be at least 1, got {args.size}")
        plan.large, plan.small = args.size, min(plan.small, args.size)
        plan.chunk = max(plan.batch, min(plan.chunk, args.size // 5))  # at least 5 rounds for the median
    plan.synchronous = args.synchronous
    plan.external = (not args.quick) if args.external is None else args.external
    report = run(plan, model_path=args.model, workdir=args.workdir, log=lambda m: print(m, file=sys.stderr))
    if cleared:
        report.notes.append(f"cleared {', '.join(sorted(cleared))} for this run so NumPy's BLAS picks its own "
                            "kernels (the server subprocess inherited the same environment)")
    json_path, md_path = report.write(out)
    print(md_path.read_text(encoding="utf-8"))
    print(f"wrote {json_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
