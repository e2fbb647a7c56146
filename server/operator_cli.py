"""The operator's commands on a server data directory: serve, rebuild, verify.

Parsing and printing only; the work is done by `mnemosync.server.app` and `mnemosync.server.ledger`.
Failures are typed errors; `mnemosync`'s error edge prints them and picks the
exit code (`mnemosync.kernel.command_line`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from mnemosync.kernel.command_line import echo_json, json_option, stop_signals
from mnemosync.kernel.errors import ChainBroken, FailedPrecondition, InvalidArgument, NotFound
from mnemosync.kernel.settings_loading import default_data_home
from mnemosync.kernel.wording import counted
from mnemosync.server import settings as settings_module

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


def _progress_to_stderr() -> None:
    """Shows the server modules' progress messages (a migration building the transparency log of a big
    database, for one) on stderr while a command works on the data directory."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")


store_option = click.option(
    "--store", metavar="URL",
    help="Keep the changelog in PostgreSQL (postgresql://user:password@host/db), shared by any number of servers; "
    "each keeps a local replica in its --data-dir [env MNEMOSYNC_STORE; default: the SQLite file in --data-dir].",
)


def _existing(settings: settings_module.ServerSettings) -> Path:
    """The data directory's database, which rebuild and verify need to exist (a PostgreSQL store's replica is
    folded again when missing)."""
    if settings.store:
        from mnemosync.server.postgres_record import replica_path

        return replica_path(settings.data_dir, settings.store)
    if not settings.db_path.exists():
        raise NotFound(f"no mnemosync database at {settings.db_path}; give the server's --data-dir")
    return settings.db_path


def _pin_model_for_new_store(settings):
    """Fingerprints the configured model when the store's local file is new: the SQLite file, or over PostgreSQL
    the replica when the database pins no model yet (the database's pin wins over a new replica's; reading the
    model's metadata costs about a second, at every restart otherwise)."""
    from mnemosync.server import postgres_record

    over_postgres = postgres_record.is_postgres_url(settings.store)
    local = postgres_record.replica_path(settings.data_dir, settings.store) if over_postgres else settings.db_path
    if local.exists():
        return None
    from mnemosync.kernel.model_identity import default_model_path, fingerprint

    model_path = settings.embed_model or default_model_path(default_data_home())
    if not Path(model_path).exists() or (over_postgres and postgres_record.pins_model(settings.store)):
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
@store_option
@click.option(
    "--read-store", metavar="URL",
    help="Fold other servers' entries from this PostgreSQL hot standby of --store instead of the primary (Sync, "
    "Subscribe and Search then load the standby; appends still go to --store; Stats reports its lag) "
    "[env MNEMOSYNC_READ_STORE].",
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
@click.option(
    "--allow-broken-chain", is_flag=True, default=None,
    help="Serve even if the start-up check finds the changelog or its transparency log broken (each problem is "
    "logged) [env MNEMOSYNC_ALLOW_BROKEN_CHAIN]. Without it such a server refuses to start.",
)
def serve(**options):
    """Run the memory server until SIGTERM or Ctrl-C.

    Before serving it walks the whole changelog (hashes, blanked entries) and
    recomputes its transparency log; if anything does not verify it refuses to
    start and says what to run, unless --allow-broken-chain.

    \b
    Examples:
      mnemosync serve --insecure
      mnemosync serve --data-dir /srv/mnemosync --listen 127.0.0.1:7000 --insecure
      mnemosync serve --tls-dir ~/.local/share/mnemosync/ca/server --listen 0.0.0.0:50051 --policy policy.toml
    """
    serving(**options)


Started = Callable[[ExitStack, Any, settings_module.ServerSettings], None]
"""What `serving` calls once the server listens: (exit stack, the running server, its settings)."""


def serving(*, config_file, started: Started | None = None, **options) -> None:
    """Runs the server from `serve`'s options until SIGTERM or Ctrl-C.

    `started` runs once it listens, before the stop signals are installed; what it enters on the exit stack is
    closed before the server stops (the command line's `serve --dashboard` starts the dashboard there, so this
    package never imports the agent's).
    """
    from mnemosync.server.app import run_server

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = _settings(config_file, **options)
    _refuse_both_transports(settings, options)
    with run_server(settings, pin_model=_pin_model_for_new_store(settings)) as running, ExitStack() as more:
        if started is not None:
            started(more, running, settings)
        # Installed once serving (a server that fails to start leaves the signals alone), before it says so.
        stopped = stop_signals()
        model = running.store.reads.model()
        if settings.insecure:
            log.warning("PLAIN TEXT, NO AUTHENTICATION: development mode on loopback only")
        else:
            click.echo(f"mTLS: client certificates issued by {Path(settings.tls_dir or '') / 'ca.crt'} required; "
                       f"{_revocation_line(running.revocations)}", err=True)
        log.info("data: %s", settings.db_path)
        log.info(
            "embedding model: %s",
            model.describe() if model else
            "not pinned yet (an admin's first write pins it; in development mode any first write)",
        )
        click.echo(f"mnemosync serving on {running.address}", err=True)
        sys.stderr.flush()
        stopped()
        click.echo("mnemosync: shutting down (finishing calls in flight)", err=True)


def _refuse_both_transports(settings, options: dict) -> None:
    """Refuses plain text and mTLS asked for together, naming where each came from: a flag, its variable (an
    `export MNEMOSYNC_INSECURE=1` left from development is easy to forget) or the settings file.

    Raises:
        FailedPrecondition: both were asked for.
    """
    if not (settings.insecure and settings.tls_dir is not None):
        return

    def origin(flag: str, option: str, variable: str) -> str:
        if options.get(option) not in (None, False):
            return flag
        return f"{variable} in the environment" if os.environ.get(variable) else "the settings file"

    plain, tls = origin("--insecure", "insecure", "MNEMOSYNC_INSECURE"), origin("--tls-dir", "tls_dir",
                                                                               "MNEMOSYNC_TLS_DIR")
    unset = "; unset MNEMOSYNC_INSECURE to serve mTLS" if plain.startswith("MNEMOSYNC_") else ""
    raise FailedPrecondition(f"{plain} asks for plain text and {tls} for mTLS: choose one (mTLS with --tls-dir, or "
                             f"plain text on loopback for development with --insecure){unset}")


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
@store_option
def rebuild(data_dir, config_file, store):
    """Recompute memories, vector and keyword indexes from the changelog.

    Run it with the server stopped. The changelog is verified first (hashes,
    blanked entries): a changelog that does not verify is not folded, and the
    command fails naming the entry. The transparency log's tree is rebuilt too.

    \b
    Example:
      mnemosync rebuild --data-dir ~/.local/share/mnemosync/server
    """
    from mnemosync.server import maintenance
    from mnemosync.server.app import open_store

    _progress_to_stderr()
    settings = _settings(config_file, data_dir=data_dir, store=store)
    _existing(settings)
    with open_store(settings) as opened:
        count = maintenance.rebuild(opened)
    click.echo(f"rebuilt projections from {count} changelog entries")


@click.command()
@data_dir_option
@config_option
@click.option("--ca-dir", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Also check every signature against the keys this CA issued, and that every agent the CA "
              "gave a signing key signed every entry it wrote while that certificate was in force.")
@store_option
@json_option
@click.option("--snapshot", "snapshots_too", is_flag=True,
              help="Also fold the changelog up to each kept snapshot's position and compare it with the snapshot "
              "(its signature, Merkle root and every section's digest).")
@click.option("--tls-dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="With --snapshot under mTLS: the server's TLS folder, whose checkpoint.key signs the snapshots "
              "[env MNEMOSYNC_TLS_DIR; else the CA's server folder (--ca-dir, MNEMOSYNC_CA_DIR or the default CA), "
              "else the data directory's checkpoint.key].")
def verify(data_dir, config_file, ca_dir, store, as_json, snapshots_too, tls_dir):
    """Check the changelog, its transparency log and every projection; report each problem.

    Walks the hash chain (entries changed, removed or reordered), checks every
    blanked entry against the redaction it names (only the exact form that
    redaction left is accepted), every signature (with --ca-dir: made with a
    key the CA issued that agent, and no signature missing where the CA issued
    one), recomputes the Merkle tree of the transparency log, and folds the
    changelog afresh to compare with the memories, vector, keyword, history and
    conflict projections. Exits 1 when anything fails, after listing each
    problem (and with `Error: ` and the first one on stderr). Run it with the
    server stopped.

    \b
    Example:
      mnemosync verify --data-dir ~/.local/share/mnemosync/server --ca-dir ~/mnemosync-ca
    """
    from mnemosync.server import maintenance
    from mnemosync.server.app import open_store
    from mnemosync.server.ca import issued_keys
    from mnemosync.server.ledger import broken

    _progress_to_stderr()
    settings = _settings(config_file, data_dir=data_dir, store=store, **({"tls_dir": tls_dir} if tls_dir else {}))
    path = _existing(settings)
    with open_store(settings) as opened:
        head = opened.head_seq()
        report = opened.log.verify(issued_keys(ca_dir) if ca_dir else None,
                                   progress=lambda n: click.echo(f"checked {n:,} of {head:,} entries", err=True))
        differences = [] if report.stopped else maintenance.compare_projections(
            opened, path.with_name(f".verify-{os.getpid()}.db"))
    if as_json:
        echo_json({
            "ok": report.ok and not differences, "entries": report.entries, "head_seq": report.head_seq,
            "head_hash": report.head_hash, "first_bad_seq": report.first_bad_seq, "problem": report.problem,
            "problems": [{"seq": seq, "problem": problem} for seq, problem in report.problems],
            "problem_count": report.problem_count, "signed": report.signed, "redacted": report.redacted,
            "projections": differences,
        })
    else:
        for seq, problem in report.problems:
            click.echo(f"BROKEN at seq {seq}: {problem}")
        if report.problem_count > len(report.problems):
            click.echo(f"… and {report.problem_count - len(report.problems)} more")
        for difference in differences:
            click.echo(f"PROJECTION {difference}")
        if report.ok and not differences:
            click.echo(f"ok: {counted(report.entries, 'entry')} ({report.signed} signed, {report.redacted} redacted), "
                       f"head {report.head_seq} {report.head_hash[:16]}; transparency log and projections match")
    if not report.ok:
        raise ChainBroken(f"the changelog does not verify at {broken(report)}")
    if snapshots_too:
        _verify_snapshots(settings, path, ca_dir)
    if differences:
        raise ChainBroken(f"the projections differ from a fresh fold of the changelog: {differences[0]}"
                          + (f" (and {len(differences) - 1} more)" if len(differences) > 1 else "")
                          + "; run `mnemosync rebuild` to fold them again")


@click.command("migrate-store")
@data_dir_option
@config_option
@click.option("--to", "to_url", metavar="URL", help="Copy the data directory's SQLite store into this empty PostgreSQL "
              "database (postgresql://user:password@host/db).")
@click.option("--from", "from_url", metavar="URL", help="Copy this PostgreSQL database into a new SQLite store in "
              "--data-dir (which must not hold one yet).")
@json_option
def migrate_store(data_dir, config_file, to_url, from_url, as_json):
    """Move a server's changelog between SQLite and PostgreSQL, verifying the hash chain on both sides.

    Copies every entry as it is (hashes, signatures, blanked texts), the
    transparency log (its id and Merkle nodes, so checkpoints agents hold stay
    provable), the pinned model and every agent's offset. The source is verified
    before anything is written and the copy after; both must end at the same
    entry. Run it with the servers stopped; the target must be empty.

    \b
    Examples:
      mnemosync migrate-store --data-dir /srv/mnemosync --to postgresql://mnemosync@db.internal/mnemosync
      mnemosync migrate-store --from postgresql://mnemosync@db.internal/mnemosync --data-dir /srv/back
    """
    from mnemosync.server import store_migration

    if bool(to_url) == bool(from_url):
        raise InvalidArgument("give exactly one of --to URL (SQLite into PostgreSQL) or --from URL (PostgreSQL into "
                              "SQLite)")
    _progress_to_stderr()
    settings = _settings(config_file, data_dir=data_dir)
    progress = lambda n: click.echo(f"copied {n:,} entries", err=True)  # noqa: E731
    if to_url:
        done = store_migration.sqlite_to_postgres(_existing(settings), to_url, progress)
    else:
        done = store_migration.postgres_to_sqlite(from_url, settings.db_path, progress)
    if as_json:
        echo_json({"entries": done.entries, "head_seq": done.head_seq, "head_hash": done.head_hash,
                   "offsets": done.offsets})
    else:
        click.echo(f"ok: copied {counted(done.entries, 'entry')} and {counted(done.offsets, 'agent offset')}; both "
                   f"sides verify and end at seq {done.head_seq} {done.head_hash[:16]}")


def _verify_snapshots(settings, path: Path, ca_dir: Path | None) -> None:
    """`verify --snapshot` (see `mnemosync.server.snapshots.verify_kept`)."""
    from mnemosync.server import snapshots

    kept = snapshots.Snapshots(path, settings.data_dir / snapshots.DIRECTORY, None, lambda: 0)
    signers = {kept.get(size).key for size in kept.sizes()}
    key = _snapshot_key(settings, ca_dir, signers) if signers else ""
    problems = snapshots.verify_kept(settings.data_dir, key, path.with_name(f".verify-snapshot-{os.getpid()}.db"))
    for size, problem in problems:
        click.echo(f"SNAPSHOT at {size}: {problem}")
    if problems:
        raise ChainBroken(f"a snapshot does not match the changelog: at {problems[0][0]}: {problems[0][1]}")
    click.echo(f"ok: every snapshot ({len(kept.sizes())}) equals a fold of the changelog up to its position")


def _snapshot_key(settings, ca_dir: Path | None, signers: set[str]) -> str:
    """The public checkpoint key the server signs its snapshots with, never made here: the TLS folder's when one is
    given; else, of the CA's server folder and the data directory (in that order), the first that holds the key
    that signed them (the first that holds one when none did: the check then names the mismatch).

    Raises:
        FailedPrecondition: neither holds a key (under mTLS it lives only in the TLS folder): says what to pass.
    """
    from mnemosync.server.ca import CHECKPOINT_KEY
    from mnemosync.server.notary import load_key

    if settings.tls_dir is not None:
        return load_key(settings.data_dir, settings.tls_dir).public
    ca = (ca_dir or Path(os.environ.get("MNEMOSYNC_CA_DIR") or default_data_home() / "ca")).expanduser()
    found = []
    if (ca / "server" / CHECKPOINT_KEY).is_file():
        found.append((load_key(settings.data_dir, ca / "server").public, ca / "server"))
    if (settings.data_dir / CHECKPOINT_KEY).is_file():
        found.append((load_key(settings.data_dir, None).public, settings.data_dir))
    if not found:
        raise FailedPrecondition(
            f"the snapshots in {settings.data_dir / 'snapshots'} are signed by checkpoint key "
            f"{min(signers)[:16]}…, which is not in the data directory: under mTLS the server signs with "
            "checkpoint.key in its TLS directory (beside server.key); pass --tls-dir DIR (or MNEMOSYNC_TLS_DIR), the "
            "folder `mnemosync serve --tls-dir` uses, or --ca-dir CA for the CA that issued it")
    key, where = next((k for k in found if k[0] in signers), found[0])
    if where != settings.data_dir:
        click.echo(f"checking the snapshots with the checkpoint key in {where}", err=True)
    return key


@click.command()
@data_dir_option
@config_option
@click.option("--keep", type=int, default=3, show_default=True, help="How many snapshots to keep (the newest).")
def snapshot(data_dir, config_file, keep):
    """Make a snapshot of the projections now (admin; the server may be running).

    New caches start from the newest snapshot instead of replaying the whole
    changelog (GetSnapshot). The snapshot is signed with the checkpoint key and
    bound to the Merkle root of the entries it folds.

    \b
    Example:
      mnemosync snapshot --data-dir ~/.local/share/mnemosync/server
    """
    from mnemosync.server import snapshots

    settings = _settings(config_file, data_dir=data_dir)
    _existing(settings)
    made = snapshots.make_in(settings.data_dir, settings.tls_dir, keep=keep, store=settings.store)
    click.echo(f"made the {made.describe()}: {counted(sum(s.memories for s in made.sections), 'memory')} in "
               f"{counted(len(made.sections), 'scope')}, {sum(s.length for s in made.sections):,} bytes")
