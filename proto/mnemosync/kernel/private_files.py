"""Keeping mnemosync's files private to the user that runs it: folders 0700, files 0600.

Scopes only mean something if other local users cannot read the files around
them: the server's database (with its WAL and shared-memory files) holds every
scope, an agent's cache and outbox hold what it may read and has written, and
keys are keys. Both ends call this when they open their files:

* a folder or file that is new is created private (a database file is created
  empty at 0600 before SQLite opens it, so SQLite gives its WAL and
  shared-memory files the same mode);
* one that exists and is readable or writable by group or others is tightened
  (group and other bits removed) and a warning is logged, naming it;
* one that cannot be tightened (a read-only file system), or that another user
  owns (even where this process, as root, could chmod it: its owner could still
  read it), is refused with `NotPrivate`, naming it and the command that fixes it.

What is not private on purpose: the embedding model (public weights, readable
by every agent on the machine), certificates and crl.pem (public by design).
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from mnemosync.kernel.errors import FailedPrecondition

log = logging.getLogger(__name__)

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_OPEN_TO_OTHERS = 0o077


class NotPrivate(FailedPrecondition):
    """A folder or file other users can read, which this process cannot make private."""


def _tighten(path: Path, st: os.stat_result, kind: str) -> None:
    if st.st_uid != os.geteuid():  # root could chmod it, but its owner would still read what is written there
        raise NotPrivate(
            f"{kind} {path} is owned by another user (uid {st.st_uid}), so that user can read what mnemosync "
            f"writes there; make it this user's (as root: chown {os.geteuid()} {path}) or use another folder")
    mode = st.st_mode
    if not mode & _OPEN_TO_OTHERS:
        return
    private = stat.S_IMODE(mode) & ~_OPEN_TO_OTHERS
    try:
        os.chmod(path, private)
    except FileNotFoundError:
        return  # removed meanwhile (a journal): nothing left to keep private
    except OSError as exc:
        raise NotPrivate(
            f"{kind} {path} is open to other users (mode {stat.S_IMODE(mode):04o}) and cannot be made private "
            f"({exc.strerror}); as its owner run: chmod {'700' if kind == 'folder' else '600'} {path}"
        ) from None
    log.warning("%s %s was open to other users (mode %04o); made it %04o", kind, path, stat.S_IMODE(mode), private)


def private_dir(path: Path) -> Path:
    """Creates the folder 0700 (with missing parents), or tightens it if it exists.

    Raises:
        NotPrivate: it is open to others and cannot be tightened.
    """
    path = Path(path)
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    _tighten(path, path.stat(), "folder")
    return path


def private_file(path: Path) -> Path:
    """Creates the file empty at 0600 if missing, or tightens it; its folder must exist.

    Raises:
        NotPrivate: it is open to others and cannot be tightened.
    """
    path = Path(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    except FileExistsError:
        _tighten(path, path.stat(), "file")
    return path


def secure_folder(folder: Path, create: str = "", *, patterns: tuple[str, ...] = ()) -> Path:
    """Makes `folder` private, with its files matching `patterns` (glob); creates `create` in it at 0600.

    Only mnemosync's own files are touched (by name), so a data directory
    pointed at a shared folder does not change anyone else's files.

    Raises:
        NotPrivate: one of them is open to others and cannot be tightened.
    """
    folder = private_dir(folder)
    for pattern in patterns:
        for path in folder.glob(pattern):
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue  # a rollback journal another process opening the same database just removed
            if stat.S_ISREG(st.st_mode):
                _tighten(path, st, "file")
    if create:
        private_file(folder / create)
    return folder


def write_private(path: Path, data: bytes) -> None:
    """Replaces the file's content atomically, at mode 0600 from the start."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def check_key(path: Path) -> Path:
    """A private key file: tightened to 0600 if others may read it.

    Raises:
        NotPrivate: it is open to others and cannot be tightened.
    """
    path = Path(path)
    _tighten(path, path.stat(), "key file")
    return path
