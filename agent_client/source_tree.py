"""A project's working tree as the agent reads cited sources in it: which memories it may judge, which files it
may read.

Two rules, shared by everything that reads a source (a write hashing what it cites, `verify-memories`, the prompt
hook's and the session start's "may be stale" marks), so they never disagree about one memory:

* Elsewhere: when the tree is a git working tree and a memory's sources recorded commits this repository does
  not have, the memory describes another repository. It is not judged here at all: `verify-memories` reports it
  as `elsewhere` and writes nothing, and the hooks mark nothing (only a recorded verification speaks).
* Readable: a file is read inside the project only (`mnemosync.kernel.source_refs.resolve`: no link out of it),
  and in a git tree never one git ignores, nor anything under `.git`. A memory anyone may write names the files
  and their hashes; were an ignored `.env` read, the verified or stale answer written back would tell the writer,
  one guess at a time, what the file holds.

Each commit and path is asked of git once per `WorkingTree`; `for_root` keeps one per root for a minute, so a
warm process answering prompt after prompt does not run git each time.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from mnemosync.kernel import source_refs

KEEP_SECONDS = 60.0
"""How long `for_root` reuses what git said about a root."""
_MOST_ROOTS = 16


class WorkingTree:
    """What git says about the tree at `root` (see the module docstring), each question asked once."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.commit = git_commit(self.root)
        """The commit the tree is at ("" when it is not a git working tree)."""
        self.is_git = bool(self.commit)
        self._commits: dict[str, bool] = {}
        self._ignored: dict[str, bool] = {}

    def may_hold(self, sources: Sequence[dict]) -> bool:
        """False only when the root is a git tree and it has none of the commits the sources recorded."""
        commits = {s["commit"] for s in sources if s.get("commit")}
        return not (self.is_git and commits) or any(self._has(c) for c in commits)

    def readable(self, path: str) -> bool:
        """Whether the cited file `path` may be read: not under `.git`, and in a git tree not ignored."""
        if PurePosixPath(path).parts[:1] == (".git",):
            return False
        if not self.is_git:
            return True
        if path not in self._ignored:
            self._ignored[path] = self._git("check-ignore", "-q", "--", path) == 0
        return not self._ignored[path]

    def _has(self, commit: str) -> bool:
        if commit not in self._commits:
            code = self._git("cat-file", "-e", f"{commit}^{{commit}}")
            self._commits[commit] = code is None or code == 0  # cannot tell: check it as before
        return self._commits[commit]

    def _git(self, *args: str) -> int | None:
        try:
            return subprocess.run(["git", "-C", str(self.root), *args], capture_output=True, timeout=5).returncode
        except (OSError, subprocess.SubprocessError):
            return None


def git_commit(root: Path) -> str:
    """The commit the git working tree at `root` is at ("" when it is not one, or git is missing)."""
    try:
        run = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return run.stdout.strip() if run.returncode == 0 else ""


def source_notes(sources: Sequence[dict], root: Path | str | None) -> list[str]:
    """What a person is told about the file sources a write recorded without a hash (`sources` as the write
    carries them, `root` the tree it hashed them in): "src/nope.py:1-3 not found under ROOT: recorded without a
    hash" (`mnemosync.kernel.source_refs.unrecorded`)."""
    if not any("path" in s and "sha256" not in s for s in sources):
        return []
    base = Path(root) if root is not None else Path.cwd()
    tree = WorkingTree(base) if base.is_dir() else None
    return source_refs.unrecorded(base if tree else None, list(sources), readable=tree.readable if tree else None)


_trees: OrderedDict[str, tuple[float, WorkingTree]] = OrderedDict()
_guard = threading.Lock()


def for_root(root: Path | str) -> WorkingTree:
    """The `WorkingTree` of `root`, made afresh when the one kept is older than KEEP_SECONDS."""
    key = str(Path(root).resolve())
    now = time.monotonic()
    with _guard:
        kept = _trees.get(key)
        if kept is not None and now - kept[0] < KEEP_SECONDS:
            _trees.move_to_end(key)
            return kept[1]
    tree = WorkingTree(key)
    with _guard:
        _trees[key] = (now, tree)
        while len(_trees) > _MOST_ROOTS:
            _trees.popitem(last=False)
    return tree


def judged_root(root: Path | str | None, sources: Sequence[dict]) -> Path | None:
    """`root` when a memory citing `sources` may be judged against it (a directory, and not `elsewhere`), else
    None: what the hooks pass to `mnemosync.kernel.source_refs.staleness_note`."""
    if root is None or not sources or not Path(root).is_dir():
        return None
    return Path(root) if for_root(root).may_hold(sources) else None
