"""`ops.faults`: the fault catalogue still applies to the tree, scratch copies run their own code, the runs start
longest first, and Ctrl-C stops them cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ops.faults.catalogue import AREAS, CATALOGUE, Edit, Fault, FaultDoesNotApply, check
from ops.faults.run import ROOT, Outcome, copy_tree, first_failure, imports_from, load_times, longest_first, save_times

from helpers import wait_until


@pytest.mark.parametrize("fault", CATALOGUE, ids=lambda f: f.name)
def test_every_fault_of_the_catalogue_still_applies_to_the_tree(fault):
    check(fault, ROOT)


def test_the_catalogue_holds_at_least_25_faults_with_unique_names_across_the_areas():
    names = [f.name for f in CATALOGUE]
    assert len(names) >= 25 and len(set(names)) == len(names)
    assert {f.area for f in CATALOGUE} == set(AREAS)
    assert all(f.bug and f.edits for f in CATALOGUE)


def test_a_fault_whose_anchor_is_gone_is_reported_as_stale_naming_fault_file_and_anchor():
    stale = Fault("gone", "sync", "nothing", (Edit("server/service.py", "no such line\n", "x"),))
    with pytest.raises(FaultDoesNotApply, match=r"^fault gone: the anchor 'no such line' is not in server/service.py"):
        check(stale, ROOT)
    twice = Fault("twice", "sync", "nothing", (Edit("server/service.py", "import", "x"),))
    with pytest.raises(FaultDoesNotApply, match=r"occurs \d+ times in server/service.py"):
        check(twice, ROOT)


def test_a_scratch_copy_imports_its_own_code(tmp_path):
    copy_tree(ROOT, tmp_path / "scratch")
    assert (tmp_path / "scratch") in imports_from(tmp_path / "scratch").parents


def test_the_first_failure_line_of_a_killed_run_is_reported():
    output = "....\nE   AssertionError: live cache stuck at 4, head 7\nE   more\n1 failed"
    assert first_failure(output) == "AssertionError: live cache stuck at 4, head 7"
    grouped = ("  + Exception Group Traceback\n    |     raise AssertionError(x)\n"
               "    | AssertionError: stuck (waited 20s)\n")
    assert first_failure(grouped + "1 failed in 3.2s") == "AssertionError: stuck (waited 20s)"


def test_runs_start_longest_first_by_the_recorded_times_and_new_ones_before_all(tmp_path):
    faults = list(CATALOGUE[:4])
    times = tmp_path / "times.json"
    save_times(times, [Outcome(faults[0], "killed", 40.0), Outcome(faults[1], "survived", 300.0),
                       Outcome(faults[2], "killed", 90.0), Outcome(faults[3], "interrupted", 5.0)])
    recorded = load_times(times)
    assert recorded == {faults[0].name: 40.0, faults[1].name: 300.0, faults[2].name: 90.0}
    assert longest_first(faults, recorded) == [faults[3], faults[1], faults[2], faults[0]]


def _processes_in(directory: Path) -> dict[int, str]:
    """The processes whose working directory is `directory` or under it: pid and command line."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cwd").resolve().is_relative_to(directory):
                found[int(proc.name)] = (proc / "cmdline").read_text().replace("\0", " ")
        except OSError:
            pass
    return found


def _ctrl_c_as_at_a_terminal() -> None:
    """A suite started in the background by a shell without job control (`nohup … &`, some CI runners) inherits
    SIGINT ignored, and Python then installs no handler for it: the harness is given Ctrl-C's default back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_running_suites_removes_their_scratch_copies_and_prints_what_finished(tmp_path):
    workdir = tmp_path / "work"
    harness = subprocess.Popen(
        [sys.executable, "-m", "ops.faults", "--only", CATALOGUE[0].name, CATALOGUE[1].name, "--no-baseline",
         "--jobs", "1", "--workdir", str(workdir), "--times", str(tmp_path / "times.json")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_ctrl_c_as_at_a_terminal)
    try:
        wait_until(lambda: any("pytest" in line for line in _processes_in(workdir).values()), timeout=120,
                   message="no suite started in a scratch copy")
        harness.send_signal(signal.SIGINT)
        out, err = harness.communicate(timeout=90)
    finally:
        if harness.poll() is None:
            os.killpg(harness.pid, signal.SIGKILL)
            harness.wait()
    assert harness.returncode == 130, err
    summary = re.search(r"INTERRUPTED: (\d) of 2 runs finished; stopped: (.+); (\d) never started", out)
    assert summary, out
    finished, stopped, never = int(summary[1]), summary[2].split(", "), int(summary[3])
    # A fault killed within seconds may finish between the poll that saw its suite and the signal: what is checked
    # is that the account adds up and names a run that was stopped, whichever run that was.
    assert stopped != ["none"] and set(stopped) <= {CATALOGUE[0].name, CATALOGUE[1].name}, out
    assert finished < 2 and finished + len(stopped) + never == 2, out
    assert not _processes_in(workdir), f"processes of an interrupted suite still run: {_processes_in(workdir)}"
    assert list(workdir.iterdir()) == [], "the scratch copy of an interrupted run was left behind"
