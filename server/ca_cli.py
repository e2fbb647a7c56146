"""`mnemosync ca …`: the certificate authority for mTLS (init, issue-server, issue-agent, revoke, list).

Parsing and printing only; the work is done by `mnemosync.server.ca` (the operator's
tool, so it lives with the server). Nothing secret is ever printed: commands
report file paths, serials and validity, and private keys are written with
mode 0600.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path

import click

from mnemosync.kernel.command_line import echo_json, json_option
from mnemosync.kernel.settings_loading import default_data_home
from mnemosync.server import ca as ca_core


def _ca_dir_option(func):
    @click.option("--ca-dir", type=click.Path(file_okay=False, path_type=Path), envvar="MNEMOSYNC_CA_DIR",
                  help="CA directory [env MNEMOSYNC_CA_DIR; default ~/.local/share/mnemosync/ca].")
    @functools.wraps(func)
    def wrapper(ca_dir, **kwargs):
        return func(ca_dir=(ca_dir or default_data_home() / "ca").expanduser(), **kwargs)

    return wrapper


def _describe(issued: ca_core.Issued) -> str:
    grant = ""
    if issued.kind == "agent":
        scopes = "every scope" if issued.scopes is None else ", ".join(issued.scopes)
        grant = (f"  authority {issued.authority}  scopes {scopes}{'  ADMIN' if issued.admin else ''}"
                 f"{'  SIGNS' if issued.signing_key else ''}")
    elif issued.kind == "server":
        grant = f"  hosts {', '.join(issued.hosts)}"
    return f"{issued.kind} {issued.name}  serial {issued.serial}  valid until {issued.not_after}{grant}"


@click.group()
def ca():
    """A small certificate authority for mTLS between agents and the server.

    \b
    Examples (set up once, then hand each agent its directory):
      mnemosync ca init
      mnemosync ca issue-server --host memory.internal --host 10.0.0.5
      mnemosync ca issue-agent alice --authority 3 --scope user --scope project:web
      mnemosync serve --tls-dir ~/.local/share/mnemosync/ca/server --listen 0.0.0.0:50051
      mnemosync status --server memory.internal:50051 --cert-dir ~/.local/share/mnemosync/ca/agents/alice
    """


@ca.command("init")
@_ca_dir_option
@click.option("--name", default="mnemosync CA", show_default=True, help="The CA's common name.")
@click.option("--days", default=3650, show_default=True, help="Validity of the CA certificate.")
def init(ca_dir, name, days):
    """Create the CA key (0600), certificate and an empty revocation list.

    \b
    Example:
      mnemosync ca init --ca-dir /etc/mnemosync/ca
    """
    issued = ca_core.init_ca(ca_dir, name=name, days=days)
    click.echo(f"CA created in {ca_dir}: {ca_dir / ca_core.CA_CERT} (serial {issued.serial}, valid until "
               f"{issued.not_after}); the key {ca_dir / ca_core.CA_KEY} is readable by you only: keep it secret "
               "and off the server in production")


@ca.command("issue-server")
@_ca_dir_option
@click.option("--host", "hosts", multiple=True, required=True,
              help="DNS name or IP address clients connect to (repeat for more).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="The server's TLS folder to write [default: <ca-dir>/server]; never the CA directory.")
@click.option("--days", default=365, show_default=True, help="Validity.")
@click.option("--force", is_flag=True, help="Replace an existing server certificate and key.")
@json_option
def issue_server(ca_dir, hosts, out_dir, days, force, as_json):
    """Issue the server's certificate into a TLS folder of its own (ca.crt, server.crt, server.key, crl.pem).

    Serve from that folder (copy it to the server host); it never holds the CA key.

    \b
    Example:
      mnemosync ca issue-server --host memory.internal --host 10.0.0.5 --host 127.0.0.1
      mnemosync serve --tls-dir ~/.local/share/mnemosync/ca/server --listen 0.0.0.0:50051
    """
    issued = ca_core.issue_server(ca_dir, list(hosts), out_dir=out_dir, days=days, overwrite=force)
    if as_json:
        echo_json(issued.to_dict())
        return
    folder = Path(issued.path).parent
    click.echo(_describe(issued))
    click.echo(f"wrote {folder}: {ca_core.CA_CERT}, {ca_core.SERVER_CERT}, {ca_core.SERVER_KEY} (0600) and "
               f"{ca_core.CRL}; serve with: mnemosync serve --tls-dir {folder} (copy the folder to the server "
               f"host; {ca_core.CA_KEY} stays here)")


@ca.command("issue-agent")
@_ca_dir_option
@click.argument("name")
@click.option("--authority", type=click.IntRange(1, 6), required=True,
              help="1 (human) to 6 (automated extractor); lower is stronger.")
@click.option("--scope", "scopes", multiple=True, required=True,
              help="A scope the agent may use, e.g. user or project:NAME; project:* for every project, * for every "
              "scope (repeat for more).")
@click.option("--admin", is_flag=True, help="Allow admin operations (resolving for others, redaction).")
@click.option("--signing", is_flag=True,
              help="Also make an Ed25519 signing key: the server then accepts only operations it signed.")
@click.option("--days", default=365, show_default=True, help="Validity.")
@json_option
def issue_agent(ca_dir, name, authority, scopes, admin, signing, days, as_json):
    """Issue an agent certificate; its id, authority, scopes and admin flag live in it.

    Writes <ca-dir>/agents/NAME/ (ca.crt, agent.crt, agent.key 0600, and with
    --signing signing.key 0600): give that directory to the agent as
    --cert-dir / MNEMOSYNC_CERT_DIR.

    \b
    Examples:
      mnemosync ca issue-agent alice --authority 3 --scope user --scope project:web
      mnemosync ca issue-agent ops-human --authority 1 --scope '*' --admin --signing
    """
    issued = ca_core.issue_agent(ca_dir, name, authority=authority, scopes=list(scopes), admin=admin,
                                 signing=signing, days=days)
    if as_json:
        echo_json(issued.to_dict())
        return
    click.echo(_describe(issued))
    keys = "agent.key and signing.key 0600" if issued.signing_key else "agent.key 0600"
    click.echo(f"wrote {Path(issued.path).parent} (ca.crt, agent.crt, {keys}); the agent connects with: "
               f"--cert-dir {Path(issued.path).parent}")


@ca.command("revoke")
@_ca_dir_option
@click.argument("name")
def revoke(ca_dir, name):
    """Revoke every certificate issued to NAME and rewrite crl.pem.

    A server serving from <ca-dir>/server (issue-server's folder, whose
    crl.pem this refreshes) refuses the certificate from its next call on;
    if the server's TLS folder is a copy elsewhere, copy crl.pem there.

    \b
    Example:
      mnemosync ca revoke alice
    """
    for issued in ca_core.revoke(ca_dir, name):
        click.echo(f"revoked {_describe(issued)}")
    click.echo(f"wrote {ca_dir / ca_core.CRL}")


@ca.command("list")
@_ca_dir_option
@json_option
def list_(ca_dir, as_json):
    """List every certificate issued, with its grant and whether it is revoked.

    \b
    Example:
      mnemosync ca list --json
    """
    issued = ca_core.list_issued(ca_dir)
    if as_json:
        echo_json([i.to_dict() for i in issued])
        return
    if not issued:
        click.echo("no certificates issued yet")
    now = datetime.now(UTC)
    for i in issued:
        expired = datetime.fromisoformat(i.not_after) < now
        state = f"REVOKED {i.revoked_at}" if i.revoked_at else "EXPIRED" if expired else "valid"
        click.echo(f"{state:<34} {_describe(i)}")
