"""The `mnemosync` command: one click group; server and client commands register here."""

from __future__ import annotations

import click

from server import __version__
from server.cli import rebuild, serve, verify


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mnemosync")
def cli():
    """Shared long-term memory for AI agents.

    \b
    Start a development server:   mnemosync serve --insecure
    Store and find memories:      mnemosync add "…" ; mnemosync search "…"
    """


cli.add_command(serve)
cli.add_command(rebuild)
cli.add_command(verify)


def main() -> None:
    """Console-script entry point."""
    cli()
