"""An embedding model's identity, and how it is read from a GGUF file.

A server accepts vectors only from the model its data directory pinned: same
vector length, same file (SHA-256). Agents compute their model's identity when
they load it (`mnemosync.agent.embeddings`), the server when a new data directory
pins the configured model (`mnemosync serve --embed-model`); both compare
`ModelInfo`s, which the wire carries as `EmbeddingModel`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mnemosync.kernel.errors import ModelUnusable

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
"""Name recorded in the default GGUF file and shown in fingerprints."""

MODEL_FILE_NAME = f"{DEFAULT_MODEL_NAME}.gguf"

_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelInfo:
    """An embedding model's identity: (dimensions, sha256) decide; the name is for people.

    Attributes:
        name: Model name from the file's ``general.name`` (or the file stem).
        dimensions: Length of the vectors the model produces.
        sha256: Hex SHA-256 of the whole GGUF file.
    """

    name: str
    dimensions: int
    sha256: str

    def describe(self) -> str:
        """For messages, e.g. `all-MiniLM-L6-v2 (384 dims, sha256 1a2b3c4d5e6f)`."""
        return f"{self.name} ({self.dimensions} dims, sha256 {self.sha256[:12]})"

    def __str__(self) -> str:
        return self.describe()

    def same_model(self, other: ModelInfo) -> bool:
        """True when both name the same file and vector length."""
        return self.dimensions == other.dimensions and self.sha256 == other.sha256


def default_model_path(data_home: Path) -> Path:
    """Returns where the default model lives under a mnemosync data home.

    Args:
        data_home: The mnemosync data directory.

    Returns:
        ``data_home / "models" / "all-MiniLM-L6-v2.gguf"``.
    """
    return Path(data_home) / "models" / MODEL_FILE_NAME


def fingerprint(path: Path, name: str | None = None) -> ModelInfo:
    """Computes the fingerprint of a GGUF embedding model file.

    Args:
        path: The GGUF file.
        name: Name to report; defaults to ``general.name`` in the file, or the
            file stem when the file has none.

    Returns:
        The model's fingerprint.

    Raises:
        ModelUnusable: If the file is missing or is not a readable GGUF model.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelUnusable(
            f"embedding model file not found at {path}; run `mnemosync model build` "
            "or set MNEMOSYNC_EMBED_MODEL to an existing GGUF file"
        )
    meta = read_metadata(path)
    dims_key = f"{meta.get('general.architecture')}.embedding_length"
    dims = meta.get(dims_key)
    if not isinstance(dims, int):
        raise ModelUnusable(
            f"{path} has no {dims_key!r} metadata, so it is not a usable embedding model; "
            "run `mnemosync model build --force` or point MNEMOSYNC_EMBED_MODEL elsewhere"
        )
    return ModelInfo(
        name=name or str(meta.get("general.name") or path.stem),
        dimensions=dims,
        sha256=file_sha256(path),
    )


def file_sha256(path: Path) -> str:
    """Returns the hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_metadata(path: Path) -> dict[str, Any]:
    """Reads the scalar and string metadata of a GGUF file.

    Array values (the vocabulary, token types) are left out.

    Args:
        path: The GGUF file.

    Returns:
        A mapping of metadata key to Python value (str, int, float or bool).

    Raises:
        ModelUnusable: If the file is not a valid GGUF file.
    """
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (ValueError, OSError, IndexError) as exc:
        raise ModelUnusable(
            f"{path} is not a readable GGUF model ({exc}); run `mnemosync model build --force` "
            "or set MNEMOSYNC_EMBED_MODEL to a valid file"
        ) from exc
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if not field.types or field.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        value = field.contents()
        out[key] = value.item() if isinstance(value, np.generic) else value
    del reader  # drops the memory map
    return out
