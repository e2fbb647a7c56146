"""The server's settings: one frozen object built once at start-up (`load`, see `mnemosync.kernel.settings_loading`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemosync.kernel.consolidation_rules import ConsolidationSettings
from mnemosync.kernel.errors import SettingsError
from mnemosync.kernel.lifecycle import LifecycleSettings
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.settings_loading import build, check_fields, default_data_home


@dataclass(frozen=True)
class ServerSettings:
    """Everything the server needs to run."""

    data_dir: Path = field(default_factory=lambda: default_data_home() / "server")
    """Directory holding `mnemosync.db` (created if missing)."""
    listen: str = "127.0.0.1:50051"
    """host:port to listen on; port 0 picks a free port."""
    insecure: bool = False
    """Serve plain text (no TLS). Allowed only on a loopback address."""
    tls_dir: Path | None = None
    """mTLS files: ca.crt, server.crt, server.key and crl.pem (the folder `mnemosync ca issue-server` writes; never
    one holding ca.key); required unless insecure."""
    allow_missing_crl: bool = False
    """Start under mTLS without a crl.pem in tls_dir (revoked certificates are then accepted until one appears; the
    server says so loudly). Off: a missing revocation list stops the server from starting."""
    store: str = ""
    """Where the changelog lives: empty for the SQLite file in data_dir (the default), or a PostgreSQL URL
    (postgresql://user:password@host:port/database) shared by any number of servers, each keeping a local replica
    in its data_dir (see `mnemosync.server.postgres_record`; needs `pip install 'mnemosync[postgresql]'`)."""
    read_store: str = ""
    """A PostgreSQL hot standby of `store` (postgresql://…) to fold other servers' entries from, so that Sync,
    Subscribe and Search load the standby rather than the primary; appends still go to `store`. Empty: read the
    primary. Stats reports the standby's lag (see `mnemosync.server.postgres_record`)."""
    synchronous: str = "full"
    """SQLite durability: "full" survives power loss, "normal" a process crash only."""
    embed_model: Path | None = None
    """GGUF model whose fingerprint a new data directory pins; if unset or missing, the
    first write that carries an embedding pins its model."""
    max_workers: int = 64
    """Threads for the blocking store work of calls (reads, waits for the writer). Open Sync/Subscribe streams
    hold none while they wait: the server runs on grpc.aio."""
    rrf_k: int = 60
    """The constant of the plain Reciprocal Rank Fusion score every search hit reports for comparison
    (hybrid search orders by its fused score, see `mnemosync.kernel.search`)."""
    sync_page_size: int = 1000
    """Changelog entries Sync and Subscribe read per page (memory use of one stream is bounded by it). Tests set
    it small so that every catch-up crosses page boundaries."""
    policy_file: Path | None = None
    """TOML agent policy: authority, scopes and admin per agent, defaults for unknown agents, and
    governance rules (see `mnemosync.server.policy`). Unset: every agent has authority 3 and every scope."""
    allow_broken_chain: bool = False
    """Serve even when the start-up check finds the changelog or its transparency log broken (the problems are
    logged; agents that saw the entries before will still refuse the rewritten ones)."""
    limits: Limits = field(default_factory=Limits)
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    """The memory lifecycle's parameters (`[server.lifecycle]`; see `mnemosync.kernel.lifecycle` for each and the
    seeds' defaults), the sweep interval among them."""
    consolidation: ConsolidationSettings = field(default_factory=ConsolidationSettings)
    """Consolidation's parameters (`[server.consolidation]`; see `mnemosync.kernel.consolidation_rules`), its
    interval among them."""
    snapshot_every_entries: int = 10_000
    """Make a snapshot of the projections once the changelog has grown by this many entries since the last one
    (0: not by count), in a niced process of its own: a new cache then replays at most this many entries (see
    `mnemosync.server.snapshots.EVERY_ENTRIES` for why this many)."""
    snapshot_every_hours: float = 0.0
    """Make a snapshot this many hours after the last one (0: not by time)."""
    snapshot_keep: int = 3
    """How many snapshots to keep (the newest)."""
    chain_audit_after_seconds: float = 60.0
    """When the background audit first walks the whole chain and tree once the server serves (the start-up check
    walks only what came after its mark; see `mnemosync.server.chain_audit`)."""
    chain_audit_every_hours: float = 24.0
    """How long after each background audit the next one walks the chain again (0: only the one after start)."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.read_store and not self.store:
            raise SettingsError("read_store (a PostgreSQL hot standby) needs store to be the primary's "
                                "postgresql:// URL")
        if self.sync_page_size < 1:
            raise SettingsError(f"sync_page_size must be at least 1, got {self.sync_page_size}")

    @property
    def db_path(self) -> Path:
        """The SQLite file inside `data_dir`."""
        return self.data_dir / "mnemosync.db"


def load(
    *,
    settings_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ServerSettings:
    """The server's settings from the `[server]` table, environment and flags (see `build`)."""
    return build(ServerSettings, "server", settings_file=settings_file, environ=environ,
                 overrides=overrides)
