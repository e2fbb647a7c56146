"""`mnemosync.agent.embeddings` and `mnemosync.agent.model` with the real GGUF model: parity with
sentence-transformers, reproducible builds, the cache, and the `model` and `embed` commands.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import llama_cpp
import numpy as np
import pytest
from click.testing import CliRunner

from mnemosync.agent.embeddings import Embedder
from mnemosync.agent.model import build_default_model, ensure_default_model, fingerprint_model
from mnemosync.kernel.errors import ModelUnusable
from mnemosync.kernel.model_identity import DEFAULT_MODEL_NAME, default_model_path, file_sha256

PARITY_FILE = Path(__file__).parents[1] / "data" / "parity_reference.json"


PARITY_BAR = 0.999


# Texts whose tokenization by llama.cpp's WordPiece implementation differs from
# the Hugging Face tokenizer in a way the Embedder cannot compensate for.
KNOWN_TOKENIZER_DIVERGENCES = {
    "हिन्दी में लिखा गया एक छोटा वाक्य": (
        "llama.cpp drops Devanagari spacing vowel signs (Unicode category Mc); "
        "Hugging Face keeps them"
    ),
}


@pytest.fixture(scope="module")
def embedder(model_path: Path):
    with Embedder(model_path) as shared:
        yield shared


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(PARITY_FILE.read_text(encoding="utf-8"))


def _cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_every_parity_text_matches_sentence_transformers(embedder: Embedder, reference: dict):
    pairs = [
        (text, vector)
        for text, vector in zip(reference["texts"], reference["vectors"], strict=True)
        if text not in KNOWN_TOKENIZER_DIVERGENCES
    ]
    ours = embedder.embed_many([text for text, _ in pairs])
    cosines = [_cosine(mine, theirs) for mine, (_, theirs) in zip(ours, pairs, strict=True)]
    worst = int(np.argmin(cosines))
    failing = [
        (round(c, 6), text[:50])
        for c, (text, _) in zip(cosines, pairs, strict=True)
        if c < PARITY_BAR
    ]
    assert min(cosines) >= PARITY_BAR, (
        f"min cosine {min(cosines):.6f} (median {np.median(cosines):.6f}) for "
        f"{pairs[worst][0][:60]!r}; below {PARITY_BAR}: {failing}"
    )


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="documented llama.cpp tokenizer divergence")
@pytest.mark.parametrize(
    "text", [pytest.param(text, id=f"divergence-{i}") for i, text in enumerate(KNOWN_TOKENIZER_DIVERGENCES)]
)
def test_known_tokenizer_divergences_still_diverge(embedder: Embedder, reference: dict, text):
    # Strict xfail: if llama.cpp fixes its tokenizer this XPASSes and fails the
    # run, telling us to move the text back into the main parity test.
    theirs = reference["vectors"][reference["texts"].index(text)]
    assert _cosine(embedder.embed(text), theirs) >= PARITY_BAR, KNOWN_TOKENIZER_DIVERGENCES[text]


def test_over_long_text_is_truncated_like_sentence_transformers(
    embedder: Embedder, reference: dict
):
    longest = max(reference["texts"], key=len)
    assert len(longest.split()) > 500
    vector = embedder.embed(longest)
    theirs = reference["vectors"][reference["texts"].index(longest)]
    assert _cosine(vector, theirs) >= PARITY_BAR
    # Everything past the 256-token window is ignored. (Compare two single-text
    # computations: a vector from a batched call may differ in the last bits.)
    embedder.clear_cache()
    alone = embedder.embed(longest)
    assert embedder.embed(longest + " and then a completely different ending") == alone


def test_vectors_are_unit_length(embedder: Embedder, reference: dict):
    vectors = embedder.embed_many(reference["texts"] + ["", " "])
    norms = np.linalg.norm(np.asarray(vectors), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-6), norms


def test_building_twice_gives_byte_identical_files(tmp_path: Path, model_path: Path):
    first = build_default_model(tmp_path / "a" / "model.gguf")
    second = build_default_model(tmp_path / "b" / "model.gguf")
    assert file_sha256(first) == file_sha256(second)
    assert file_sha256(first) == file_sha256(model_path), (
        f"the cached test model {model_path} is stale (built by older code); delete it "
        "or point MNEMOSYNC_TEST_DATA_HOME somewhere else"
    )


def test_an_interrupted_build_leaves_no_file_behind(tmp_path: Path):
    dest = tmp_path / "models" / "model.gguf"

    def interrupt_while_writing(line: str) -> None:
        if line.startswith("writing"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_default_model(dest, progress=interrupt_while_writing)
    assert list(dest.parent.iterdir()) == []


def test_racing_builds_of_the_same_file_both_succeed(tmp_path: Path, model_path: Path):
    data_home = tmp_path / "home"
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = list(pool.map(lambda _: ensure_default_model(data_home), range(2)))
    assert built[0] == built[1] == default_model_path(data_home)
    assert file_sha256(built[0]) == file_sha256(model_path)
    assert [p.name for p in built[0].parent.iterdir()] == [built[0].name]  # no temp files left


def test_ensure_default_model_reuses_an_existing_file(tmp_path: Path, model_path: Path):
    data_home = tmp_path / "home"
    target = default_model_path(data_home)
    target.parent.mkdir(parents=True)
    target.symlink_to(model_path)
    assert ensure_default_model(data_home) == target
    assert target.is_symlink()


def test_fingerprint_reports_384_dimensions(model_path: Path, embedder: Embedder):
    fingerprint = fingerprint_model(model_path)
    assert fingerprint.dimensions == 384 == embedder.dimensions
    assert fingerprint.name == DEFAULT_MODEL_NAME
    assert fingerprint.sha256 == file_sha256(model_path)
    assert embedder.fingerprint == fingerprint
    assert str(fingerprint) == (
        f"all-MiniLM-L6-v2 (384 dims, sha256 {fingerprint.sha256[:12]})"
    )


def test_missing_model_file_raises_model_error_naming_the_build_command(tmp_path: Path):
    missing = tmp_path / "nowhere.gguf"
    with pytest.raises(ModelUnusable, match="mnemosync model build") as info:
        Embedder(missing)
    assert str(missing) in str(info.value)


def test_a_file_that_is_not_gguf_raises_model_error(tmp_path: Path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"definitely not a model" * 100)
    with pytest.raises(ModelUnusable, match="not a readable GGUF"):
        fingerprint_model(bogus)
    with pytest.raises(ModelUnusable, match="mnemosync model build --force"):
        Embedder(bogus)


def test_embedding_the_same_text_twice_is_served_from_the_cache(embedder: Embedder):
    text = "cache me: the release train leaves on Thursdays"
    before = embedder.stats()
    first = embedder.embed(text)
    middle = embedder.stats()
    second = embedder.embed(text)
    after = embedder.stats()

    assert middle.misses == before.misses + 1
    assert middle.model_calls == before.model_calls + 1
    assert after.hits == middle.hits + 1
    assert after.model_calls == middle.model_calls  # llama.cpp was not called again
    assert second == first
    second.append(1.0)  # callers get copies; the cache stays intact
    assert embedder.embed(text) == first


def test_embed_many_keeps_input_order_and_computes_duplicates_once(embedder: Embedder):
    texts = ["order alpha 1", "order beta 2", "order alpha 1", "order gamma 3"]
    before = embedder.stats()
    vectors = embedder.embed_many(texts)
    after = embedder.stats()
    assert vectors[0] == vectors[2]
    assert after.misses - before.misses == 3
    assert after.model_calls - before.model_calls == 1  # one batched forward pass
    for text, vector in zip(texts, vectors, strict=True):
        assert _cosine(embedder.embed(text), vector) > 0.99999


def test_batched_and_single_embeddings_agree(model_path: Path, reference: dict):
    texts = reference["texts"][:12]
    with Embedder(model_path, cache_size=0) as fresh:
        batched = fresh.embed_many(texts)
        single = [fresh.embed(text) for text in texts]
    # Not bit-identical (batch shape changes float summation order), but close.
    assert np.allclose(batched, single, atol=1e-3)
    assert min(_cosine(a, b) for a, b in zip(batched, single, strict=True)) > 0.99999


def test_concurrent_embeds_from_many_threads_match_sequential_embeds(
    model_path: Path, reference: dict
):
    texts = reference["texts"][:16]
    with Embedder(model_path, cache_size=0) as fresh:
        sequential = [fresh.embed(text) for text in texts]
        with ThreadPoolExecutor(max_workers=8) as pool:
            concurrent = list(pool.map(fresh.embed, texts * 3))
        assert fresh.stats().hits == 0
    assert np.allclose(concurrent, sequential * 3, atol=1e-3)  # packed together, as embed_many packs them


def test_threads_waiting_at_once_are_embedded_in_one_pass_and_each_gets_its_own_vectors(model_path: Path,
                                                                                         reference: dict):
    """A local agent serves several sessions: texts they wait on together are packed into one model pass."""
    import threading

    texts = reference["texts"][:12]
    with Embedder(model_path, cache_size=0) as fresh:
        alone = {text: fresh.embed(text) for text in texts}
        before = fresh.stats().model_calls
        barrier, got = threading.Barrier(len(texts)), {}

        def embed(text: str) -> None:
            barrier.wait()
            got[text] = fresh.embed(text)

        threads = [threading.Thread(target=embed, args=(t,)) for t in texts]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        passes = fresh.stats().model_calls - before
    assert passes < len(texts) / 2, f"{passes} passes for {len(texts)} texts waiting at once"
    for text in texts:  # as close as embed_many's packed passes are to single ones
        assert np.allclose(got[text], alone[text], atol=1e-3) and _cosine(got[text], alone[text]) > 0.99999, text


def test_single_texts_and_packed_batches_run_with_their_own_thread_counts(model_path: Path, reference: dict):
    texts = reference["texts"][:6]
    with Embedder(model_path, cache_size=0) as one_thread:
        expected = [one_thread.embed(text) for text in texts]
    with Embedder(model_path, n_threads=1, n_threads_batch=2, cache_size=0) as fresh:
        batched = fresh.embed_many(texts)
        assert llama_cpp.llama_n_threads_batch(fresh._llama.ctx) == 2
        single = [fresh.embed(text) for text in texts]
        assert llama_cpp.llama_n_threads_batch(fresh._llama.ctx) == 1
    assert single == expected
    assert min(_cosine(a, b) for a, b in zip(batched, expected, strict=True)) > 0.99999


def _resident_kib(mapped: Path | None = None) -> int:
    """This process's resident set (VmRSS), or only the pages of its mappings of the file `mapped`."""
    if mapped is None:
        return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0])
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):
            inside = len(fields) == 6 and fields[5] == str(mapped.resolve())
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads the resident set from /proc")
def test_an_embedder_keeps_resident_only_what_its_passes_read(model_path: Path, reference: dict):
    """The pages llama.cpp fills at load and a pass never reads are given back: most of the model file's token table
    (llama.cpp populates the whole mapping) and the logits rows of its output buffer (120 KiB a token, never written
    by a pooling encoder), which a pass of 512 tokens grew by 60 MiB for good. The vectors stay bit for bit."""
    texts = reference["texts"][:12]
    with Embedder(model_path, cache_size=0) as fresh:
        before = [fresh.embed(text) for text in texts]
        assert _resident_kib(model_path) < 0.75 * model_path.stat().st_size / 1024
        settled = _resident_kib()
        fresh.embed_many([f"memory {i}: the deploy of the web service keeps its logs for {i} days" for i in range(40)])
        fresh.embed("word " * 300)
        grown = _resident_kib() - settled
        after = [fresh.embed(text) for text in texts]
    assert grown < 16 * 1024, f"the resident set grew by {grown} KiB over two long passes"
    assert after == before


def test_thread_counts_below_one_are_refused(model_path: Path):
    with pytest.raises(ValueError, match="thread counts must be at least 1, got n_threads=0, n_threads_batch=2"):
        Embedder(model_path, n_threads=0, n_threads_batch=2)


def test_a_closed_embedder_refuses_to_embed(model_path: Path):
    closed = Embedder(model_path, cache_size=0)
    closed.close()
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        closed.embed("too late")


@pytest.fixture
def cli() -> click.Group:
    from mnemosync.cli import cli

    return cli


def _run(cli: click.Group, *args: str):
    # Keep a developer's own settings from leaking into the commands.
    env = {"MNEMOSYNC_HOME": None, "MNEMOSYNC_EMBED_MODEL": None}
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_cli_model_build_is_idempotent(cli: click.Group, tmp_path: Path, model_path: Path):
    first = _run(cli, "model", "build", "--data-home", str(tmp_path))
    assert first.exit_code == 0, first.output
    built = default_model_path(tmp_path)
    assert str(built) in first.stdout
    assert "384 dims" in first.stdout
    assert "writing" in first.stderr
    assert file_sha256(built) == file_sha256(model_path)

    again = _run(cli, "model", "build", "--data-home", str(tmp_path))
    assert again.exit_code == 0, again.output
    assert f"already built at {built}" in again.stdout
    assert again.stderr == ""


def test_cli_model_info_json_describes_the_model(cli: click.Group, model_path: Path):
    result = _run(cli, "model", "info", "--json", "--model", str(model_path))
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info == {
        "path": str(model_path),
        "name": "all-MiniLM-L6-v2",
        "dimensions": 384,
        "sha256": file_sha256(model_path),
        "size_bytes": model_path.stat().st_size,
    }


def test_cli_model_info_without_a_model_says_to_build_it(cli: click.Group, tmp_path: Path):
    result = _run(cli, "model", "info", "--data-home", str(tmp_path))
    assert result.exit_code == 4  # a precondition (the model) is missing
    assert result.stderr.startswith(f"Error: embedding model file not found at {default_model_path(tmp_path)}; "
                                    "run `mnemosync model build`")


def test_cli_embed_json_prints_384_dimensional_vectors(
    cli: click.Group, model_path: Path, embedder: Embedder
):
    result = _run(cli, "embed", "--json", "--model", str(model_path), "hello world", "ECONNRESET")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [row["text"] for row in rows] == ["hello world", "ECONNRESET"]
    assert all(row["dimensions"] == len(row["vector"]) == 384 for row in rows)
    assert _cosine(rows[0]["vector"], embedder.embed("hello world")) > 0.99999


def test_cli_embed_prints_dimensions_and_norm_for_humans(cli: click.Group, model_path: Path):
    result = _run(cli, "embed", "--model", str(model_path), "hello world")
    assert result.exit_code == 0, result.output
    assert "384 dims" in result.stdout
    assert "norm 1.000000" in result.stdout
