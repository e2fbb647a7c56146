"""gRPC metadata keys both ends use: who calls (development mode), when to retry, where the head is.

Plain names, no grpc import: the server sets and reads them in
`mnemosync.server.service` and `mnemosync.server.identity`, the agent in `mnemosync.agent.remote`.
"""

AGENT_METADATA_KEY = "x-mnemosync-agent"
"""Development mode only (plain text on loopback): the calling agent's id. Ignored under mTLS."""

RETRY_AFTER_KEY = "retry-after-ms"
"""Trailing metadata of a rate-limited call: milliseconds to wait before the next."""

HEAD_METADATA_KEY = "x-mnemosync-head"
"""Initial metadata of a Subscribe stream: the changelog head when it was accepted."""
