"""Fault injection: runs the consistency suite against each fault of the catalogue and prints the kill rate.

Each fault (ops/faults/catalogue.py) is a small patch applied to a scratch copy of this tree; the consistency
suite runs there with the `ci` profile, shrinking off, stopping at its first failure. A failing suite kills the
fault; a passing one lets it survive, and every survivor is listed with the bug it is and why it survives, if the
catalogue says. The unpatched tree runs too: the kill rate means something only if it passes. The runs start
longest first by the times recorded in --times, so the whole catalogue finishes sooner. Ctrl-C stops every
running suite (and the servers it started), removes the scratch copies and prints what finished.

Examples:
    .venv/bin/python -m ops.faults                      # the whole catalogue, one run per core
    .venv/bin/python -m ops.faults --only tie-break-reversed visible-by-arrival-order
    .venv/bin/python -m ops.faults --area outbox --jobs 1 --keep
    .venv/bin/python -m ops.faults --list               # the catalogue, and whether each fault still applies
    .venv/bin/python -m ops.faults --json /tmp/faults.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ops.faults.catalogue import AREAS, CATALOGUE, FaultDoesNotApply, check
from ops.faults.run import BASELINE, ROOT, Outcome, copy_tree, imports_from, load_times, run_all, save_times

UNREACHED = "AssertionError: the run never reached these: "
"""How the suite's reach check fails (tests/system/consistency/test_consistency.py)."""

TIMES = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mnemosync" / "fault-times.json"
"""Where the seconds of each fault's last run are kept, to start the longest first next time."""


def main(argv: list[str] | None = None) -> int:
    """Parses arguments, runs the faults and prints the kill rate; exit 0 when every fault was killed."""
    doc = (__doc__ or "").splitlines()
    parser = argparse.ArgumentParser(prog="python -m ops.faults", description=doc[0],
                                     epilog="\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these faults")
    parser.add_argument("--area", nargs="+", choices=AREAS, help="run only the faults of these areas")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="runs at once [default: one per core]")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds one run may take [default 1200]")
    parser.add_argument("--no-baseline", action="store_true", help="skip the run of the unpatched tree")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copies (under --workdir)")
    parser.add_argument("--workdir", type=Path, default=None, help="where scratch copies go [default: a new temp dir]")
    parser.add_argument("--json", type=Path, default=None, help="also write the outcomes to this JSON file")
    parser.add_argument("--times", type=Path, default=TIMES,
                        help=f"the run times of earlier runs, read to order the runs and updated [default {TIMES}]")
    parser.add_argument("--list", action="store_true", help="list the catalogue and check that every fault applies")
    args = parser.parse_args(argv)
    faults = [f for f in CATALOGUE if (not args.only or f.name in args.only) and (not args.area or f.area in args.area)]
    unknown = sorted(set(args.only or ()) - {f.name for f in CATALOGUE})
    if unknown:
        parser.error(f"no such fault: {', '.join(unknown)} (see --list)")
    if args.list:
        return _list(faults)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mnemosync-faults-"))
    try:
        return _run(args, faults, workdir)
    except KeyboardInterrupt:
        print("interrupted before any suite started", file=sys.stderr)
        return 130
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _run(args, faults, workdir: Path) -> int:
    _check_imports(workdir)
    print(f"{len(faults)} faults, {args.jobs} at a time, scratch copies in {workdir}", file=sys.stderr)
    started = time.monotonic()

    def report(outcome: Outcome, done: int, total: int) -> None:
        detail = f"  {outcome.detail}" if outcome.detail else ""
        print(f"[{done}/{total}] {outcome.verdict:8s} {outcome.seconds:6.0f}s  {outcome.fault.name}{detail}",
              file=sys.stderr, flush=True)

    outcomes = run_all(faults, workdir, jobs=args.jobs, timeout=args.timeout, baseline=not args.no_baseline,
                       keep=args.keep, report=report, times=load_times(args.times))
    elapsed = time.monotonic() - started
    save_times(args.times, outcomes)
    expected = len(faults) + (0 if args.no_baseline else 1)
    interrupted = len(outcomes) < expected or any(o.verdict == "interrupted" for o in outcomes)
    print(_summary(outcomes, elapsed, expected if interrupted else 0))
    if args.json:
        args.json.write_text(json.dumps({"seconds": round(elapsed), "interrupted": interrupted, "outcomes": [
            {"fault": o.fault.name, "area": o.fault.area, "verdict": o.verdict, "seconds": round(o.seconds),
             "detail": o.detail} for o in outcomes]}, indent=1))
    if interrupted:
        return 130
    baseline = next((o for o in outcomes if o.fault is BASELINE), None)
    ok = (baseline is None or baseline.verdict == "survived") and all(
        o.verdict == "killed" for o in outcomes if o.fault is not BASELINE)
    return 0 if ok else 1


def _check_imports(workdir: Path) -> None:
    """Refuses to run if a scratch copy would import the original tree's code instead of its own."""
    probe = workdir / "import-check"
    copy_tree(ROOT, probe)
    found = imports_from(probe)
    shutil.rmtree(probe, ignore_errors=True)
    if probe.resolve() not in found.parents:
        raise SystemExit(f"a scratch copy imports the namespace's code from {found}, not from itself; faults would "
                         "not be tested (check PYTHONPATH and how the project is installed)")


def _list(faults) -> int:
    stale = 0
    for fault in faults:
        try:
            check(fault, ROOT)
            state = "applies"
        except FaultDoesNotApply as exc:
            state, stale = f"STALE: {exc}", stale + 1
        print(f"{fault.name:40s} {fault.area:10s} {state}\n    {fault.bug}")
        if fault.survives:
            print(f"    survives: {fault.survives}")
    print(f"{len(faults)} faults, {stale} stale")
    return 1 if stale else 0


def _summary(outcomes: list[Outcome], elapsed: float, expected: int = 0) -> str:
    """The kill rate, the survivors and the stale faults; with `expected` (Ctrl-C), what did not finish too."""
    faults = [o for o in outcomes if o.fault is not BASELINE]
    killed = [o for o in faults if o.verdict == "killed"]
    survived = [o for o in faults if o.verdict == "survived"]
    stale = [o for o in faults if o.verdict == "stale"]
    counted = len(killed) + len(survived)
    lines = []
    baseline = next((o for o in outcomes if o.fault is BASELINE), None)
    if baseline is not None:
        verdict = "passed" if baseline.verdict == "survived" else f"FAILED: {baseline.detail}"
        lines.append(f"baseline (no fault): {verdict} in {baseline.seconds:.0f}s")
    if expected:
        stopped = [o.fault.name for o in outcomes if o.verdict == "interrupted"]
        finished = len(outcomes) - len(stopped)
        lines.append(f"INTERRUPTED: {finished} of {expected} runs finished; stopped: {', '.join(stopped) or 'none'}; "
                     f"{expected - len(outcomes)} never started")
    rate = f"{len(killed)}/{counted} ({100 * len(killed) / counted:.0f}%)" if counted else "nothing ran"
    lines.append(f"kill rate: {rate} in {elapsed / 60:.1f} minutes")
    unreached = [o for o in killed if o.detail.startswith(UNREACHED)]
    if unreached:
        lines.append("killed only because the run never reached a path it promises (the fault may have steered the "
                     "run away from it; no invariant failed):")
        lines += [f"  {o.fault.name}: {o.detail[len(UNREACHED):]}" for o in unreached]
    if survived:
        lines.append("survivors:")
        for o in survived:
            lines.append(f"  {o.fault.name} ({o.fault.area}): {o.fault.bug}")
            lines.append(f"    {o.fault.survives or 'not explained: the suite should catch it'}")
    if stale:
        lines.append("stale (no longer apply; refresh their anchors):")
        lines += [f"  {o.detail}" for o in stale]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
