"""`mnemosync.kernel.source_refs`: what a source cites, its hash and its check, read within bounds."""

from __future__ import annotations

import os

from mnemosync.kernel import source_refs

LINES = "".join(f"line {n}\n" for n in range(1, 25))


def test_a_cited_range_is_exactly_its_lines_and_a_change_to_its_first_line_makes_it_stale(tmp_path):
    (tmp_path / "a.py").write_text(LINES)
    [source] = source_refs.record(tmp_path, [{"path": "a.py", "line_start": 3, "line_end": 5}])
    assert source["sha256"] == source_refs.digest("line 3\nline 4\nline 5")
    assert source_refs.check(tmp_path, [source]).status == "verified"
    (tmp_path / "a.py").write_text(LINES.replace("line 6\n", "line six\n").replace("line 2\n", "line two\n"))
    assert source_refs.check(tmp_path, [source]).status == "verified"  # only lines outside the range changed
    (tmp_path / "a.py").write_text(LINES.replace("line 3\n", "line three\n"))
    found = source_refs.check(tmp_path, [source])
    assert (found.status, found.paths, found.parts) == ("stale", ("a.py",), ("a.py:3-5",))


def test_a_file_too_large_or_reached_through_a_link_out_of_the_root_is_never_read(tmp_path):
    root, outside = tmp_path / "project", tmp_path / "outside.txt"
    root.mkdir()
    outside.write_text("the verifier's own secret\n")
    (root / "leak.txt").symlink_to(outside)
    with open(root / "big.bin", "wb") as sparse:
        sparse.truncate(source_refs.MAX_FILE_BYTES + 1)
    os.mkfifo(root / "pipe")
    sources = [{"path": "leak.txt"}, {"path": "big.bin"}, {"path": "pipe"}]
    assert source_refs.record(root, sources) == sources  # nothing hashed, nothing blocked on the pipe
    assert source_refs.unrecorded(root, sources) == [
        f"leak.txt not found under {root}: recorded without a hash",
        f"big.bin not found under {root} (larger than 16 MiB): recorded without a hash",
        f"pipe not found under {root}: recorded without a hash"]
    guessed = {"path": "leak.txt", "sha256": source_refs.digest(outside.read_text())}
    wrong = {"path": "leak.txt", "sha256": source_refs.digest("a wrong guess")}
    assert source_refs.check(root, [guessed]) == source_refs.check(root, [wrong])  # no answer about the file


def test_a_line_range_past_the_end_or_a_missing_symbol_says_why_it_has_no_hash(tmp_path):
    (tmp_path / "auth.py").write_text(LINES)
    sources = [source_refs.parse(s) for s in ("nope.py:1-3", "auth.py:100-120", "auth.py#nosuchfn")]
    assert source_refs.unrecorded(tmp_path, source_refs.record(tmp_path, sources)) == [
        f"nope.py:1-3 not found under {tmp_path}: recorded without a hash",
        f"auth.py:100-120 not found under {tmp_path} (the file has 24 lines): recorded without a hash",
        f"auth.py#nosuchfn not found under {tmp_path} (no definition of nosuchfn in it): recorded without a hash"]
