"""The dashboard's own settings: where it listens and how a person signs in.

Who the dashboard is towards the server (address, agent id, certificate) is
the agent's `ClientSettings`; this is the rest, from the `[dashboard]` table of
the settings file, `MNEMOSYNC_DASHBOARD_*` variables and `mnemosync dashboard`'s
flags (`mnemosync.kernel.settings_loading.build`). Field names carry the `dashboard_` prefix
so their variables cannot be mistaken for the server's (`MNEMOSYNC_LISTEN`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemosync.kernel.settings_loading import build, check_fields

DEFAULT_LISTEN = "127.0.0.1:8765"


@dataclass(frozen=True)
class DashboardSettings:
    """Where the dashboard listens and how it lets people in."""

    dashboard_listen: str = DEFAULT_LISTEN
    """HOST:PORT of the web application (port 0: any free port)."""
    dashboard_login: bool = True
    """Require the sign-in token printed at start. Only a loopback address may turn it off."""
    dashboard_https_cert: Path | None = None
    """HTTPS certificate (PEM); required, with the key, on any address but loopback."""
    dashboard_https_key: Path | None = None
    """The HTTPS certificate's private key (PEM)."""
    dashboard_lag_warning: int = 1000
    """Entries behind the head past which an agent is flagged as far behind."""

    def __post_init__(self) -> None:
        check_fields(self)


def load(*, settings_file: Path | None = None, environ: Mapping[str, str] | None = None,
         overrides: Mapping[str, Any] | None = None) -> DashboardSettings:
    """Dashboard settings from the `[dashboard]` table, `MNEMOSYNC_DASHBOARD_*` variables and flags.

    Raises:
        SettingsError: a value of the wrong kind, or a bad settings file (the message names it).
    """
    return build(DashboardSettings, "dashboard", settings_file=settings_file,
                 environ=environ if environ is not None else os.environ, overrides=overrides)
