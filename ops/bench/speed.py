"""The speed sections, all against one benchmark server process.

Order matters: the server is loaded to the small size and searched, loaded to
the large size and searched, measured for resident memory, caught up from,
searched end to end with the real model, and only then hit by concurrent
single appends (which add memories of their own).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from mnemosync.kernel import db
from mnemosync.v1 import memory_pb2 as pb
from ops.bench import bench_append, bench_lifecycle, bench_search
from ops.bench.plan import Plan, label
from ops.bench.report import Figure, Report
from ops.bench.serverproc import Client, ServerProcess
from ops.bench.workload import Workload

SYNTHETIC_MODEL = pb.EmbeddingModel(name="bench-random-unit-vectors", dimensions=384, sha256="be" * 32)


def model_proto(model_path: Path | None) -> pb.EmbeddingModel:
    """The real model's fingerprint when it exists (so end-to-end search can run), else a synthetic one."""
    if model_path is None:
        return SYNTHETIC_MODEL
    from mnemosync.kernel.model_identity import fingerprint

    fp = fingerprint(model_path)
    return pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)


def run_speed(plan: Plan, report: Report, work: Path, model_path: Path | None, log: Callable[[str], None]) -> None:
    """Runs the server-based sections of `plan` into `report`."""
    want = set(plan.sections)
    model = model_proto(model_path)
    workload = Workload()
    with ServerProcess(work / "server", synchronous=plan.synchronous, embed_model=model_path) as server:
        client = Client(server.address)
        loader = bench_append.Loader(client, server.db_path, work / "raw-append.db", model, workload,
                                     batch=plan.batch, chunk=plan.chunk, synchronous=plan.synchronous)
        try:
            for size_key, size in (("small", plan.small), ("large", plan.large)):
                log(f"loading {size:,} memories ...")
                loader.load_to(size)
                if "search" in want:
                    log(f"search at {size:,} ...")
                    figures, details = bench_search.hybrid_vs_numpy(
                        client, loader.matrix(), workload, model, queries=plan.search_queries,
                        label=label(size), size_key=size_key)
                    for f in figures:
                        report.add(f)
                    report.sections[f"search_{size_key}"] = details
                    report.notes.append(
                        f"vector-only search @ {label(size)}: p50 {details['vector_only_ms'][50]:.1f} ms "
                        f"(NumPy {details['numpy_ms'][50]:.1f} ms); its top 10 equals NumPy's exact top 10 for "
                        f"{details['vector_top10_identical_to_numpy']} queries")
                    figures, details = bench_search.fusion_cost(server.db_path, workload, queries=plan.search_queries,
                                                                label=label(size), size_key=size_key)
                    for f in figures:
                        report.add(f)
                    report.sections[f"search_fusion_{size_key}"] = details
                    figures, details = bench_lifecycle.rerank_cost(client, workload, model,
                                                                   queries=plan.search_queries, label=label(size),
                                                                   size_key=size_key)
                    for f in figures:
                        report.add(f)
                    report.sections[f"search_rerank_{size_key}"] = details
                if "recall" in want and model_path is not None:
                    from ops.bench import bench_recall
                    from ops.bench.bench_quality import load_labelled_set

                    log(f"prompt hook at {size:,} ...")
                    prompts = [q["query"] for q in load_labelled_set()[1]][: plan.e2e_queries]
                    figures, details = bench_recall.hook_latency(server.address, model_path, work, label=label(size),
                                                                 size_key=size_key, prompts=prompts, log=log)
                    for f in figures:
                        report.add(f)
                    report.sections[f"recall_{size_key}"] = details
            if "append" in want:
                report.add(loader.figure())
                report.sections["append"] = {"rounds": loader.rounds}
        finally:
            loader.close()
        if want & {"memory", "append"}:  # an append run reports the resident memory beside the data's size too
            report.add(_memory_figure(server, plan.large))
        if "catchup" in want:
            from ops.bench import bench_catchup

            log("catch-up ...")
            target = work / "catchup"
            target.mkdir()
            figure, details = bench_catchup.measure(server.address, target, label=label(loader.head))
            report.add(figure)
            report.sections["catchup"] = details
            shutil.rmtree(target, ignore_errors=True)
        if "e2e" in want:
            _end_to_end(plan, report, work, server, model_path, log)
        if "concurrency" in want:
            from ops.bench import bench_concurrency

            log("concurrent single appends ...")
            figures, details = bench_concurrency.measure(
                server.address, model.SerializeToString(), agent_counts=plan.agent_counts,
                duration=plan.concurrency_seconds, rounds=plan.concurrency_rounds)
            for f in figures:
                report.add(f)
            report.sections["concurrency"] = details
        client.close()
    if "search" in want:
        log("lifecycle sweep ...")
        figure, details = bench_lifecycle.sweep_cost(server.db_path)
        report.add(figure)
        report.sections["lifecycle_sweep"] = details


def _memory_figure(server: ServerProcess, memories: int) -> Figure:
    kib = server.memory_kib()
    disk = db.data_bytes(server.db_path)
    return Figure(
        id="memory.rss", title=f"server resident memory @ {label(memories)} memories (after searches)",
        value=kib["VmRSS"] / 1024, unit="MiB", baseline_title="size of the data on disk (db + WAL)",
        baseline=disk / 2**20, better="lower",
        details={"peak_rss_mib": kib.get("VmHWM", 0) / 1024, "disk_bytes": disk, "memories": memories,
                 "vector_mirror_mib": memories * (384 + 64) * 4 / 2**20},  # matrix + prefix copy
    )


def _end_to_end(plan: Plan, report: Report, work: Path, server: ServerProcess, model_path: Path | None,
                log: Callable[[str], None]) -> None:
    if model_path is None:
        report.notes.append("end-to-end search skipped: no embedding model available")
        return
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings
    from mnemosync.agent.embeddings import Embedder
    from ops.bench.bench_quality import load_labelled_set

    log("end-to-end search with the real model ...")
    queries = [q["query"] for q in load_labelled_set()[1]][: plan.e2e_queries]
    settings = ClientSettings(server=server.address, agent_id="bench-e2e", insecure=True,
                              cache_dir=work / "e2e-agent", embed_model=model_path)
    with Embedder(model_path, cache_size=0) as embedder:
        agent = AgentClient(settings, embedder=embedder, live=False, sync_on_start=False)
        try:
            figures, details = bench_search.end_to_end(agent, embedder, queries, label=label(plan.large))
        finally:
            agent.close()
    for f in figures:
        report.add(f)
    report.sections["e2e"] = details
    report.add(_agent_add(plan, work, server, model_path))
    report.notes.append("end-to-end search embeds the labelled set's real questions with the real model and searches "
                        "the large store of synthetic memories: a timing, not a relevance, measurement")


def _agent_add(plan: Plan, work: Path, server: ServerProcess, model_path: Path) -> Figure:
    """An agent's `add` end to end except the embedding (its texts are embedded first, so the embedder answers
    from its cache): validation, signing, the Append round trip and the cache's apply of the entry it returns."""
    import statistics
    import time

    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings
    from mnemosync.agent.embeddings import Embedder

    count = max(20, plan.e2e_queries)
    texts = [f"The {i}th deploy of the billing service moved the cron job to {i % 24:02d}:15 UTC" for i in range(count)]
    settings = ClientSettings(server=server.address, agent_id="bench-add", insecure=True,
                              cache_dir=work / "add-agent", embed_model=model_path)
    with Embedder(model_path) as embedder:
        started = time.perf_counter()
        embedder.embed_many(texts)
        embed_ms = (time.perf_counter() - started) * 1000 / count
        with AgentClient(settings, embedder=embedder, live=False) as agent:
            times = []
            for text in texts:
                started = time.perf_counter()
                agent.add(text)
                times.append((time.perf_counter() - started) * 1000)
    return Figure(
        id="agent.add.p50", title="an agent's add p50, embedding excluded (AgentClient.add: validate, Append, "
        "apply its own entry)", value=statistics.median(times), unit="ms",
        baseline_title="embedding the same text, per text (batched; not part of the figure)", baseline=embed_ms,
        better="lower", details={"adds": count, "p95_ms": sorted(times)[int(0.95 * (count - 1))]},
    )
