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

from mnemosync.kernel.consolidation_rules import ConsolidationSettings
from mnemosync.kernel.errors import SettingsError
from mnemosync.kernel.lifecycle import LifecycleSettings
from mnemosync.kernel.limits import Limits


def default_data_home() -> Path:
    """`$XDG_DATA_HOME/mnemosync`, or `~/.local/share/mnemosync`."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "mnemosync"


_PATHS = (Path, Path | None, "Path", "Path | None")
_NUMBERS = {int: int, "int": int, float: float, "float": float}


def _coerce(kind: Any, value: Any) -> Any:
    """A value read as text (environment, flags) or TOML, as the field's kind; ValueError when it is not one."""
    if value is None:
        return None
    if kind in _PATHS:
        return Path(value).expanduser()
    if kind in (bool, "bool") and isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    if kind in _NUMBERS and not isinstance(value, bool):
        return _NUMBERS[kind](value)
    return value


def check_fields(settings: Any) -> None:
    """For a settings dataclass's `__post_init__`: a path given as text becomes a `Path`, and a value of the
    wrong kind is refused at construction, naming the field, instead of failing deep inside a later call.

    Raises:
        TypeError: a field holds a value of the wrong kind.
    """
    name = type(settings).__name__
    for f in fields(settings):
        value = getattr(settings, f.name)
        if value is None:
            continue
        if f.type in _PATHS:
            if isinstance(value, str):
                object.__setattr__(settings, f.name, Path(value).expanduser())
            elif not isinstance(value, Path):
                raise TypeError(f"{name}.{f.name} must be a path (str or pathlib.Path), got {value!r}")
        elif f.type in (bool, "bool") and not isinstance(value, bool):
            raise TypeError(f"{name}.{f.name} must be True or False, got {value!r}")
        elif f.type in _NUMBERS and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise TypeError(f"{name}.{f.name} must be a number, got {value!r}")
        elif f.type in (str, "str", "str | None") and not isinstance(value, str):
            raise TypeError(f"{name}.{f.name} must be text, got {value!r}")


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
        SettingsError: the file cannot be read, or a key is unknown, or a value is of the wrong kind (the message
            names the file or variable and the setting).
    """
    kinds = {f.name: f.type for f in fields(cls)}
    values: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}

    def take(name: str, value: Any, source: str) -> None:
        try:
            values[name] = _coerce(kinds[name], value)
        except ValueError:
            raise SettingsError(f"{source} must be {_kind_name(kinds[name])}, got {value!r}") from None

    if settings_file is not None:
        try:
            section = tomllib.loads(Path(settings_file).read_text()).get(table, {})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"cannot read the settings file {settings_file}: {exc}") from None
        for key, value in section.items():
            if key in _NESTED and key in kinds and isinstance(value, dict):
                nested.setdefault(key, {}).update(value)
            elif key in kinds:
                take(key, value, f"{settings_file}: [{table}] {key}")
            else:
                raise SettingsError(f"{settings_file}: unknown [{table}] setting {key!r}")
    for name in kinds:
        env_value = (environ or {}).get(f"MNEMOSYNC_{name.upper()}")
        if env_value and name not in _NESTED:
            take(name, env_value, f"MNEMOSYNC_{name.upper()}")
    for name, value in (overrides or {}).items():
        if value is not None:
            take(name, value, f"--{name.replace('_', '-')}")
    try:
        settings = cls(**values)
        for key, table_values in nested.items():
            settings = replace(settings, **{key: _NESTED[key](**table_values)})
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{settings_file or 'settings'}: {exc}") from None
    return settings


_NESTED = {"limits": Limits, "lifecycle": LifecycleSettings, "consolidation": ConsolidationSettings}
"""Settings that are tables of their own (`[server.limits]`, `[server.lifecycle]`, `[server.consolidation]`)."""


def _kind_name(kind: Any) -> str:
    return {int: "a whole number", "int": "a whole number", float: "a number", "float": "a number"}.get(
        kind, f"a {kind}")
