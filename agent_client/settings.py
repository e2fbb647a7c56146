"""The agent client's settings: one frozen object per process.

Built at the edges (CLI, MCP shim) from flags, `MNEMOSYNC_*` variables and the
`[client]` table of the settings file (`server.settings.build`); the library
itself only receives a `ClientSettings`.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.settings import build, default_data_home


def default_agent_id() -> str:
    """`user@host`, made safe for an agent id."""
    raw = f"{getpass.getuser()}@{socket.gethostname().split('.')[0]}"
    return re.sub(r"[^A-Za-z0-9_.@-]", "-", raw)[:64]


@dataclass(frozen=True)
class ClientSettings:
    """Everything an agent client needs."""

    server: str = "127.0.0.1:50051"
    """Server address HOST:PORT."""
    agent_id: str = ""
    """This agent's id (development mode sends it as call metadata); default user@host."""
    insecure: bool = False
    """Plain-text connection (development servers on loopback)."""
    data_home: Path | None = None
    """Root for caches and models; default $XDG_DATA_HOME/mnemosync or ~/.local/share/mnemosync."""
    cache_dir: Path | None = None
    """This agent's cache directory; default <data_home>/agents/<agent_id>."""
    embed_model: Path | None = None
    """GGUF embedding model; default <data_home>/models/all-MiniLM-L6-v2.gguf."""
    scope: str = "user"
    """Scope for new memories when none is given (for example project:<name>)."""
    timeout: float = 10.0
    """Seconds before a unary call counts the server as unreachable."""

    def resolved_agent_id(self) -> str:
        """The agent id, defaulted."""
        return self.agent_id or default_agent_id()

    def resolved_data_home(self) -> Path:
        """The data home, defaulted."""
        return self.data_home or default_data_home()

    def resolved_cache_dir(self) -> Path:
        """The cache directory, defaulted."""
        return self.cache_dir or self.resolved_data_home() / "agents" / self.resolved_agent_id()

    def resolved_model_path(self) -> Path:
        """The embedding model file, defaulted."""
        from agent_client.model import default_model_path

        return self.embed_model or default_model_path(self.resolved_data_home())


def load(
    *,
    settings_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ClientSettings:
    """Client settings from the `[client]` table, `MNEMOSYNC_*` variables and flags."""
    return build(ClientSettings, "client", settings_file=settings_file,
                 environ=environ if environ is not None else os.environ, overrides=overrides)
