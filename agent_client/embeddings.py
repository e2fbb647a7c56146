"""Local text embeddings with llama.cpp.

Agents embed their own memories and queries so that the server never needs a
model of its own; it only checks that every client uses the same model file
(see :class:`~mnemosync.kernel.model_identity.ModelInfo`). :class:`Embedder` is the
one place that talks to llama.cpp.

Contract of the vectors produced here:

* L2-normalised ``list[float]`` of length :attr:`Embedder.dimensions`;
* for the default model they match sentence-transformers' all-MiniLM-L6-v2
  (cosine >= 0.999, checked by ``tests/system/test_embeddings.py``), including its
  truncation of long inputs to 256 word pieces;
* a text embedded on its own always gives bit-identical results, whatever
  thread asks; inside a batch it may differ in the last bits (about 1e-4 per
  component, cosine > 0.99999) because the batch shape changes the order of
  floating-point sums. Cached vectors are returned as computed.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import string
import sys
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import llama_cpp
import numpy as np

from mnemosync.agent.model import MAX_SEQ_TOKENS
from mnemosync.kernel import heap
from mnemosync.kernel.errors import ModelUnusable
from mnemosync.kernel.model_identity import ModelInfo, file_sha256

_N_CTX = 512
"""Context and per-forward-pass token budget.

An encoder must see a whole sequence in one micro-batch, so the budget has to
hold at least one maximal input (256 tokens). Short texts are packed together
up to this budget: with flash attention that is ~1.7x faster than one pass
per text on CPU, while larger passes stop paying off because attention cost
grows with the square of the pass length.
"""


_SEQUENCES = 32
"""Most texts packed into one pass. llama-cpp-python asks llama.cpp for 256, and llama.cpp keeps an output row
(a vocabulary's logits and a vector) for each: 30 MiB resident for outputs this model never gives (it pools one
vector per text). 32 keeps that under 4 MiB, and a pass of `_N_CTX` tokens rarely holds more texts than that."""
_CAP_LOCK = threading.Lock()


def default_batch_threads() -> int:
    """Threads for packed passes when none are set: half the CPUs this process may use (at least one).

    Half, because the second logical CPU of a core adds little to llama.cpp's matrix work, and because ggml's
    threads spin at every barrier of a pass: any thread beyond a free core waits for a time slice at each one, so
    several embedding processes each taking every core (the per-session MCP shims on one machine) slowed single
    embeddings tenfold (`ops/bench/bench_peer.py` measures it).
    """
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, usable // 2)


@dataclass(frozen=True)
class EmbedderStats:
    """Counters describing what an :class:`Embedder` has done so far.

    Attributes:
        hits: Texts answered from the cache.
        misses: Texts that had to be computed by the model.
        model_calls: Forward passes run through llama.cpp (one per batch).
        cached: Entries currently held in the cache.
    """

    hits: int
    misses: int
    model_calls: int
    cached: int


@dataclass
class _Waiting:
    """Texts one thread waits to have embedded (`Embedder._compute`)."""

    texts: list[str]
    vectors: list[bytes] = field(default_factory=list)
    """Each text's vector as float64 bytes: the form the cache keeps (3 KiB, where a tuple of floats takes 12)."""
    error: BaseException | None = None
    done: bool = False


class Embedder:
    """Turns text into normalised embedding vectors with a local GGUF model.

    The embedder owns one llama.cpp context, which is not thread-safe; every
    call into llama.cpp happens under a single lock, so an instance can be
    shared freely between threads. Threads that wait for the model at the
    same moment are served together: whichever gets the model embeds every
    text waiting, packed into as few passes as fit (a local agent serving
    several sessions embeds their texts in one pass, not one after another).
    Results are kept in an LRU cache keyed by the sha256 of the text, so
    content that is stored and searched repeatedly is embedded once.

    :meth:`embed_many` packs several texts into each llama.cpp forward pass.
    Inputs longer than the model's 256 word-piece window are truncated the way
    sentence-transformers does it: the first 254 pieces are kept between
    ``[CLS]`` and ``[SEP]``. Embedding never fails because a text is long.

    Use it as a context manager, or call :meth:`close`, to free the model.

    Example:
        >>> with Embedder(Path("all-MiniLM-L6-v2.gguf")) as embedder:
        ...     vector = embedder.embed("the deploy failed with ECONNRESET")
        >>> len(vector)
        384
    """

    def __init__(
        self,
        model_path: Path,
        *,
        n_threads: int = 1,
        n_threads_batch: int | None = None,
        cache_size: int = 4096,
    ) -> None:
        """Loads the model.

        Args:
            model_path: A GGUF embedding model, e.g. the one made by
                ``mnemosync model build``.
            n_threads: CPU threads for a pass of one text (a query, a single
                add). One is fastest for these short passes, alone and even
                more so beside other embedding processes.
            n_threads_batch: CPU threads for a pass packing several texts
                (add_many, import); ``None``: :func:`default_batch_threads`.
            cache_size: Maximum number of cached vectors; 0 disables the cache.

        Raises:
            ModelUnusable: If the file is missing or is not a usable embedding model.
            ValueError: If ``cache_size`` is negative or a thread count below 1.
        """
        if cache_size < 0:
            raise ValueError(f"cache_size must be >= 0, got {cache_size}")
        n_threads_batch = default_batch_threads() if n_threads_batch is None else n_threads_batch
        if n_threads < 1 or n_threads_batch < 1:
            raise ValueError(f"thread counts must be at least 1, got n_threads={n_threads}, "
                             f"n_threads_batch={n_threads_batch}")
        self._threads = {False: n_threads, True: n_threads_batch}
        self._threads_set = n_threads
        model_path = Path(model_path)
        if not model_path.is_file():
            raise ModelUnusable(
                f"embedding model file not found at {model_path}; run `mnemosync model build` "
                "or set MNEMOSYNC_EMBED_MODEL to an existing GGUF file"
            )
        self._cache_size = cache_size
        self._cache: OrderedDict[bytes, bytes] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._llama_lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._queue_lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self._model_calls = 0
        self._batch: llama_cpp.llama_batch | None = None
        self._llama: llama_cpp.Llama | None = None

        try:
            with _fewer_sequences(_SEQUENCES):
                self._llama = llama_cpp.Llama(
                    model_path=str(model_path),
                    embedding=True,
                    n_ctx=_N_CTX,
                    n_batch=_N_CTX,
                    n_ubatch=_N_CTX,
                    n_threads=n_threads,
                    # llama.cpp runs every pass of more than one token with
                    # n_threads_batch; _encode switches it per pass.
                    n_threads_batch=n_threads,
                    # ~1.8x faster on 256-token inputs and on packed batches (the
                    # non-fused attention path is quadratic-heavy); parity unchanged.
                    flash_attn=True,
                    verbose=False,
                )
        except (ValueError, RuntimeError) as exc:
            raise ModelUnusable(
                f"llama.cpp could not load {model_path} ({exc}); rebuild it with "
                "`mnemosync model build --force` or set MNEMOSYNC_EMBED_MODEL to a valid model"
            ) from exc

        ctx = self._llama.ctx
        if llama_cpp.llama_pooling_type(ctx) == llama_cpp.LLAMA_POOLING_TYPE_NONE:
            self.close()
            raise ModelUnusable(
                f"{model_path} declares no pooling, so it cannot produce sentence "
                "embeddings; use `mnemosync model build` to make the default model"
            )
        # Same values model_identity.fingerprint() reads, taken from llama.cpp's own
        # parse of the file (gguf.GGUFReader would add ~1 s to every start).
        self._fingerprint = ModelInfo(
            name=self._llama.metadata.get("general.name") or model_path.stem,
            dimensions=self._llama.n_embd(),
            sha256=file_sha256(model_path),
        )
        self._n_batch = llama_cpp.llama_n_ubatch(ctx)
        self._n_seq_max = llama_cpp.llama_n_seq_max(ctx)
        self._max_tokens = min(MAX_SEQ_TOKENS, self._n_batch)
        vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
        self._sep = llama_cpp.llama_vocab_sep(vocab)
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        self._n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        _release_mapping(model_path)

    # --- public API --------------------------------------------------------------

    @property
    def fingerprint(self) -> ModelInfo:
        """Identity (name, dimensions, sha256) of the loaded model file."""
        return self._fingerprint

    @property
    def cache_size(self) -> int:
        """Most vectors the cache keeps (0: no cache)."""
        return self._cache_size

    @property
    def dimensions(self) -> int:
        """Length of every vector this embedder returns."""
        return self._fingerprint.dimensions

    def embed(self, text: str) -> list[float]:
        """Embeds one text.

        Args:
            text: Any string; empty and very long strings are fine.

        Returns:
            An L2-normalised vector of length :attr:`dimensions`.

        Raises:
            RuntimeError: If the embedder is closed or llama.cpp fails.
        """
        return self.embed_many([text])[0]

    def embed_many(self, texts: Sequence[str]) -> list[list[float]]:
        """Embeds several texts, batching the uncached ones into few model calls.

        Args:
            texts: Strings to embed; duplicates are computed once.

        Returns:
            One L2-normalised vector per input, in input order.

        Raises:
            RuntimeError: If the embedder is closed or llama.cpp fails.
        """
        if isinstance(texts, str):
            raise TypeError("embed_many() takes a sequence of strings; use embed() for one")
        keys = [_cache_key(text) for text in texts]
        found: dict[bytes, bytes] = {}
        todo: dict[bytes, str] = {}
        with self._cache_lock:
            for key, text in zip(keys, texts, strict=True):
                if key in found or key in todo:
                    continue
                vector = self._cache.get(key)
                if vector is None:
                    todo[key] = text
                else:
                    self._cache.move_to_end(key)
                    found[key] = vector
            self._hits += len(found)
            self._misses += len(todo)

        if todo:
            computed = self._compute(list(todo.values()))
            new = dict(zip(todo.keys(), computed, strict=True))
            found.update(new)
            self._remember(new)
        return [np.frombuffer(found[key]).tolist() for key in keys]

    def stats(self) -> EmbedderStats:
        """Returns cache and model-call counters (useful in tests and benchmarks)."""
        with self._cache_lock:
            return EmbedderStats(
                hits=self._hits,
                misses=self._misses,
                model_calls=self._model_calls,
                cached=len(self._cache),
            )

    def clear_cache(self) -> None:
        """Forgets every cached vector (counters are kept)."""
        with self._cache_lock:
            self._cache.clear()

    def close(self) -> None:
        """Frees the llama.cpp model and context. Safe to call more than once."""
        with self._llama_lock:
            if self._batch is not None:
                llama_cpp.llama_batch_free(self._batch)
                self._batch = None
            if self._llama is not None:
                self._llama.close()
                self._llama = None

    def __enter__(self) -> Embedder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Only reached if close() was never called; avoid leaking the batch.
        if getattr(self, "_llama_lock", None) is not None:
            self.close()

    # --- internals ---------------------------------------------------------------

    def _remember(self, new: dict[bytes, bytes]) -> None:
        if not self._cache_size:
            return
        with self._cache_lock:
            for key, vector in new.items():
                self._cache[key] = vector
                self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _compute(self, texts: list[str]) -> list[bytes]:
        """Vectors of `texts`, computed together with whatever other threads are waiting for (see the class)."""
        mine = _Waiting(texts)
        with self._queue_lock:
            self._queue.append(mine)
        with self._llama_lock:
            if not mine.done:
                with self._queue_lock:
                    waiting, self._queue = self._queue, []
                try:
                    vectors = self._compute_locked([t for w in waiting for t in w.texts])
                except BaseException as exc:
                    for w in waiting:
                        w.error, w.done = exc, True
                    raise
                at = 0
                for w in waiting:
                    w.vectors, w.done = vectors[at:at + len(w.texts)], True
                    at += len(w.texts)
        if mine.error is not None:
            raise mine.error
        return mine.vectors

    def _compute_locked(self, texts: list[str]) -> list[bytes]:
        """The vectors of `texts` (the caller holds the model's lock)."""
        llama = self._llama
        if llama is None:
            raise RuntimeError("this Embedder has been closed")
        sequences = [self._tokenize(llama, text) for text in texts]
        vectors: list[bytes] = []
        start = 0
        while start < len(sequences):
            end, used = start, 0
            while (
                end < len(sequences)
                and end - start < self._n_seq_max
                and used + len(sequences[end]) <= self._n_batch
            ):
                used += len(sequences[end])
                end += 1
            vectors.extend(self._encode(llama, sequences[start:end]))
            start = end
        return vectors

    def _tokenize(self, llama: llama_cpp.Llama, text: str) -> list[int]:
        # llama.cpp's WordPiece pre-processing mangles precomposed Hangul
        # syllables (it keeps only the leading consonant); decomposing first is
        # what the Hugging Face BertNormalizer does anyway, and is a no-op for
        # text llama.cpp already handles.
        normalized = _unk_overlong_words(unicodedata.normalize("NFD", text))
        data = normalized.encode("utf-8", errors="replace")
        # special=True: "[SEP]" written in the text is the separator token, as
        # in the Hugging Face tokenizer. The result is [CLS] ... [SEP].
        tokens = llama.tokenize(data, add_bos=True, special=True)
        if len(tokens) > self._max_tokens:
            tokens = tokens[: self._max_tokens - 1] + [self._sep]
        return tokens

    def _encode(
        self, llama: llama_cpp.Llama, sequences: list[list[int]]
    ) -> list[bytes]:
        batch = self._batch
        assert batch is not None
        n = 0
        for seq_id, tokens in enumerate(sequences):
            for pos, token in enumerate(tokens):
                batch.token[n] = token
                batch.pos[n] = pos  # type: ignore[call-overload]  # llama_cpp declares `pos` an array of arrays
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq_id
                batch.logits[n] = True
                n += 1
        batch.n_tokens = n

        ctx = llama.ctx
        threads = self._threads[len(sequences) > 1]
        if threads != self._threads_set:
            llama_cpp.llama_set_n_threads(ctx, threads, threads)
            self._threads_set = threads
        memory = llama_cpp.llama_get_memory(ctx)
        if memory:
            llama_cpp.llama_memory_clear(memory, True)
        status = llama_cpp.llama_encode(ctx, batch)
        with self._cache_lock:
            self._model_calls += 1
        if status != 0:
            raise RuntimeError(f"llama.cpp failed to embed a batch (llama_encode returned {status})")

        dims = self._fingerprint.dimensions
        out: list[bytes] = []
        for seq_id in range(len(sequences)):
            pointer = llama_cpp.llama_get_embeddings_seq(ctx, seq_id)
            if not pointer:
                raise RuntimeError(f"llama.cpp returned no embedding for sequence {seq_id}")
            raw = np.ctypeslib.as_array(
                ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(dims,)
            )
            vector = raw.astype(np.float64)
            norm = float(np.linalg.norm(vector))
            if norm > 0.0:
                vector /= norm
            out.append(vector.tobytes())
        self._release_logits(ctx)
        return out

    def _release_logits(self, ctx: Any) -> None:
        """Gives back the pages of the pass's logits rows (see `_release_mapping` for the model's own pages).

        llama.cpp sizes its output buffer for a row of vocabulary logits beside each token's vector, and an encode
        outputs every token: 120 KiB a token, 63 MiB for a pass of `_N_CTX` tokens, all of it cleared, hence
        resident, and then kept. A pooling encoder never writes those rows, so their pages are dropped after each
        pass (they read as zeros if anything ever looked). Only when the buffer is laid out as expected: the
        logits rows, then the vectors.
        """
        logits = ctypes.cast(llama_cpp.llama_get_logits(ctx), ctypes.c_void_p).value
        vectors = ctypes.cast(llama_cpp.llama_get_embeddings(ctx), ctypes.c_void_p).value
        row = self._n_vocab * ctypes.sizeof(ctypes.c_float)
        if logits and vectors and vectors > logits and (vectors - logits) % row == 0:
            heap.release(logits, vectors)


def _release_mapping(model_path: Path) -> None:
    """Drops the model file's pages from the resident set once llama.cpp has loaded it.

    llama.cpp maps the file read-only and populates the whole mapping at load, though a pass reads only the layers
    and the rows of the token table its tokens name (about half of the default model's 44 MiB): the pages a pass
    reads come back from the file (the page cache) when it reads them. The weights are the file's bytes either
    way, so the vectors do not change.
    """
    try:
        st = os.stat(model_path)
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:  # no /proc: nothing to release
        return
    where = os.path.realpath(model_path)
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and "w" not in fields[1] and int(fields[4]) == st.st_ino and fields[5].strip() == where:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            heap.release(start, end)


def _cache_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).digest()


# Hugging Face's WordPiece turns any word longer than this many characters
# into [UNK]; llama.cpp splits it into pieces instead. Hashes, base64 and
# minified code hit this, so we apply the same rule before llama.cpp sees
# the text (a literal "[UNK]" becomes the unknown token: special=True).
_MAX_WORD_CHARS = 100
_LONG_RUN = re.compile(rf"\S{{{_MAX_WORD_CHARS + 1},}}")
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),  # sic: the Hugging Face tokenizer uses 0x2B920
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _splits_words(char: str) -> bool:
    """True for characters the BERT pre-tokenizer makes a word of their own."""
    if char in string.punctuation or unicodedata.category(char).startswith("P"):
        return True
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def _unk_overlong_words(text: str) -> str:
    if not _LONG_RUN.search(text):
        return text

    def replace_run(match: re.Match[str]) -> str:
        out: list[str] = []
        word: list[str] = []
        visible = 0  # characters that survive BERT normalisation (no accents/controls)

        def flush() -> None:
            nonlocal visible
            out.append("[UNK]" if visible > _MAX_WORD_CHARS else "".join(word))
            word.clear()
            visible = 0

        for char in match.group(0):
            if _splits_words(char):
                flush()
                out.append(char)
                continue
            word.append(char)
            if unicodedata.category(char) not in ("Mn", "Cc", "Cf"):
                visible += 1
        flush()
        return "".join(out)

    return _LONG_RUN.sub(replace_run, text)


@contextlib.contextmanager
def _fewer_sequences(most: int) -> Iterator[None]:
    """llama-cpp-python sizes an embedding context's sequences by `llama_max_parallel_sequences()` and takes no
    argument for it: it answers `most` while a model is opened here (see `_SEQUENCES`)."""
    bindings: Any = sys.modules["llama_cpp.llama_cpp"]  # untyped ctypes bindings
    with _CAP_LOCK:
        original = bindings.llama_max_parallel_sequences
        bindings.llama_max_parallel_sequences = lambda: min(most, original())
        try:
            yield
        finally:
            bindings.llama_max_parallel_sequences = original
