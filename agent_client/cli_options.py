"""The agent's connection options, defined once for every command that starts an agent client.

`mnemosync add/search/get/redact/sync/status`, `mnemosync conflicts …`,
`mnemosync hook …` and `mnemosync-mcp` all take the same flags for where the
server is, who this agent is, and where its cache and model are. Each maps to
a `ClientSettings` field and its `MNEMOSYNC_*` variable (read by
`mnemosync.agent.client_settings.load`, not by click, so the precedence flags >
environment > file is the settings object's own).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from mnemosync.kernel.command_line import json_option

if TYPE_CHECKING:  # the settings load NumPy; `mnemosync-mcp`'s relay takes these options without them
    from mnemosync.agent.client_settings import ClientSettings

_F = TypeVar("_F", bound=Callable[..., Any])

CONNECTION_FIELDS = ("server", "agent_id", "cache_dir", "insecure", "cert_dir", "tls_server_name", "embed_model")
"""The `ClientSettings` fields the connection options set."""


def connection_options(func: _F) -> _F:
    """--server, --agent-id, --cache-dir, --insecure, --cert-dir, --tls-server-name, --embed-model, --config.

    The command receives them together as `connection`: the `ClientSettings`
    fields given on the command line (None when not given) and `config_file`.
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
                       "(ca.crt, agent.crt, agent.key) [env MNEMOSYNC_CERT_DIR; required unless --insecure].")
    @click.option("--tls-server-name",
                  help="mTLS: name the server certificate must carry, if not the --server host "
                       "[env MNEMOSYNC_TLS_SERVER_NAME].")
    @click.option("--embed-model", type=click.Path(dir_okay=False, path_type=Path),
                  help="GGUF embedding model [env MNEMOSYNC_EMBED_MODEL].")
    @click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                  envvar="MNEMOSYNC_CONFIG", help="TOML settings file with a [client] table [env MNEMOSYNC_CONFIG].")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        connection = {name: kwargs.pop(name) for name in (*CONNECTION_FIELDS, "config_file")}
        return func(*args, connection=connection, **kwargs)

    return wrapper  # type: ignore[return-value]


def load_settings(connection: dict[str, Any]) -> ClientSettings:
    """The agent's settings from the connection options, `MNEMOSYNC_*` variables and the settings file.

    Raises:
        SettingsError: a value of the wrong kind, or a bad settings file (the message names it).
    """
    from mnemosync.agent import client_settings

    overrides = {name: connection[name] for name in CONNECTION_FIELDS}
    return client_settings.load(settings_file=connection["config_file"], environ=os.environ, overrides=overrides)


def client_options(func: _F) -> _F:
    """The connection options and `--json`; the command receives `settings` (a `ClientSettings`) and `as_json`."""

    @connection_options
    @json_option
    @functools.wraps(func)
    def wrapper(*args, connection: dict[str, Any], **kwargs):
        return func(*args, settings=load_settings(connection), **kwargs)

    return wrapper  # type: ignore[return-value]
