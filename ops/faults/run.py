"""Running the consistency suite against each fault of the catalogue, in scratch copies of the tree.

For each fault: copy the tree (tracked and untracked-but-not-ignored files,
so uncommitted work counts) into a scratch directory, apply the fault's
patch, and run the consistency suite there (`ci` profile, shrinking off) with
the scratch copy first on the import path, so the server subprocesses, the
agents and the suite all run the faulted code. A run that fails kills the
fault; a run that passes lets it survive. Runs go in parallel, one per core by
default. The unpatched tree is run too (the baseline): if it fails, no kill
counts for anything.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from ops.faults.catalogue import Fault, FaultDoesNotApply, apply

ROOT = Path(__file__).resolve().parents[2]
SUITE = "tests/system/consistency/test_consistency.py"
BASELINE = Fault("baseline", "", "no fault: the tree as it is", ())


@dataclass(frozen=True)
class Outcome:
    """What the suite did against one fault.

    Attributes:
        fault: The fault (BASELINE for the unpatched tree).
        verdict: "killed", "survived", or "stale" (the fault no longer applies; see `detail`).
        seconds: Wall time of the suite's run.
        detail: The first failure line when killed, why it is stale, or "" when it survived.
    """

    fault: Fault
    verdict: str
    seconds: float
    detail: str = ""


def tree_files(root: Path) -> list[str]:
    """The files of the working tree at `root`: tracked and untracked-but-not-ignored, existing ones only."""
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sorted(name for name in set(listed) if name and (root / name).is_file())


def copy_tree(root: Path, target: Path) -> None:
    """Copies the working tree at `root` (see `tree_files`) into the new directory `target`."""
    for name in tree_files(root):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target / name)


def suite_environment(scratch: Path) -> dict[str, str]:
    """The environment that makes Python import the scratch copy's packages first (the project is installed in
    editable mode pointing at the original tree), with the `ci` profile and no shrinking."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPOTHESIS_", "MNEMOSYNC_CONSISTENCY_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(scratch), str(scratch / "proto")]), PYTHONDONTWRITEBYTECODE="1",
               HYPOTHESIS_PROFILE="ci", MNEMOSYNC_CONSISTENCY_NO_SHRINK="1")
    return env


def imports_from(scratch: Path) -> Path:
    """Where the scratch copy's environment imports the server package from (it must be the scratch copy)."""
    done = subprocess.run([sys.executable, "-c", "import server; print(server.__file__)"], cwd=scratch,
                          env=suite_environment(scratch), capture_output=True, text=True, check=True)
    return Path(done.stdout.strip())


def run_fault(fault: Fault, workdir: Path, *, timeout: float, keep: bool = False) -> Outcome:
    """Runs the suite against `fault` in a scratch copy under `workdir`."""
    scratch = workdir / fault.name
    copy_tree(ROOT, scratch)
    try:
        try:
            apply(fault, scratch)
        except FaultDoesNotApply as exc:
            return Outcome(fault, "stale", 0.0, str(exc))
        started = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "pytest", SUITE, "-x", "-q", "-p", "no:cacheprovider",
                 f"--timeout={int(timeout)}"],
                cwd=scratch, env=suite_environment(scratch), capture_output=True, text=True, timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            return Outcome(fault, "killed", time.monotonic() - started, f"the suite hung past {timeout:.0f}s")
        seconds = time.monotonic() - started
        if done.returncode == 0:
            return Outcome(fault, "survived", seconds)
        return Outcome(fault, "killed", seconds, first_failure(done.stdout + done.stderr))
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


_FAILURE = re.compile(r"^E\s+(\S.*)$", re.MULTILINE)


def first_failure(output: str) -> str:
    """The first `E   ...` line of pytest's report (the assertion or error that killed the fault)."""
    found = _FAILURE.search(output)
    if found:
        return found.group(1)[:300]
    tail = [line for line in output.strip().splitlines() if line.strip()]
    return tail[-1][:300] if tail else "the suite failed without output"


def run_all(faults: list[Fault], workdir: Path, *, jobs: int, timeout: float, baseline: bool = True,
            keep: bool = False, report: Callable[[Outcome, int, int], None] | None = None) -> list[Outcome]:
    """Runs the suite against every fault (and the unpatched tree first in line, if `baseline`), `jobs` at a time.

    `report(outcome, done, total)` is called as each run finishes. Outcomes come back in catalogue order, the
    baseline first.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    work = ([BASELINE] if baseline else []) + list(faults)
    outcomes: dict[str, Outcome] = {}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_fault, f, workdir, timeout=timeout, keep=keep): f for f in work}
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[outcome.fault.name] = outcome
            if report:
                report(outcome, len(outcomes), len(work))
    return [outcomes[f.name] for f in work]
