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


@dataclass(frozen=True)
class ServerSettings:
    """Everything the server needs to run."""

    data_dir: Path = field(default_factory=lambda: default_data_home() / "server")
    """Directory holding `mnemosync.db` (created if missing)."""
    listen: str = "127.0.0.1:50051"
    """host:port to listen on; port 0 picks a free port."""
    insecure: bool = False
    """Serve plain text (no TLS). Allowed only on a loopback address."""
    synchronous: str = "full"
    """SQLite durability: "full" survives power loss, "normal" a process crash only."""
    embed_model: Path | None = None
    """GGUF model whose fingerprint a new data directory pins; if unset or missing, the
    first write that carries an embedding pins its model."""
    max_workers: int = 64
    """Threads serving RPCs (each open Sync/Subscribe stream holds one)."""
    rrf_k: int = 60
    """Reciprocal Rank Fusion constant."""
    limits: Limits = field(default_factory=Limits)

    @property
    def db_path(self) -> Path:
        """The SQLite file inside `data_dir`."""
        return self.data_dir / "mnemosync.db"


_PATH_FIELDS = {"data_dir", "embed_model"}
_BOOL_FIELDS = {"insecure"}
_INT_FIELDS = {"max_workers", "rrf_k"}


def _coerce(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in _PATH_FIELDS:
        return Path(value).expanduser()
    if name in _BOOL_FIELDS and isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    if name in _INT_FIELDS:
        return int(value)
    return value


def load(
    *,
    settings_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ServerSettings:
    """Builds settings from a TOML file, `MNEMOSYNC_*` variables and flag overrides.

    Args:
        settings_file: Optional TOML file with a `[server]` table (and
            `[server.limits]`); keys are the field names above.
        environ: Environment to read `MNEMOSYNC_<FIELD>` from (for example
            `MNEMOSYNC_DATA_DIR`, `MNEMOSYNC_LISTEN`).
        overrides: Values from command-line flags; None values are ignored.

    Raises:
        ValueError: An unknown key in the file.
    """
    values: dict[str, Any] = {}
    limit_values: dict[str, Any] = {}
    known = {f.name for f in fields(ServerSettings)}
    if settings_file is not None:
        table = tomllib.loads(Path(settings_file).read_text()).get("server", {})
        for key, value in table.items():
            if key == "limits":
                limit_values.update(value)
            elif key in known:
                values[key] = _coerce(key, value)
            else:
                raise ValueError(f"{settings_file}: unknown server setting {key!r}")
    for name in known - {"limits"}:
        env_value = (environ or {}).get(f"MNEMOSYNC_{name.upper()}")
        if env_value:
            values[name] = _coerce(name, env_value)
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, value)
    settings = ServerSettings(**values)
    if limit_values:
        settings = replace(settings, limits=Limits(**limit_values))
    return settings
