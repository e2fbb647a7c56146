"""What every mnemosync command shares at its edge: `--json`, how a failure is printed, and the exit codes.

The `mnemosync` command (`mnemosync.cli`), `mnemosync-mcp` and every command they
load raise the one hierarchy of typed errors (`mnemosync.kernel.errors`, the
agent's own in `mnemosync.agent.errors` deriving from it); nothing below
here prints an error or picks an exit code. `ErrorEdge` turns each error into
its exit code once, by its `code` (the gRPC status name), from `EXIT_CODES`:

    0  done
    1  any other error (server unreachable, TLS or identity problems, bad settings, a broken hash chain, ...)
    2  usage error (a missing or malformed option)
    3  not found (no such memory, conflict or database)
    4  the current state does not allow it: changed since it was read, already resolved or existing,
       or something it needs is missing or newer (the model, the CA, the database schema)
    5  refused by a governance or authority rule (the message names the rule)

The message goes to stderr as `Error: ...`; with `--json` a command that has
not printed its own JSON also prints `{"error": {"code", "message"}}` to stdout,
usage errors included (code `USAGE`, exit 2).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click

from mnemosync.kernel.errors import CodedError

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CHANGED = 4
EXIT_DENIED = 5
EXIT_CODES = {
    "NOT_FOUND": EXIT_NOT_FOUND,
    "ABORTED": EXIT_CHANGED,
    "FAILED_PRECONDITION": EXIT_CHANGED,
    "ALREADY_EXISTS": EXIT_CHANGED,
    "PERMISSION_DENIED": EXIT_DENIED,
}
"""Error code to exit code; every other code exits with EXIT_ERROR."""

EXIT_CODES_HELP = ("Exit codes: 0 done, 1 error, 2 usage, 3 not found, 4 changed, already done or missing a "
                   "precondition, 5 refused by a governance rule.")

_JSON_WANTED = "mnemosync.json"
_JSON_WRITTEN = "mnemosync.json-written"
_F = TypeVar("_F", bound=Callable[..., Any])


class CommandFailed(click.ClickException):
    """A typed error as the command line shows it: `Error: message` and its exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click types it ClassVar; an instance may override it


def exit_code(exc: CodedError) -> int:
    """The exit code of an error (see the module docstring)."""
    return EXIT_CODES.get(exc.code, EXIT_ERROR)


def failed(exc: CodedError) -> CommandFailed:
    """The command-line failure for a typed error, after printing its JSON form when `--json` asked for it."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(_JSON_WANTED) and not ctx.meta.get(_JSON_WRITTEN):
        click.echo(json.dumps({"error": {"code": exc.code, "message": str(exc)}}))
    return CommandFailed(str(exc), exit_code(exc))


class ErrorEdge:
    """Mixin for a click command or group: a typed error raised while it runs becomes `failed(exc)`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except CodedError as exc:
            raise failed(exc) from exc
        except click.UsageError as exc:
            if "--json" in ctx.args or ctx.meta.get(_JSON_WANTED):
                if not ctx.meta.get(_JSON_WRITTEN):
                    click.echo(json.dumps({"error": {"code": "USAGE", "message": exc.format_message()}}))
                    ctx.meta[_JSON_WRITTEN] = True
            raise


class ErrorEdgeCommand(ErrorEdge, click.Command):
    """A stand-alone command (such as `mnemosync-mcp`) with the shared error edge."""


def json_option(func: _F) -> _F:
    """`--json` (passed to the command as `as_json`): print JSON for scripts, errors included."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.meta[_JSON_WANTED] = True
        return value

    return click.option("--json", "as_json", is_flag=True, callback=remember,
                        help="Print JSON for scripts (errors too).")(func)


def echo_json(doc: Any) -> None:
    """Prints one JSON document to stdout (after which a failure prints no second one)."""
    click.echo(json.dumps(doc))
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[_JSON_WRITTEN] = True


def stop_signals() -> Callable[[], int]:
    """Catches SIGTERM and SIGINT (Ctrl-C) from now on; returns a function that blocks until one came and returns
    it. For commands that serve until stopped: install before saying "serving", so a stop is never missed.

    The handler only appends to a list: taking a lock there (Event.set) can deadlock when the signal lands while
    the main thread itself holds that lock inside Event.wait.
    """
    received: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: received.append(signum))

    def wait() -> int:
        while not received:
            time.sleep(0.2)
        return received[0]

    return wait
