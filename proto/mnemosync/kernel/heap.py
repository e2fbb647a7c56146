"""Giving memory the process freed back to the system.

A long-lived process that once read a lot (an agent's catch-up of a large store, a vector mirror reading its whole
index) frees those buffers, but the C allocator keeps the freed pages for later: the resident size stays where the
peak left it. `trim` asks glibc to return them (`malloc_trim`); elsewhere it does nothing.

`lean` has glibc's allocator keep a few arenas in a long-lived process with many threads, rather than up to eight per
CPU, one for each thread that allocates, each holding free pages of its own (6 MB of a local agent's resident set).

`release` drops the pages of a range the process holds but will not read as they are (`madvise(MADV_DONTNEED)`):
a file mapping's pages come back from the file when next read, anonymous pages come back as zeros.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
from typing import Any

M_ARENA_MAX = -8
"""glibc's `mallopt` parameter for the most arenas (malloc.h)."""
ARENAS = 2
"""Arenas a `lean` process keeps."""


@functools.cache
def _libc(name: str) -> Any:
    """The C library's function `name`, or None where there is none (not glibc, no C library found)."""
    path = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(path, use_errno=True), name, None) if path else None
    except OSError:
        return None


def trim() -> None:
    """Returns the heap's free pages to the system (glibc; a no-op where there is no `malloc_trim`)."""
    function = _libc("malloc_trim")
    if function is not None:
        function(0)


def lean() -> None:
    """Caps the allocator's arenas at `ARENAS` (glibc; a no-op elsewhere). Call it before the threads start."""
    function = _libc("mallopt")
    if function is not None:
        function(M_ARENA_MAX, ARENAS)


def release(start: int, end: int) -> int:
    """Drops the whole pages of [start, end) from the resident set; returns the bytes released (0 where the system
    offers no `madvise`, or the range holds no whole page).

    Only for memory nobody reads as it is: a read-only file mapping (its pages are read again from the file) or
    anonymous memory whose contents no longer matter (it reads as zeros afterwards).
    """
    function, advice = _libc("madvise"), getattr(mmap, "MADV_DONTNEED", None)
    first, last = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE, end // mmap.PAGESIZE * mmap.PAGESIZE
    if function is None or advice is None or last <= first:
        return 0
    ok = function(ctypes.c_void_p(first), ctypes.c_size_t(last - first), advice) == 0
    return last - first if ok else 0
