"""A memory's own event time: when what it records happened, apart from when it was stored.

A dialog turn from a conversation held in March and stored in May happened in
March; "last Sunday" in it means the Sunday before the session. The time is
kept as milliseconds since 1970-01-01 UTC (`Memory.event_time_ms`), written
as ISO 8601 by people (the CLI, the MCP tools), and checked here once for
every edge.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from mnemosync.kernel.errors import InvalidArgument

RANGE_MS = (-62_135_596_800_000, 253_402_300_799_999)
"""From 0001-01-01 to 9999-12-31 (UTC), in milliseconds since 1970-01-01."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def validate(value: Any, name: str = "event_time_ms") -> int:
    """An event time in milliseconds, within RANGE_MS.

    Raises:
        InvalidArgument: naming the field and the range.
    """
    low, high = RANGE_MS
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgument(f"{name} must be milliseconds since 1970-01-01 UTC from {low} (year 1) to {high} "
                              f"(year 9999), got {str(value)[:40]!r}")
    return cast(int, value)


def parse(text: str, name: str = "event_time") -> int:
    """The milliseconds of an ISO 8601 date, or date and time; without a UTC offset it is UTC.

    Raises:
        InvalidArgument: not ISO 8601, with an example of what is.
    """
    try:
        stripped = text.strip()
        moment = datetime.fromisoformat(stripped[:-1] + "+00:00" if stripped.endswith(("Z", "z")) else stripped)
    except (ValueError, AttributeError):
        raise InvalidArgument(f"{name} must be an ISO 8601 date or date and time, such as 2025-03-08 or "
                              f"2025-03-08T16:20 (UTC unless an offset such as +01:00 follows), got "
                              f"{str(text)[:40]!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return validate((moment - _EPOCH) // _MS, name)


def text(ms: int) -> str:
    """ISO 8601 UTC to the minute (`2025-03-08T16:20Z`), as the CLI and the MCP tools show times."""
    moment = _EPOCH + ms * _MS
    return f"{moment.year:04d}-{moment:%m-%dT%H:%M}Z"
