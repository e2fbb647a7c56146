"""Recall on every prompt: the relevance bar on the labelled sets, and the prompt hook's latency at each size.

The bar (`mnemosync.shim.recall.Bar`). Each labelled set is stored in a fresh server
with the real model; every question is searched through the agent client as
the warm process searches it (`SEARCH_LIMIT` hits), and the bar is applied to
those hits. Three kinds of question:

* the question itself: `precision` (injected memories that are evidence, over
  all injected), `recall` (injected evidence over the evidence the bar could
  show, at most `max_items` per question) and `answered` (questions that got
  at least one piece of evidence);
* the same question with its evidence withheld from the hits (the store
  without the answer): `noise` is the share of these that still get something;
* the other set's questions asked of this store (nothing in it is about
  them): `noise_unrelated`.

The bar's two thresholds are tuned on the dev split of the code-assistant set
(`retrieval`): among rules with dev precision ≥ `MIN_PRECISION` and noise ≤
`MAX_NOISE`, the one with the highest recall (then precision, then the higher
similarity). At most three memories are shown (`ITEMS`).
The report gives dev and test for both sets, and says whether the tuned rule
is the one `mnemosync.shim.recall` ships. (The conversational set's evidence is one
or two dialog turns among many about the same people, so its precision and
"noise" count related turns as wrong; it is reported, not tuned on.)

Latency (`hook_latency`). Against the benchmark server at each size, a warm
`mnemosync agent` is started and caught up; then the prompt hook runs as
Claude Code runs it, the plugin's launcher (`mnemosync-plugin hook prompt`) as
a new process per prompt with the documented JSON on stdin, timed from spawn
to exit (the labelled questions, embedded by the warm process with the real
model). The same-run baseline is a bare `python -c pass` of the same
interpreter, taking turns with the hook and with the console script
(`mnemosync hook prompt`, the launcher before issue 38; `console_script_ms`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ops.bench import datasets
from ops.bench.report import Figure, Report

MIN_PRECISION = 0.85
MAX_NOISE = 0.10
TUNED_ON = ("retrieval", "dev")
SIMILARITIES = tuple(round(0.50 + i / 100, 2) for i in range(26))
COVERAGES = (None, 0.6, 0.7, 0.8, 0.9, 1.0)
ITEMS = (3,)
"""Fixed, not tuned: the token budget (300 by default) has room for about three memories."""
REPO = Path(__file__).resolve().parents[2]
QUICK_UNRELATED = 50


def collect(model_path: Path, workdir: Path, log: Callable[[str], None], *, quick: bool = False
            ) -> list[dict[str, Any]]:
    """Every labelled question's hits, as the warm process gets them, with each hit's label and scores.

    Rows: set, store (the set whose memories were searched), id, split, evidence, and hits (label,
    vector_rank, similarity, keyword_rank, coverage), best first. `quick` (the smoke run) stores only the
    code-assistant set and asks it `QUICK_UNRELATED` of the other set's questions.
    """
    from mnemosync.agent.embeddings import Embedder
    from mnemosync.shim.recall import SEARCH_LIMIT
    from mnemosync.v1 import memory_pb2 as pb
    from ops.bench import bench_quality
    from ops.bench.embedding_cache import DEFAULT_DIR, CachedEmbeddings

    sets = datasets.labelled_sets()
    rows = []
    with Embedder(model_path) as embedder:
        fp = embedder.fingerprint
        model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
        cached = CachedEmbeddings(embedder, DEFAULT_DIR, log)
        for store in sets[:1] if quick else sets:
            with bench_quality.served_agent(workdir, f"recall-{store.name}", store.memories, embedder, model,
                                            model_path, loading_embedder=cached) as (client, label):
                for asked in sets:
                    log(f"  recall bar: {asked.name} questions on the {store.name} store")
                    questions = asked.queries[:QUICK_UNRELATED] if quick and asked is not store else asked.queries
                    for q in questions:
                        hits = client.search(q.text, limit=SEARCH_LIMIT, scopes=[bench_quality.SCOPE]).hits
                        rows.append({"set": asked.name, "store": store.name, "id": q.id, "split": q.split,
                                     "text": q.text,
                                     "evidence": list(q.evidence), "hits": [
                                         {"label": label.get(h.memory.id), "vector_rank": h.vector_rank,
                                          "similarity": 1 - h.vector_distance, "keyword_rank": h.keyword_rank,
                                          "coverage": h.keyword_coverage, "id": h.memory.id,
                                          "version": h.memory.version, "type": h.memory.type,
                                          "content": h.memory.content} for h in hits]})
    return rows


def _hit(row: dict):
    """A hit row as a `Hit` with its memory (the decision reads the memory's text)."""
    from ops.bench.recall_prompts import hits_of

    [hit] = hits_of({"hits": [row]})
    return hit


def evaluate(rows: Iterable[dict[str, Any]], bar, *, select=None) -> dict[str, float]:
    """The bar's precision, recall, answered share, noise and unrelated noise over `rows` (see the docstring).

    `select` ((question, hits) -> the hits injected) measures another decision instead, with `bar.max_items`
    as its most items (the fitted decision: `ops.bench.recall_prompts.decision_selector`)."""
    select = select or (lambda text, hits: bar.select(hits))
    injected = relevant = possible = answered = own = noisy = unrelated = noisy_unrelated = 0
    for row in rows:
        hits = [(h["label"], _hit(h)) for h in row["hits"]]
        label_of = {id(h): label for label, h in hits}
        if row["set"] != row["store"]:
            unrelated += 1
            noisy_unrelated += bool(select(row.get("text", ""), [h for _, h in hits]))
            continue
        own += 1
        evidence = set(row["evidence"])
        chosen = [label_of[id(h)] for h in select(row.get("text", ""), [h for _, h in hits])]
        found = sum(label in evidence for label in chosen)
        injected, relevant = injected + len(chosen), relevant + found
        possible += min(len(evidence), bar.max_items)
        answered += found > 0
        noisy += bool(select(row.get("text", ""), [h for label, h in hits if label not in evidence]))
    return {"questions": own, "precision": relevant / injected if injected else 1.0,
            "recall": relevant / possible if possible else 0.0, "answered": answered / own if own else 0.0,
            "noise": noisy / own if own else 0.0, "noise_unrelated": noisy_unrelated / unrelated if unrelated else 0.0,
            "injected_per_question": injected / own if own else 0.0}


def _subset(rows: Sequence[dict], name: str, split: str) -> list[dict]:
    return [r for r in rows if r["set"] == name and r["split"] == split]


def tune(rows: Sequence[dict[str, Any]]):
    """The bar chosen on the dev split of the code-assistant set (see the module docstring)."""
    from mnemosync.shim.recall import Bar

    dev = _subset(rows, *TUNED_ON)
    best, best_key = None, None
    for similarity in SIMILARITIES:
        for coverage in COVERAGES:
            for items in ITEMS:
                bar = Bar(min_similarity=similarity, min_coverage=coverage, max_items=items)
                m = evaluate(dev, bar)
                if m["precision"] < MIN_PRECISION or m["noise"] > MAX_NOISE:
                    continue
                key = (round(m["recall"], 6), round(m["precision"], 6), -similarity, items)
                if best_key is None or key > best_key:
                    best, best_key = bar, key
    return best


def bar_report(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The tuned bar, the shipped bar, and both measured per set and split."""
    from dataclasses import asdict

    from mnemosync.shim.recall import Bar

    tuned, shipped = tune(rows), Bar()

    def measure(bar) -> dict[str, dict[str, dict[str, float]]]:
        return {name: {split: evaluate(_subset(rows, name, split), bar) for split in datasets.SPLITS}
                for name in ("retrieval", "conversations") if any(r["store"] == name for r in rows)}

    return {"shipped": asdict(shipped), "tuned": asdict(tuned) if tuned else None,
            "shipped_is_tuned": tuned == shipped, "tuned_on": "/".join(TUNED_ON),
            "constraints": {"min_precision": MIN_PRECISION, "max_noise": MAX_NOISE}, "measured": measure(shipped),
            "measured_tuned": measure(tuned) if tuned and tuned != shipped else None}


def run_bar_into(report: Report, workdir: Path, model_path: Path | None, log: Callable[[str], None], *,
                 quick: bool = False) -> None:
    """Measures the bar (`quick`: see `collect`) and, in full runs, the fitted decision beside it on the labelled
    prompt set; records them in `report.sections["recall_bar"]` and `["recall_decision"]` and the notes."""
    if model_path is None:
        report.notes.append("recall bar skipped: no embedding model available")
        return
    set_rows = collect(model_path, workdir, log, quick=quick)
    result = bar_report(set_rows)
    report.sections["recall_bar"] = result
    if not quick:
        from ops.bench import recall_prompts

        decided = decision_report(recall_prompts.collect(model_path, workdir, log), set_rows)
        report.sections["recall_decision"] = decided
        for m in decided["prompt_set"]:
            if m["store"] == "all":
                report.notes.append(
                    f"recall {m['decision']} on the {m['split']} prompt stores ({m['related']} related, "
                    f"{m['negatives']} unrelated prompts): recall {m['recall']:.2f}, precision {m['precision']:.2f}, "
                    f"unrelated injected {m['unrelated']:.2f}, {m['tokens']:.0f} tokens per prompt")
    for name, splits in result["measured"].items():
        for split, m in splits.items():
            report.notes.append(
                f"recall bar on {name} {split} ({m['questions']} questions): precision {m['precision']:.2f}, "
                f"recall {m['recall']:.2f}, answered {m['answered']:.2f}, noise with the answer withheld "
                f"{m['noise']:.2f}, noise on unrelated questions {m['noise_unrelated']:.2f}, "
                f"{m['injected_per_question']:.2f} memories injected per question")
    if not result["shipped_is_tuned"]:
        report.notes.append(f"the recall bar tuned in this run ({result['tuned']}) differs from the shipped one "
                            f"({result['shipped']}): update mcp_shim/recall.py")


def _ping(path: Path) -> bool:
    """True once the agent serving `path` has caught its cache up and is live (it answers before that: it boots
    in the background)."""
    from mnemosync.agent import local_socket

    try:
        return bool(local_socket.ask(path, {"op": "status"}, timeout=2).get("live"))
    except (OSError, ValueError):
        return False


def _timed(command: list[str], stdin: str, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[-2:]} exited {done.returncode}: {done.stderr[-500:]}")
    return elapsed, done.stdout


def hook_latency(address: str, model_path: Path, workdir: Path, *, label: str, size_key: str, prompts: Sequence[str],
                 log: Callable[[str], None]) -> tuple[list[Figure], dict[str, Any]]:
    """The prompt hook from process start to output, against a warm agent, and a bare interpreter start."""
    from mnemosync.agent import local_socket
    from ops.bench.bench_search import percentiles

    runtime = tempfile.mkdtemp(prefix="mb-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMOSYNC_", "CLAUDE_"))}
    env.update({"MNEMOSYNC_SERVER": address, "MNEMOSYNC_AGENT_ID": f"bench-recall-{label}", "MNEMOSYNC_INSECURE": "1",
                "MNEMOSYNC_CACHE_DIR": str(workdir / f"recall-agent-{label}"),
                "MNEMOSYNC_EMBED_MODEL": str(model_path), "MNEMOSYNC_RECALL_START_AGENT": "0",
                "MNEMOSYNC_RECALL_TIMEOUT": "10", "XDG_RUNTIME_DIR": runtime,
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)})
    path = local_socket.socket_path(env, create=True)
    log_file = open(workdir / f"recall-agent-{label}.log", "wb")  # noqa: SIM115 - closed below, after the agent
    agent = subprocess.Popen([sys.executable, "-m", "mnemosync.cli", "agent"], env=env, stdin=subprocess.DEVNULL,
                             stdout=log_file, stderr=log_file)
    env["MNEMOSYNC_INSTALL_DIR"] = str(Path(sys.executable).parent)
    hook = [str(REPO / "mcp_shim" / "claude_plugin" / "bin" / "mnemosync-plugin"), "hook", "prompt"]
    console = [str(Path(sys.executable).parent / "mnemosync"), "hook", "prompt"]
    try:
        started = time.monotonic()
        log(f"  warm agent catching up with {label} memories ...")
        while not _ping(path):
            if agent.poll() is not None or time.monotonic() - started > 900:
                raise RuntimeError(f"the warm agent did not start; see {log_file.name}")
            time.sleep(0.5)
        catch_up_s = time.monotonic() - started
        inputs = [json.dumps({"session_id": f"bench-{i}", "transcript_path": "/dev/null", "cwd": "/home/bench/p3",
                              "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": p})
                  for i, p in enumerate(prompts)]  # a session each: none is withheld as already shown
        for stdin in inputs[:3]:
            _timed(hook, stdin, env)  # first requests load caches in the warm process
        timed: dict[str, list[float]] = {"bare": [], "hook": [], "console": []}
        answered = 0
        for i, stdin in enumerate(inputs):
            turns = [("bare", [sys.executable, "-c", "pass"], ""), ("hook", hook, stdin), ("console", console, stdin)]
            for key, command, given in turns[i % 3:] + turns[:i % 3]:  # each goes first in turn
                elapsed, out = _timed(command, given, env)
                timed[key].append(elapsed)
                answered += key == "hook" and bool(out)
        hook_s, console_s, bare_s = timed["hook"], timed["console"], timed["bare"]
        ask_s = []
        for i, prompt in enumerate(prompts):  # the hook's own request, a new session each as above
            begin = time.perf_counter()
            local_socket.ask(path, {"op": "recall", "prompt": prompt, "cwd": "/home/bench/p3", "scope": None,
                                    "budget_tokens": 300, "session_id": f"bench-ask-{i}", "log": False}, timeout=10)
            ask_s.append(time.perf_counter() - begin)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        log_file.close()
        shutil.rmtree(runtime, ignore_errors=True)
    hook_ms, bare_ms, ask_ms = percentiles(hook_s), percentiles(bare_s), percentiles(ask_s)
    details = {"prompts": len(prompts), "hook_ms": hook_ms, "console_script_ms": percentiles(console_s),
               "python_start_ms": bare_ms, "warm_process_ms": ask_ms, "with_context": answered,
               "agent_catch_up_s": catch_up_s, "load": [round(x, 2) for x in os.getloadavg()]}
    figures = [Figure(id=f"recall.hook.{size_key}.p{p}", title=f"prompt hook p{p} @ {label} (the plugin's launcher, "
                                                               "process start to output, embedding and search "
                                                               "included)",
                      value=hook_ms[p], unit="ms", baseline_title=f"bare `python -c pass` start, p{p}",
                      baseline=bare_ms[p], better="lower", details=details) for p in (50, 95)]
    return figures, details


def decision_report(prompt_rows: Sequence[dict[str, Any]], set_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Today's decision beside issue 28's and the old bar: per store of the project prompt set (dev and held-out),
    and on the two labelled question sets as `bar_report` measures the bar (issue 28's decision beside it)."""
    from dataclasses import replace

    from mnemosync.shim.recall import Bar, shipped_decision
    from ops.bench import recall_prompts
    from ops.bench.legacy_recall import legacy_decision

    decision, bar = shipped_decision(), Bar()
    lines = recall_prompts.table(prompt_rows, {"bar": recall_prompts.bar_selector(bar),
                                               "issue 28": recall_prompts.decision_selector(legacy_decision()),
                                               "decision": recall_prompts.decision_selector(decision)})
    selects = {"decision": (decision, recall_prompts.decision_selector(decision)),
               "issue 28": (legacy_decision(), recall_prompts.decision_selector(legacy_decision()))}
    sets = {name: {split: {"bar": evaluate(_subset(set_rows, name, split), bar),
                           **{key: evaluate(_subset(set_rows, name, split), replace(bar, max_items=d.max_items),
                                            select=select) for key, (d, select) in selects.items()}}
                   for split in datasets.SPLITS}
            for name in ("retrieval", "conversations") if any(r["store"] == name for r in set_rows)}
    heldout = next(m for m in lines if m["split"] == "heldout" and m["store"] == "all" and m["decision"] == "decision")
    return {"prompt_set": lines, "markdown": recall_prompts.markdown(lines), "labelled_sets": sets,
            "aims": recall_prompts.AIMS, "heldout_meets_aims": recall_prompts.meets_aims(heldout),
            "decision": {"threshold": decision.threshold, "max_items": decision.max_items, **decision.about}}


def sizes_report(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Issue 38's proof: today's decision beside issue 28's on the public projects' stores at every size (dev and
    test, by kind of prompt), on the project stores of `recall/` (dev and held-out), on the two labelled question
    sets (dev and test, `recall_sizes.labelled_variants`), and the calibration of today's relevance on the test
    stores' hits."""
    from mnemosync.shim.recall import shipped_decision
    from ops.bench import recall_prompts, recall_sizes
    from ops.bench.legacy_recall import legacy_decision

    decision = shipped_decision()
    selectors = {"issue 28": recall_prompts.decision_selector(legacy_decision()),
                 "decision": recall_prompts.decision_selector(decision)}
    public = {s.name for s in datasets.public_recall_stores()}
    labelled_sets = recall_sizes.LABELLED_POOLS
    lines = recall_sizes.table([r for r in rows if r["store"] in public], selectors)
    projects = [{**line, "size": "projects"} for line in recall_sizes.table(
        [{**r, "size": 0} for r in rows if r["store"] not in public and r["store"] not in labelled_sets],
        selectors)]
    labelled = recall_sizes.table([{**r, "size": r["store"]} for r in rows if r["store"] in labelled_sets],
                                  selectors)
    test = [r for r in rows if r["store"] in public and r["split"] == "test"]
    calibrated = recall_sizes.calibration(test, decision)
    aims = recall_prompts.AIMS
    missed = [f"{m['size']:,}: " + ", ".join(
        f"{name} {m[name]:.2f}" for name, ok in (("recall", (m["recall"] or 0) >= aims["recall"]),
                                                 ("precision", m["precision"] >= aims["precision"]),
                                                 ("unrelated", (m["unrelated"] or 0) <= aims["unrelated"]),
                                                 ("tokens", m["tokens"] <= aims["tokens"])) if not ok)
        for m in lines if m["split"] == "test" and m["decision"] == "decision"]
    return {"public": lines, "projects": projects, "labelled_sets": labelled, "calibration": calibrated, "aims": aims,
            "test_aims_missed": [m for m in missed if not m.endswith(": ")],
            "markdown": "\n\n".join([recall_sizes.markdown(lines),
                                     recall_sizes.markdown(projects),
                                     recall_sizes.markdown(labelled),
                                     recall_sizes.calibration_markdown(calibrated)]),
            "decision": {"threshold": decision.threshold, "max_items": decision.max_items,
                         "min_relevance": decision.min_relevance, **decision.about}}


def main(argv: list[str] | None = None) -> int:
    """`python -m ops.bench.bench_recall [--bar | --projects]`: today's decision beside issue 28's at every store
    size (the default), the old bar alone (`--bar`), or the project prompt set through real servers with the
    labelled question sets (`--projects`; the latency needs the full runner)."""
    import argparse

    from mnemosync.agent.model import ensure_default_model
    from mnemosync.kernel.settings_loading import default_data_home
    from ops.bench import recall_prompts, recall_sizes

    parser = argparse.ArgumentParser(description="The prompt hook's recall decision on the labelled sets.")
    parser.add_argument("--bar", action="store_true", help="tune and measure the old absolute bar alone")
    parser.add_argument("--projects", "--decision", action="store_true",
                        help="the project prompt set through real servers (dev and held-out), the bar beside both "
                             "decisions, and the labelled question sets")
    parser.add_argument("--save-rows", type=Path, help="save the searched rows here (JSON Lines)")
    parser.add_argument("--rows", type=Path, help="measure rows saved by --save-rows instead of searching")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnemosync-recall-"))
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    try:
        model = ensure_default_model(default_data_home())
        if args.bar:
            result = bar_report(collect(model, work, log))
        elif args.projects:
            prompt_rows = recall_prompts.collect(model, work, log)
            if args.save_rows:
                recall_prompts.save(prompt_rows, args.save_rows)
            result = decision_report(prompt_rows, collect(model, work, log))
            print(result["markdown"], file=sys.stderr)
        else:
            rows = recall_prompts.load(args.rows) if args.rows else recall_sizes.collect_all(model, log)
            if args.save_rows:
                recall_prompts.save(rows, args.save_rows)
            result = sizes_report(rows)
            print(result["markdown"], file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
