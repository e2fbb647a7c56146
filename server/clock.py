"""The server's time, in one object: tests pass one they move by hand (`Clock`).

Wall-clock milliseconds stamp changelog entries (`server_time_ms`, never
decreasing) and acknowledged offsets; monotonic seconds drive the per-agent
rate limits. Nothing else in the server reads the time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Clock:
    """Where the server reads the time.

    Attributes:
        now_ms: Wall-clock milliseconds since the epoch.
        monotonic: Monotonic seconds (for rate limits).
    """

    now_ms: Callable[[], int] = field(default=_wall_ms)
    monotonic: Callable[[], float] = field(default=time.monotonic)


SYSTEM_CLOCK = Clock()
"""The real time."""
