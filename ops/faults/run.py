"""Running the consistency suite against each fault of the catalogue, in scratch copies of the tree.

For each fault: copy the tree (tracked and untracked-but-not-ignored files,
so uncommitted work counts) into a scratch directory, apply the fault's
patch, and run the consistency suite there (`ci` profile, shrinking off) with
the scratch copy first on the import path, so the server subprocesses, the
agents and the suite all run the faulted code. A run that fails kills the
fault; a run that passes lets it survive. Runs go in parallel, one per core by
default, the longest (by the last recorded times) first, so the slow ones do not
finish alone at the end. The unpatched tree is run too (the baseline): if it
fails, no kill counts for anything.

Each run is a process group of its own: on Ctrl-C, `run_all` interrupts every
running suite (SIGINT, so pytest stops its servers and PostgreSQL), kills what
is left of each group after a grace period, removes the scratch copies and
returns what finished.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
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
        verdict: "killed", "survived", "stale" (the fault no longer applies; see `detail`) or "interrupted"
            (Ctrl-C stopped the run before it finished).
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


NAMESPACE_VIEW = ".namespace"
"""The folder of a scratch copy that lays its folders out as the `mnemosync` namespace (see `namespace_view`)."""


def namespace_view(scratch: Path, *, fresh: bool = False) -> Path:
    """A folder in which `mnemosync` is the scratch copy's namespace, made of symbolic links (idempotent).

    The installed project maps its folders into one namespace (pyproject.toml's package-dir), and that mapping
    points at the original tree. On PYTHONPATH this folder comes first: its `mnemosync` holds the copy's
    proto/mnemosync entries and, for each mapped package, a link named as the package to the copy's folder.
    `fresh` lays it out again (files added to proto/mnemosync since it was made appear).
    """
    view = scratch / NAMESPACE_VIEW
    root = view / "mnemosync"
    if fresh and view.is_dir():
        shutil.rmtree(view)  # only links: the tree's files stay
    if root.is_dir():
        return view
    mapping = tomllib.loads((scratch / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    root.mkdir(parents=True)
    for child in (scratch / mapping["mnemosync"]).iterdir():
        (root / child.name).symlink_to(child)
    for package, folder in mapping.items():
        if package != "mnemosync":
            (root / package.removeprefix("mnemosync.")).symlink_to(scratch / folder)
    return view


def suite_environment(scratch: Path) -> dict[str, str]:
    """The environment that makes Python import the scratch copy's packages first (the project is installed in
    editable mode pointing at the original tree; every copy shares its venv), with the `ci` profile, no shrinking
    and the run stopped at its first failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPOTHESIS_", "MNEMOSYNC_CONSISTENCY_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(namespace_view(scratch)), str(scratch)]), PYTHONDONTWRITEBYTECODE="1",
               HYPOTHESIS_PROFILE="ci", MNEMOSYNC_CONSISTENCY_NO_SHRINK="1")
    return env


def imports_from(scratch: Path) -> Path:
    """Where the scratch copy's environment imports the server and the kernel from (both must be the copy's):
    the first of the two files that is not in the copy, else the server's."""
    probe = ("import mnemosync.server, mnemosync.kernel\n"
             "print(mnemosync.server.__file__)\nprint(mnemosync.kernel.__file__)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=scratch, env=suite_environment(scratch),
                          capture_output=True, text=True, check=True)
    found = [Path(line).resolve() for line in done.stdout.split()]
    return next((path for path in found if scratch.resolve() not in path.parents), found[0])


class Runs:
    """The suites running now, each a process group of its own, so Ctrl-C can stop them all and nothing else."""

    GRACE = 20.0
    """Seconds an interrupted suite gets to stop its servers and PostgreSQL before its group is killed."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.stopping = threading.Event()

    def start(self, args: list[str], **kwargs) -> subprocess.Popen | None:
        """Starts a suite in a new session (its own process group); None once `stop` was called."""
        with self._lock:
            if self.stopping.is_set():
                return None
            process = subprocess.Popen(args, start_new_session=True, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, **kwargs)
            self._running.add(process)
            return process

    def done(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._running.discard(process)

    def stop(self) -> None:
        """Interrupts every running suite (SIGINT to its group, again after a few seconds: a first one can land
        where the suite absorbs it), then kills each group still there after GRACE. PostgreSQL runs in a session
        of its own, so only the suite's clean-up can stop it: hence SIGINT before SIGKILL."""
        with self._lock:
            self.stopping.set()
            running = list(self._running)
        deadline = time.monotonic() + self.GRACE
        for wait in (3.0, self.GRACE):
            for process in running:
                if process.poll() is None:
                    _signal_group(process, signal.SIGINT)
            for process in running:
                try:
                    process.wait(timeout=max(0.1, min(deadline, time.monotonic() + wait) - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for process in running:
            _signal_group(process, signal.SIGKILL)  # what the suite left behind, if anything


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_fault(fault: Fault, workdir: Path, *, timeout: float, keep: bool = False, runs: Runs | None = None
              ) -> Outcome:
    """Runs the suite against `fault` in a scratch copy under `workdir`."""
    runs = runs or Runs()
    scratch = workdir / fault.name
    try:
        if runs.stopping.is_set():
            return Outcome(fault, "interrupted", 0.0)
        copy_tree(ROOT, scratch)
        try:
            apply(fault, scratch)
        except FaultDoesNotApply as exc:
            return Outcome(fault, "stale", 0.0, str(exc))
        started = time.monotonic()
        process = runs.start(
            [sys.executable, "-m", "pytest", SUITE, "-x", "-q", "-p", "no:cacheprovider", f"--timeout={int(timeout)}"],
            cwd=scratch, env=suite_environment(scratch))
        if process is None:
            return Outcome(fault, "interrupted", 0.0)
        try:
            output, _ = process.communicate(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.communicate()
            return Outcome(fault, "killed", time.monotonic() - started, f"the suite hung past {timeout:.0f}s")
        finally:
            _signal_group(process, signal.SIGKILL)  # a server or agent the suite left running, if any
            runs.done(process)
        seconds = time.monotonic() - started
        if runs.stopping.is_set():
            return Outcome(fault, "interrupted", seconds)
        if process.returncode == 0:
            return Outcome(fault, "survived", seconds)
        return Outcome(fault, "killed", seconds, first_failure(output))
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


_FAILURE = re.compile(r"^E\s+(\S.*)$", re.MULTILINE)
_GROUPED = re.compile(r"^\s*\| ((?:[\w.]+(?:Error|Exception|Violation|Detected|Mismatch)): .*)$", re.MULTILINE)
"""An exception inside an exception group (several failures, or one raised in a teardown), which has no `E` line."""


def first_failure(output: str) -> str:
    """The first `E   ...` line of pytest's report (the assertion or error that killed the fault), else the first
    exception of an exception group."""
    found = _FAILURE.search(output) or _GROUPED.search(output)
    if found:
        return found.group(1)[:300]
    tail = [line for line in output.strip().splitlines() if line.strip()]
    return tail[-1][:300] if tail else "the suite failed without output"


def load_times(path: Path | None) -> dict[str, float]:
    """Seconds each fault's last run took, from `path` (empty when there is none yet)."""
    try:
        return {k: float(v) for k, v in json.loads(path.read_text()).items()} if path else {}
    except (OSError, ValueError, AttributeError):
        return {}


def save_times(path: Path | None, outcomes: list[Outcome]) -> None:
    """Records the wall time of every run that finished (killed or survived) in `path`, keeping the others."""
    if path is None:
        return
    times = load_times(path)
    times.update({o.fault.name: round(o.seconds, 1) for o in outcomes if o.verdict in ("killed", "survived")})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(times, indent=1, sort_keys=True))


def longest_first(faults: list[Fault], times: dict[str, float]) -> list[Fault]:
    """`faults` by the seconds of their last run, longest first; those never run first of all, in their order."""
    return sorted(faults, key=lambda f: -times.get(f.name, float("inf")))


def run_all(faults: list[Fault], workdir: Path, *, jobs: int, timeout: float, baseline: bool = True,
            keep: bool = False, report: Callable[[Outcome, int, int], None] | None = None,
            times: dict[str, float] | None = None) -> list[Outcome]:
    """Runs the suite against every fault (and the unpatched tree, if `baseline`), `jobs` at a time.

    Runs start longest first by `times` (seconds of earlier runs; one without a record counts as longest).
    `report(outcome, done, total)` is called as each run finishes. Outcomes come back in catalogue order, the
    baseline first. On Ctrl-C every running suite is stopped (see `Runs.stop`), the runs not started are
    dropped, and the outcomes are those that finished and the stopped ones as "interrupted".
    """
    workdir.mkdir(parents=True, exist_ok=True)
    work = ([BASELINE] if baseline else []) + list(faults)
    order = longest_first(work, times or {})
    outcomes: dict[str, Outcome] = {}
    runs = Runs()
    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = [pool.submit(run_fault, f, workdir, timeout=timeout, keep=keep, runs=runs) for f in order]
    try:
        for future in as_completed(futures):
            outcome = future.result()
            outcomes[outcome.fault.name] = outcome
            if report:
                report(outcome, len(outcomes), len(work))
    except KeyboardInterrupt:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        try:
            pool.shutdown(wait=False, cancel_futures=True)
            runs.stop()
            pool.shutdown(wait=True)
        finally:
            signal.signal(signal.SIGINT, previous)
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                outcomes.setdefault(future.result().fault.name, future.result())
    finally:
        pool.shutdown(wait=True)
    return [outcomes[f.name] for f in work if f.name in outcomes]
