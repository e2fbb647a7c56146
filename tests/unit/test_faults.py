"""`ops.faults`: the fault catalogue still applies to the tree, and scratch copies run their own code."""

from __future__ import annotations

import pytest

from ops.faults.catalogue import AREAS, CATALOGUE, Edit, Fault, FaultDoesNotApply, check
from ops.faults.run import ROOT, copy_tree, first_failure, imports_from


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
