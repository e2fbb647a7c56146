"""Request limits: the sizes every operation and call must stay within.

The server enforces them (`mnemosync.kernel.operations.validate` and the store),
and the agent client checks its own writes against the same values before it
sends or queues them, so a write it accepts offline is not refused later for
its size. Each refusal names the limit it hit. Configured in the server's
`[server.limits]` settings table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Request limits. Each refusal names the limit it hit."""

    max_content_bytes: int = 32_768
    """Largest memory content, in UTF-8 bytes."""
    max_tags: int = 32
    """Most tags on one memory."""
    max_tag_chars: int = 64
    """Longest tag."""
    max_batch: int = 500
    """Most operations in one Append."""
    max_search_limit: int = 100
    """Largest Search limit."""
    max_query_chars: int = 2_000
    """Longest Search query text."""
    max_dimensions: int = 4_096
    """Longest embedding vector accepted when the model is first pinned."""
    max_message_bytes: int = 32 * 1024 * 1024
    """Largest gRPC message, either direction."""
    max_streams_per_agent: int = 16
    """Sync/Subscribe streams one agent may hold open at once; 0: no cap."""
    rate_per_agent: float = 5_000.0
    """Calls per second one agent may make, sustained (token bucket); 0: no limit. Over it: RESOURCE_EXHAUSTED
    with the wait in the message and the `retry-after-ms` trailer."""
    rate_burst: int = 10_000
    """Calls one agent may make at once after a quiet period."""
    costly_reads_per_agent: int = 4
    """Searches, graph walks, timelines and topic listings one agent may have in flight at once; 0: no bound. Over
    it: RESOURCE_EXHAUSTED (`mnemosync.server.costly_reads`)."""
    costly_reads_total: int = 0
    """Such calls running at once server-wide, the rest waiting without a thread; 0: half the CPUs, at least one."""
