"""Embeddings of the labelled sets, kept on disk so a rerun of the quality benchmark does not recompute them.

One SQLite file per model (named by the model file's SHA-256) maps the SHA-256
of a text to its float32 vector, which is exactly what travels to the server.
A missing or deleted file only costs the time to embed again; nothing else
depends on it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path

import numpy as np
from sqlite_utils.utils import sqlite3

from mnemosync.kernel.settings_loading import default_data_home

DEFAULT_DIR = default_data_home() / "labelled-set-embeddings"
"""Beside the built model, shared with the retrieval-quality tests: a machine embeds the labelled sets once."""
BATCH = 64

_SCHEMA = "CREATE TABLE IF NOT EXISTS vectors (text_sha256 TEXT PRIMARY KEY, vector BLOB NOT NULL)"


class CachedEmbeddings:
    """Embeds texts with `embedder`, answering from and adding to an on-disk cache.

    Args:
        embedder: An `mnemosync.agent.embeddings.Embedder` (anything with
            `fingerprint` and `embed_many`).
        directory: Where the cache files live (created if missing).
        log: Receives progress lines while texts are being embedded.
    """

    def __init__(self, embedder, directory: Path = DEFAULT_DIR, log: Callable[[str], None] = lambda _: None):
        self.embedder = embedder
        self.log = log
        directory.mkdir(parents=True, exist_ok=True)
        fp = embedder.fingerprint
        self.path = directory / f"embeddings-{fp.sha256[:16]}-{fp.dimensions}.sqlite"
        self.hits = 0
        self.computed = 0

    def embed_many(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; uncached texts are embedded in batches and stored."""
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        with closing(sqlite3.connect(self.path)) as conn:
            conn.execute(_SCHEMA)
            found = self._lookup(conn, set(keys))
            missing = list(dict.fromkeys((k, t) for k, t in zip(keys, texts, strict=True) if k not in found))
            self.hits += len(texts) - len(missing)
            for start in range(0, len(missing), BATCH):
                batch = missing[start:start + BATCH]
                vectors = self.embedder.embed_many([t for _, t in batch])
                rows = [(key, np.asarray(vector, dtype=np.float32).tobytes())
                        for (key, _), vector in zip(batch, vectors, strict=True)]
                conn.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
                conn.commit()
                found.update({k: np.frombuffer(b, dtype=np.float32) for k, b in rows})
                self.computed += len(batch)
                self.log(f"  embedded {min(start + BATCH, len(missing))}/{len(missing)} texts")
        return [found[k].tolist() for k in keys]

    @staticmethod
    def _lookup(conn, keys: set[str]) -> dict[str, np.ndarray]:
        found = {}
        for key, blob in conn.execute("SELECT text_sha256, vector FROM vectors"):
            if key in keys:
                found[key] = np.frombuffer(blob, dtype=np.float32)
        return found
