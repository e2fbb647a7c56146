"""The agent client's settings: one frozen object per process.

Built at the edges (CLI, MCP shim) from flags, `MNEMOSYNC_*` variables and the
`[client]` table of the settings file (`mnemosync.kernel.settings_loading.build`); the library
itself only receives a `ClientSettings`, which may also be made directly (paths
as text or `Path`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemosync.agent.local_socket import default_agent_id
from mnemosync.kernel.addresses import is_loopback
from mnemosync.kernel.errors import SettingsError
from mnemosync.kernel.model_identity import default_model_path
from mnemosync.kernel.settings_loading import build, check_fields, default_data_home


@dataclass(frozen=True)
class ClientSettings:
    """Everything an agent client needs."""

    server: str = "127.0.0.1:50051"
    """Server address HOST:PORT."""
    agent_id: str = ""
    """This agent's id (development mode sends it as call metadata); default: the id in the
    certificate with cert_dir, else user@host."""
    insecure: bool = False
    """Plain-text connection (development servers on loopback; refused for any other server address, as the server
    refuses to serve plain text off loopback: the agent id would travel in clear to an unauthenticated server)."""
    cert_dir: Path | None = None
    """mTLS: the directory `mnemosync ca issue-agent NAME` wrote (ca.crt, agent.crt, agent.key);
    required unless insecure. The server takes the agent id from agent.crt."""
    tls_server_name: str | None = None
    """mTLS: the name to check the server's certificate against, when it differs from the
    host in `server` (for example when connecting by IP address)."""
    data_home: Path | None = None
    """Root for caches and models; default $XDG_DATA_HOME/mnemosync or ~/.local/share/mnemosync."""
    cache_dir: Path | None = None
    """This agent's cache directory; default <data_home>/agents/<agent_id>."""
    embed_model: Path | None = None
    """GGUF embedding model; default <data_home>/models/all-MiniLM-L6-v2.gguf."""
    embed_threads: int = 1
    """llama.cpp threads for embedding one text (a query, a single add). One is the fastest measured, alone and
    beside other sessions' embedders (`ops/bench/bench_peer.py`)."""
    embed_batch_threads: int = 0
    """llama.cpp threads for packed batches (add_many, import, ingest); 0: half the usable CPUs, at least one."""
    scope: str = "user"
    """Scope for new memories when none is given (for example project:<name>)."""
    timeout: float = 10.0
    """Seconds before a unary call counts the server as unreachable."""

    def __post_init__(self) -> None:
        check_fields(self)  # paths may be given as text; anything else of the wrong kind is refused here
        if self.embed_threads < 1:
            raise SettingsError(f"embed_threads must be at least 1, got {self.embed_threads}")
        if self.embed_batch_threads < 0:
            raise SettingsError(f"embed_batch_threads must be 0 (half the CPUs) or more, got "
                                f"{self.embed_batch_threads}")
        if self.insecure:
            host = self.server.rpartition(":")[0].strip("[]") if ":" in self.server else self.server
            if not is_loopback(host):
                raise SettingsError(
                    f"insecure (plain text) is allowed only to a loopback server (127.0.0.1, ::1, localhost), not "
                    f"{self.server}: the agent id would travel in clear to a server nobody authenticated; connect "
                    "with --cert-dir (the bundle `mnemosync ca issue-agent NAME` wrote)")

    def resolved_agent_id(self) -> str:
        """The agent id, defaulted (from the certificate when cert_dir is set).

        Raises:
            TlsError: the certificate cannot be read, or agent_id names another agent.
        """
        tls = self.tls()
        if tls is None:
            return self.agent_id or default_agent_id()
        from mnemosync.agent.errors import TlsError

        certified = tls.agent_id()
        if self.agent_id and self.agent_id != certified:
            raise TlsError(
                f"agent id {self.agent_id!r} does not match the certificate in {self.cert_dir}, which is "
                f"for {certified!r}; with a certificate, leave --agent-id / MNEMOSYNC_AGENT_ID unset"
            )
        return certified

    def tls(self):
        """The agent's TLS files (`mnemosync.agent.tls.AgentTls`), or None for plain text or none configured."""
        if self.insecure or self.cert_dir is None:
            return None
        from mnemosync.agent.tls import AgentTls

        return AgentTls(Path(self.cert_dir), self.tls_server_name)

    def resolved_data_home(self) -> Path:
        """The data home, defaulted."""
        return self.data_home or default_data_home()

    def resolved_cache_dir(self) -> Path:
        """The cache directory, defaulted."""
        return self.cache_dir or self.resolved_data_home() / "agents" / self.resolved_agent_id()

    def resolved_model_path(self) -> Path:
        """The embedding model file, defaulted."""
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
