"""Giving memory the process freed back to the system.

A long-lived process that once read a lot (an agent's catch-up of a large store, a vector mirror reading its whole
index) frees those buffers, but the C allocator keeps the freed pages for later: the resident size stays where the
peak left it. `trim` asks glibc to return them (`malloc_trim`); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def trim() -> None:
    """Returns the heap's free pages to the system (glibc; a no-op where there is no `malloc_trim`)."""
    function = _malloc_trim()
    if function is not None:
        function(0)
