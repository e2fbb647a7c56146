"""The operator's commands on a server data directory: serve, rebuild, verify.

Parsing and printing only; the work is done by `server.app` and `server.sqlite_store`.
Failures are typed errors; `mnemosync`'s error edge prints them and picks the
exit code (`server.core.command_line`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

import click

from server import settings as settings_module
from server.core.command_line import echo_json, json_option
from server.core.errors import ChainBroken, NotFound
from server.core.settings import default_data_home

log = logging.getLogger("mnemosync.server")

data_dir_option = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="MNEMOSYNC_DATA_DIR",
    help="Server data directory [env MNEMOSYNC_DATA_DIR; default ~/.local/share/mnemosync/server].",
)
config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    envvar="MNEMOSYNC_CONFIG",
    help="TOML settings file with a [server] table [env MNEMOSYNC_CONFIG].",
)


def _settings(config_file, **overrides) -> settings_module.ServerSettings:
    return settings_module.load(settings_file=config_file, environ=os.environ, overrides=overrides)


def _existing(settings: settings_module.ServerSettings) -> Path:
    """The data directory's database, which rebuild and verify need to exist."""
    if not settings.db_path.exists():
        raise NotFound(f"no mnemosync database at {settings.db_path}; give the server's --data-dir")
    return settings.db_path


def _pin_model_for_new_store(settings):
    """Fingerprints the configured model when the data directory is new."""
    if settings.db_path.exists():
        return None
    from server.core.model_identity import default_model_path, fingerprint

    model_path = settings.embed_model or default_model_path(default_data_home())
    if not Path(model_path).exists():
        return None
    return fingerprint(Path(model_path))


@click.command()
@data_dir_option
@config_option
@click.option("--listen", help="HOST:PORT to listen on [env MNEMOSYNC_LISTEN; default 127.0.0.1:50051].")
@click.option(
    "--insecure/--no-insecure",
    default=None,
    help="Plain text without TLS: development on a loopback address only.",
)
@click.option(
    "--tls-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="mTLS: the folder `mnemosync ca issue-server` wrote (ca.crt, server.crt, server.key, crl.pem; refused if "
    "it holds ca.key) [env MNEMOSYNC_TLS_DIR]. Client certificates are required; agent ids come from them.",
)
@click.option(
    "--allow-missing-crl", is_flag=True, default=None,
    help="Start under mTLS without crl.pem in --tls-dir: revoked certificates are ACCEPTED until it appears "
    "[env MNEMOSYNC_ALLOW_MISSING_CRL]. Without it a missing revocation list stops the server.",
)
@click.option(
    "--embed-model",
    type=click.Path(dir_okay=False, path_type=Path),
    help="GGUF model a new data directory pins [env MNEMOSYNC_EMBED_MODEL; default: the built default model].",
)
@click.option(
    "--synchronous",
    type=click.Choice(["full", "normal"]),
    help="SQLite durability: full survives power loss, normal only a process crash [default full].",
)
@click.option(
    "--policy", "policy_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TOML agent policy and governance rules [env MNEMOSYNC_POLICY_FILE; default: every agent authority 3, "
    "every scope].",
)
def serve(data_dir, config_file, listen, insecure, tls_dir, allow_missing_crl, embed_model, synchronous,
          policy_file):
    """Run the memory server until SIGTERM or Ctrl-C.

    \b
    Examples:
      mnemosync serve --insecure
      mnemosync serve --data-dir /srv/mnemosync --listen 127.0.0.1:7000 --insecure
      mnemosync serve --tls-dir ~/.local/share/mnemosync/ca/server --listen 0.0.0.0:50051 --policy policy.toml
    """
    from server.app import run_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = _settings(
        config_file, data_dir=data_dir, listen=listen, insecure=insecure, tls_dir=tls_dir,
        allow_missing_crl=allow_missing_crl, embed_model=embed_model, synchronous=synchronous,
        policy_file=policy_file,
    )
    with run_server(settings, pin_model=_pin_model_for_new_store(settings)) as running:
        # Installed once serving (a server that fails to start leaves the signals alone), before it says so.
        # The handler only appends to a list: taking a lock there (Event.set) can deadlock when the
        # signal lands while the main thread itself holds that lock inside Event.wait.
        received: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: received.append(signum))
        model = running.store.model()
        if settings.insecure:
            log.warning("PLAIN TEXT, NO AUTHENTICATION: development mode on loopback only")
        else:
            click.echo(f"mTLS: client certificates issued by {settings.tls_dir / 'ca.crt'} required; "
                       f"{_revocation_line(running.revocations)}", err=True)
        log.info("data: %s", settings.db_path)
        log.info(
            "embedding model: %s",
            model.describe() if model else "not pinned yet (the first write pins it)",
        )
        click.echo(f"mnemosync serving on {running.address}", err=True)
        sys.stderr.flush()
        while not received:
            time.sleep(0.2)
        click.echo("mnemosync: shutting down (finishing calls in flight)", err=True)


def _revocation_line(revocations) -> str:
    """What the start-up line says about revocation: only what is true now."""
    if not revocations.loaded:
        return (f"NO REVOCATION LIST: {revocations.path} is missing (--allow-missing-crl), so revoked certificates "
                "are accepted until it appears")
    return (f"revocations read from {revocations.path} (CRL number {revocations.number}, "
            f"{revocations.revoked} revoked; re-read when it changes)")


@click.command()
@data_dir_option
@config_option
def rebuild(data_dir, config_file):
    """Recompute memories, vector and keyword indexes from the changelog.

    Run it with the server stopped.

    \b
    Example:
      mnemosync rebuild --data-dir ~/.local/share/mnemosync/server
    """
    from server.sqlite_store import SqliteStore

    settings = _settings(config_file, data_dir=data_dir)
    with SqliteStore(_existing(settings), synchronous=settings.synchronous) as store:
        count = store.rebuild()
    click.echo(f"rebuilt projections from {count} changelog entries")


@click.command()
@data_dir_option
@config_option
@click.option("--ca-dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Also check that every signature was made with a key this CA issued to its agent.")
@json_option
def verify(data_dir, config_file, ca_dir, as_json):
    """Walk the changelog's hash chain and signatures; report the first entry that fails.

    Finds entries changed, removed, reordered or blanked without a redaction,
    and signatures that do not verify (or, with --ca-dir, were made with a key
    the CA never issued to that agent). Exits 1 when anything fails (after the
    report, and with `Error: ` and the problem on stderr).

    \b
    Example:
      mnemosync verify --data-dir ~/.local/share/mnemosync/server --ca-dir ~/mnemosync-ca
    """
    from server.ca import signing_keys
    from server.sqlite_store import SqliteStore

    settings = _settings(config_file, data_dir=data_dir)
    with SqliteStore(_existing(settings), synchronous=settings.synchronous) as store:
        report = store.verify(signing_keys(ca_dir) if ca_dir else None)
    if as_json:
        echo_json({
            "ok": report.ok, "entries": report.entries, "head_seq": report.head_seq,
            "head_hash": report.head_hash, "first_bad_seq": report.first_bad_seq,
            "problem": report.problem, "signed": report.signed, "redacted": report.redacted,
        })
    elif report.ok:
        click.echo(f"ok: {report.entries} entries ({report.signed} signed, {report.redacted} redacted), "
                   f"head {report.head_seq} {report.head_hash[:16]}")
    else:
        click.echo(f"BROKEN at seq {report.first_bad_seq}: {report.problem}")
    if not report.ok:
        raise ChainBroken(f"the hash chain is broken at seq {report.first_bad_seq}: {report.problem}")
