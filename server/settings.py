"""The server's settings: one frozen object built once at start-up.

Precedence, highest first: command-line flags, `MNEMOSYNC_*` environment
variables, the `[server]` table of a TOML settings file, then the defaults
documented on each field. Only the CLI reads the environment and the file
(`load`); everything below it receives a `ServerSettings`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any


def default_data_home() -> Path:
    """`$XDG_DATA_HOME/mnemosync`, or `~/.local/share/mnemosync`."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "mnemosync"


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
    """Sync/Subscribe streams one agent may hold open at once (each holds a server thread); 0: no cap."""
    rate_per_agent: float = 5_000.0
    """Calls per second one agent may make, sustained (token bucket); 0: no limit. Over it: RESOURCE_EXHAUSTED
    with the wait in the message and the `retry-after-ms` trailer."""
    rate_burst: int = 10_000
    """Calls one agent may make at once after a quiet period."""


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
    """mTLS files: ca.crt, server.crt, server.key and crl.pem (`mnemosync ca`); required unless insecure."""
    synchronous: str = "full"
    """SQLite durability: "full" survives power loss, "normal" a process crash only."""
    embed_model: Path | None = None
    """GGUF model whose fingerprint a new data directory pins; if unset or missing, the
    first write that carries an embedding pins its model."""
    max_workers: int = 64
    """Threads serving RPCs (each open Sync/Subscribe stream holds one)."""
    rrf_k: int = 60
    """Reciprocal Rank Fusion constant."""
    policy_file: Path | None = None
    """TOML agent policy: authority, scopes and admin per agent, defaults for unknown agents, and
    governance rules (see `server.policy`). Unset: every agent has authority 3 and every scope."""
    limits: Limits = field(default_factory=Limits)

    @property
    def db_path(self) -> Path:
        """The SQLite file inside `data_dir`."""
        return self.data_dir / "mnemosync.db"


def _coerce(kind: Any, value: Any) -> Any:
    if value is None:
        return None
    if kind in (Path, Path | None, "Path", "Path | None"):
        return Path(value).expanduser()
    if kind in (bool, "bool") and isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    if kind in (int, "int"):
        return int(value)
    if kind in (float, "float"):
        return float(value)
    return value


def build(
    cls: type,
    table: str,
    *,
    settings_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Any:
    """Builds a settings dataclass from a TOML file, `MNEMOSYNC_*` variables and flags.

    Args:
        cls: The frozen settings dataclass (`ServerSettings`, the agent's `ClientSettings`).
        table: The TOML table holding its keys (`server`, `client`).
        settings_file: Optional TOML file; keys are the field names.
        environ: Environment to read `MNEMOSYNC_<FIELD>` from (for example
            `MNEMOSYNC_DATA_DIR`, `MNEMOSYNC_LISTEN`).
        overrides: Values from command-line flags; None values are ignored.

    Raises:
        ValueError: an unknown key in the file, or a value of the wrong kind.
    """
    kinds = {f.name: f.type for f in fields(cls)}
    values: dict[str, Any] = {}
    limit_values: dict[str, Any] = {}
    if settings_file is not None:
        section = tomllib.loads(Path(settings_file).read_text()).get(table, {})
        for key, value in section.items():
            if key == "limits" and "limits" in kinds:
                limit_values.update(value)
            elif key in kinds:
                values[key] = _coerce(kinds[key], value)
            else:
                raise ValueError(f"{settings_file}: unknown [{table}] setting {key!r}")
    for name, kind in kinds.items():
        env_value = (environ or {}).get(f"MNEMOSYNC_{name.upper()}")
        if env_value and name != "limits":
            values[name] = _coerce(kind, env_value)
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(kinds[name], value)
    settings = cls(**values)
    if limit_values:
        settings = replace(settings, limits=Limits(**limit_values))
    return settings


def load(
    *,
    settings_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ServerSettings:
    """The server's settings from the `[server]` table, environment and flags (see `build`)."""
    return build(ServerSettings, "server", settings_file=settings_file, environ=environ,
                 overrides=overrides)
