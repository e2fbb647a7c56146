"""mnemosync: shared long-term memory for AI agents, as one namespace.

    mnemosync.kernel   what the server and every agent share (entries, the fold, search, the codec)
    mnemosync.server   the central gRPC server: the ledger over its changelog record, governance, identity
    mnemosync.agent    the local agent: cache, embeddings, outbox, the library (`AgentClient`)
    mnemosync.shim     the MCP server and the Claude Code hooks
    mnemosync.v1       the generated protobuf and gRPC stubs of `memory.proto` (the contract)
    mnemosync.cli      the `mnemosync` command table

The library's entry points are importable from here (`from mnemosync import
AgentClient, ClientSettings`); they load on first use, so importing the kernel
or the command's fast hooks pays nothing for them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`'s: importing typing costs the prompt hook ~4 ms (see __main__)

if __name__ != "mnemosync":  # from a checkout's root, proto/ is an implicit namespace package: proto.mnemosync.…
    raise ImportError(f"import mnemosync, not {__name__}: mnemosync installs one namespace (see pyproject.toml)")

__version__ = "0.1.0"

_EXPORTS = {
    "AgentClient": "mnemosync.agent.client",
    "ClientSettings": "mnemosync.agent.client_settings",
}

if TYPE_CHECKING:
    from typing import Any

    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings

__all__ = ["AgentClient", "ClientSettings", "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mnemosync' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
