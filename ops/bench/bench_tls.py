#!/usr/bin/env python3
"""Benchmark the cost of mTLS: append and search over TLS against plain text, same run.

Starts two servers in this process on loopback ports, one plain text
(--insecure) and one with mTLS (certificates from a throw-away CA made with
`mnemosync.server.ca`), each over its own fresh SQLite file, preloads both with the same
memories, then measures through the agent client's `Remote`:

* ``append``: one single-operation Append per call (an add with a 384-d vector);
* ``search``: hybrid Search (query text + 384-d vector, limit 10);
* ``connect``: a new channel and its first call (TCP + TLS handshake).

Rounds alternate which server goes first; the table shows the median per-call
latency of each and the ratio TLS / plain text (1.00 = no overhead). A last
line compares appends by an agent issued with `--signing` (the client signs
each operation with Ed25519, the server verifies it) with the unsigned TLS
appends, both over the same TLS server.

Examples:
    python ops/bench/bench_tls.py
    python ops/bench/bench_tls.py --calls 1000 --rounds 7 --preload 5000 --json tls.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from mnemosync.agent.remote import Remote  # noqa: E402
from mnemosync.agent.tls import AgentTls  # noqa: E402
from mnemosync.kernel import signing  # noqa: E402
from mnemosync.kernel.limits import Limits  # noqa: E402
from mnemosync.kernel.model_identity import ModelInfo  # noqa: E402
from mnemosync.kernel.operations import OpRequest, ValidOp, validate  # noqa: E402
from mnemosync.kernel.search import Filter  # noqa: E402
from mnemosync.server import ca  # noqa: E402
from mnemosync.server.app import run_server  # noqa: E402
from mnemosync.server.settings import ServerSettings  # noqa: E402

DIMS = 384
MODEL = ModelInfo(name="bench-vectors", dimensions=DIMS, sha256="cd" * 32)
WORDS = ("agent memory server replica vector index sync conflict merge deploy release test failure retry "
         "timeout network socket database migration schema query cache token review decision").split()


def _vector(rng: np.random.Generator) -> list[float]:
    v = rng.normal(size=DIMS)
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def _text(rng: np.random.Generator, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS, size=n))


def _add(rng: np.random.Generator) -> ValidOp:
    """An add, validated as the agent client does before any write (the server validates it again)."""
    op = OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0, {"scope": "user", "content": _text(rng)},
                   _vector(rng))
    return validate(op, Limits(), MODEL)


def _preload(remote: Remote, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for start in range(0, count, 250):
        remote.append([_add(rng) for _ in range(min(250, count - start))], MODEL)


def _signer(key, agent_id: str):
    """Commits to an operation's payload and signs it with Ed25519, as a signing agent does (timed)."""

    def sign(op: ValidOp) -> ValidOp:
        salt, signature = signing.sign_operation(key, agent_id, op)
        return replace(op, salt=salt, signature=signature)

    return sign


def _time_appends(remote: Remote, calls: int, seed: int, sign=None) -> float:
    """Seconds per single-op Append of validated operations; with `sign`, signing each one is part of the call."""
    rng = np.random.default_rng(seed)
    ops = [_add(rng) for _ in range(calls)]
    started = time.perf_counter()
    for op in ops:
        remote.append([sign(op) if sign else op], MODEL)
    return (time.perf_counter() - started) / calls


def _time_searches(remote: Remote, calls: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    queries = [(_text(rng, 3), _vector(rng)) for _ in range(calls)]
    started = time.perf_counter()
    for query, vector in queries:
        remote.search(query, vector=vector, model=MODEL, limit=10, filter=Filter(), mode="hybrid")
    return (time.perf_counter() - started) / calls


def _time_connects(make, calls: int) -> float:
    total = 0.0
    for _ in range(calls):
        started = time.perf_counter()
        remote = make()
        remote.stats()
        total += time.perf_counter() - started
        remote.close()
    return total / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="calls per measurement (default 400)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--preload", type=int, default=2000, help="memories loaded before measuring (default 2000)")
    parser.add_argument("--connects", type=int, default=30, help="new channels per round (default 30)")
    parser.add_argument("--synchronous", choices=["full", "normal"], default="normal",
                        help="SQLite durability of both servers (default normal: measure the transport, not fsync)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="mnemosync-bench-tls-") as tmp:
        root = Path(tmp)
        ca.init_ca(root / "ca")
        ca.issue_server(root / "ca", ["127.0.0.1"])
        ca.issue_agent(root / "ca", "bench", authority=3, scopes=["*"])
        ca.issue_agent(root / "ca", "signer", authority=3, scopes=["*"], signing=True)
        tls = AgentTls(root / "ca" / "agents" / "bench")
        signer_tls = AgentTls(root / "ca" / "agents" / "signer")
        sign = _signer(signer_tls.signing_key(), "signer")
        plain_settings = ServerSettings(data_dir=root / "plain", listen="127.0.0.1:0", insecure=True,
                                        synchronous=args.synchronous)
        tls_settings = ServerSettings(data_dir=root / "tls", listen="127.0.0.1:0", tls_dir=root / "ca",
                                      synchronous=args.synchronous)
        with run_server(plain_settings) as plain_server, run_server(tls_settings) as tls_server:
            makers = {
                "plain": lambda: Remote(plain_server.address, "bench", insecure=True, timeout=60),
                "tls": lambda: Remote(tls_server.address, "bench", insecure=False, timeout=60, tls=tls),
            }
            remotes = {mode: make() for mode, make in makers.items()}
            signer = Remote(tls_server.address, "signer", insecure=False, timeout=60, tls=signer_tls)
            for remote in remotes.values():
                _preload(remote, args.preload, seed=1)
                _time_searches(remote, 20, seed=2)  # warm caches and the connection
            signer.stats()
            samples: dict[str, dict[str, list[float]]] = {
                kind: {"plain": [], "tls": []} for kind in ("append", "search", "connect")}
            signed: list[float] = []
            for r in range(args.rounds):
                order = ("plain", "tls") if r % 2 == 0 else ("tls", "plain")
                for mode in order:
                    samples["append"][mode].append(_time_appends(remotes[mode], args.calls, seed=100 + r))
                    samples["search"][mode].append(_time_searches(remotes[mode], args.calls, seed=200 + r))
                    samples["connect"][mode].append(_time_connects(makers[mode], args.connects))
                signed.append(_time_appends(signer, args.calls, seed=300 + r, sign=sign))
            for remote in (*remotes.values(), signer):
                remote.close()

    results = {}
    print(f"{'operation':<10} {'plain ms/call':>14} {'tls ms/call':>12} {'tls/plain':>10}")
    for kind, by_mode in samples.items():
        plain, secure = statistics.median(by_mode["plain"]), statistics.median(by_mode["tls"])
        results[kind] = {"plain_ms": plain * 1000, "tls_ms": secure * 1000, "ratio": secure / plain,
                         "plain_samples_ms": [x * 1000 for x in by_mode["plain"]],
                         "tls_samples_ms": [x * 1000 for x in by_mode["tls"]]}
        print(f"{kind:<10} {plain * 1000:>14.3f} {secure * 1000:>12.3f} {secure / plain:>10.2f}")
    unsigned, signed_median = statistics.median(samples["append"]["tls"]), statistics.median(signed)
    results["signed_append"] = {"tls_ms": unsigned * 1000, "signed_ms": signed_median * 1000,
                                "ratio": signed_median / unsigned, "signed_samples_ms": [x * 1000 for x in signed]}
    print(f"signed append over TLS: {signed_median * 1000:.3f} ms/call, {signed_median / unsigned:.2f}x the "
          "unsigned TLS append (client signs, server verifies)")
    print(f"({args.rounds} rounds x {args.calls} calls, {args.preload} memories preloaded, {DIMS}-d vectors, "
          f"synchronous={args.synchronous}, {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()})")
    if args.json:
        args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "results": results},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
