"""The shim's settings, read at the edge: flags, `MNEMOSYNC_*` variables, Claude Code's environment.

Both entry points (`mnemosync-mcp` and `mnemosync hook …`) build one frozen
`ClientSettings` here and hand it to the library; nothing below this module
reads the environment.

Scope precedence (the scope new memories go to, and the session's home scope
for search, lists and core memories): `--scope`, then `MNEMOSYNC_SCOPE`, then
`project:<basename>` of the project directory (the hook's `cwd`, or
`CLAUDE_PROJECT_DIR`, which Claude Code sets for MCP servers and hooks), then
the settings file's `[client] scope`, then `user`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePath

import click

from agent_client import settings as client_settings
from agent_client.settings import ClientSettings

USER_SCOPE = "user"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@-]+")


def project_scope(directory: str | os.PathLike[str]) -> str | None:
    """`project:<basename>` for a project directory, made a valid scope; None if it has no usable name.

    Characters a scope may not hold become `-`, so `~/src/My App` gives `project:My-App`.
    """
    name = _UNSAFE.sub("-", PurePath(os.fspath(directory).rstrip("/\\") or "/").name).strip("-.")
    return f"project:{name}"[:128] if name else None


def load_settings(
    *,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    project_dir: str | None = None,
    server: str | None = None,
    agent_id: str | None = None,
    cache_dir: Path | None = None,
    insecure: bool | None = None,
    embed_model: Path | None = None,
    scope: str | None = None,
    timeout: float | None = None,
    cert_dir: Path | None = None,
    tls_server_name: str | None = None,
) -> ClientSettings:
    """Builds the client settings (see the module docstring for the scope rule).

    Args:
        environ: The environment to read (default `os.environ`).
        config_file: TOML file with a `[client]` table (default `MNEMOSYNC_CONFIG`).
        project_dir: The project directory (default `CLAUDE_PROJECT_DIR`).
        server, agent_id, cache_dir, insecure, embed_model, scope, timeout, cert_dir, tls_server_name:
            Flag values; None leaves the setting to the environment, the file or the default.

    Raises:
        ValueError: A malformed value in the file or the environment.
    """
    environ = os.environ if environ is None else environ
    if config_file is None and environ.get("MNEMOSYNC_CONFIG"):
        config_file = Path(environ["MNEMOSYNC_CONFIG"])
    if scope is None and not environ.get("MNEMOSYNC_SCOPE"):
        project = project_dir or environ.get("CLAUDE_PROJECT_DIR")
        if project:
            scope = project_scope(project)
    overrides = {"server": server, "agent_id": agent_id, "cache_dir": cache_dir, "insecure": insecure,
                 "embed_model": embed_model, "scope": scope, "timeout": timeout, "cert_dir": cert_dir,
                 "tls_server_name": tls_server_name}
    known = {f.name for f in dataclasses.fields(ClientSettings)}
    unknown = sorted(k for k, v in overrides.items() if v is not None and k not in known)
    if unknown:
        raise ValueError(f"this agent client has no setting {', '.join(unknown)}")
    return client_settings.load(settings_file=config_file, environ=environ,
                                overrides={k: v for k, v in overrides.items() if k in known})


def home_scopes(scope: str) -> tuple[str, ...]:
    """The scopes a session reads by default: its own scope and `user` (the user's cross-project memory)."""
    return (scope,) if scope == USER_SCOPE else (scope, USER_SCOPE)


def settings_options(func):
    """Click options shared by `mnemosync-mcp` and `mnemosync hook`: connection, identity, cache, scope.

    The wrapped command receives the raw values as keyword arguments named
    `server`, `agent_id`, `cache_dir`, `insecure`, `cert_dir`, `tls_server_name`, `embed_model`,
    `scope`, `config_file`.
    """

    @click.option("--server", help="Server HOST:PORT [env MNEMOSYNC_SERVER; default 127.0.0.1:50051].")
    @click.option("--agent-id", help="This agent's id [env MNEMOSYNC_AGENT_ID; default: the --cert-dir certificate's, "
                                     "else user@host].")
    @click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
                  help="Local cache directory [env MNEMOSYNC_CACHE_DIR; default per agent under the data home].")
    @click.option("--insecure/--no-insecure", default=None,
                  help="Plain-text connection to a development server on loopback [env MNEMOSYNC_INSECURE].")
    @click.option("--cert-dir", type=click.Path(file_okay=False, path_type=Path),
                  help="mTLS: this agent's certificate directory from `mnemosync ca issue-agent` "
                       "(ca.crt, agent.crt, agent.key) [env MNEMOSYNC_CERT_DIR; none by default: "
                       "required unless --insecure].")
    @click.option("--tls-server-name", help="mTLS: name the server certificate must carry, if not the --server "
                                            "host [env MNEMOSYNC_TLS_SERVER_NAME].")
    @click.option("--embed-model", type=click.Path(dir_okay=False, path_type=Path),
                  help="GGUF embedding model [env MNEMOSYNC_EMBED_MODEL].")
    @click.option("--scope", help="Scope for new memories and default reads [env MNEMOSYNC_SCOPE; default "
                                  "project:<basename of CLAUDE_PROJECT_DIR> when set, else user].")
    @click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                  envvar="MNEMOSYNC_CONFIG", help="TOML settings file with a [client] table.")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper
