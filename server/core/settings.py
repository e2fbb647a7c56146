"""Building one frozen settings object per process from flags, `MNEMOSYNC_*` variables and a TOML file.

Precedence, highest first: command-line flags, `MNEMOSYNC_*` environment
variables, the process's table (`[server]`, `[client]`) of a TOML settings
file, then the defaults documented on each field. Only the edges (the CLI, the
MCP shim's entry point) call `build`; everything below them receives the
settings object.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from server.core.limits import Limits


def default_data_home() -> Path:
    """`$XDG_DATA_HOME/mnemosync`, or `~/.local/share/mnemosync`."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "mnemosync"


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
