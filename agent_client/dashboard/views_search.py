"""Search, explained: the server's search, each result drawn as a bar of its relevance (the calibrated chance that it
answers the query, `mnemosync.kernel.recall_decision.relevance`, the number MCP search returns and the prompt hook
injects by), results under the shipped floor left out unless asked for (`all=1`), with the parts its final score
adds up (relevance, activation, confidence, importance) in words and, behind a disclosure, every part the server
returns; and what the prompt hook's recall decision (`Decision.judge`) would make of the query as a prompt of a
session in the given scope: the memories it would inject (shown even when they are not among the results), and each
candidate's features, relevance and decision, as `mnemosync recall --explain` prints them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from mnemosync.agent.dashboard.web import client_error_page, dashboard_of, error_page, no_store, page, whole_number
from mnemosync.kernel import recall_decision
from mnemosync.kernel.errors import CodedError
from mnemosync.kernel.search import MODES, Hit
from mnemosync.kernel.session_scopes import USER_SCOPE, home_scopes

MAX_LIMIT = 50
MAX_QUERY = 2000
EXPLAINED = {
    "vector_rank": "rank in the vector channel (0: not found by it)",
    "vector_distance": "cosine distance to the query (0 identical, 2 opposite)",
    "keyword_rank": "rank in the keyword channel (0: not found by it)",
    "bm25": "FTS5 BM25 (more negative is better)",
    "keyword_coverage": "IDF-weighted share of the query's searchable words the memory contains",
    "vector_score": "the vector channel's part of the fused score (1 for the nearest memory)",
    "keyword_score": "the keyword channel's part of the fused score (BM25 and coverage, normalised)",
    "rrf": "plain reciprocal rank fusion of the two ranks, for comparison (not used for ordering)",
    "fused": "vector part + keyword part",
    "relevance": "fused / the best fused score of this search (the re-ranking's match, not the calibrated relevance)",
    "activation": "ACT-R activation: uses and age, context tags (fan effect), floored by layer",
    "confidence": "the memory's confidence, x0.7 when no agent wrote it for 90 days",
    "relevance_part": "0.60 x relevance",
    "activation_part": "0.25 x activation / 10",
    "confidence_part": "0.15 x confidence",
    "importance_part": "0.10 x (importance - 0.5)",
    "final": "the score results are ordered by: the four parts added (the fused score without re-ranking)",
}
"""What each score part means; parts the server adds later are shown by their name."""


NOT_PARTS = ("memory", "neighbours")
"""Fields of a hit that are not score parts."""
STACKED = (("relevance_part", "match"), ("activation_part", "activation"), ("confidence_part", "confidence"),
           ("importance_part", "importance"))
"""The parts `final` is the sum of when the server re-ranks, as the bar shows them (field, label)."""


def score_parts(hit: Hit) -> list[tuple[str, object, str]]:
    """(name, value, meaning) of every score part the hit carries, in the order the server gives them."""
    parts = [(f.name, getattr(hit, f.name), EXPLAINED.get(f.name, ""))
             for f in dataclasses.fields(hit) if f.name not in NOT_PARTS]
    final = next(p for p in parts if p[0] == "final")
    return [p for p in parts if p[0] != "final"] + [final]


@dataclass(frozen=True)
class Segment:
    """One part of a hit's score bar: its label, value, and width in percent of the widest score on the page."""

    label: str
    value: float
    width: float


def relevance_bar(relevance: float | None, hit: Hit, widest: float) -> list[Segment]:
    """The bar of a result: its relevance, on a scale where 1 fills it; a keyword search measures none, so its
    results keep the bar of their final score's parts (`score_bar`)."""
    if relevance is None:
        return score_bar(hit, widest)
    return [Segment("relevance", relevance, 100 * relevance)]


def score_bar(hit: Hit, widest: float) -> list[Segment]:
    """The bar of `hit`'s final score: one segment per part it adds up (negative parts, which subtract, drawn apart
    and marked), or one segment of the fused score when the server did not re-rank."""
    widest = widest or 1.0
    if not any(getattr(hit, name) for name, _ in STACKED):
        return [Segment("fused", hit.final, 100 * max(hit.final, 0.0) / widest)]
    return [Segment(label, getattr(hit, name), 100 * abs(getattr(hit, name)) / widest)
            for name, label in STACKED if getattr(hit, name)]


def hook_decision(viewer, query: str, mode: str, scope: str) -> dict | None:
    """The prompt hook's decision on the query as a prompt of a session in `scope` (`user` when none is given):
    candidates by memory id, what it would inject and a note saying whose decision it is, or the problem that kept
    the hook's search from running (None for a keyword or vector search: the hook searches hybrid).

    The hook's own steps: a hybrid search of the session's home scopes (`session_scopes.home_scopes`) for its
    SEARCH_LIMIT best hits, judged by `Decision.judge`, the call `mnemosync.shim.recall` makes. So a hit the page
    shows from another scope has no decision, and an automated agent's memory the decision takes is not injected
    unless its words back its vector, as in the hook."""
    if mode != "hybrid":
        return None
    if not recall_decision.worth_searching(query):
        return {"by_id": {}, "injected": [], "note": "the prompt hook would not search this (too short, or a slash "
                                                     "command)"}
    session = scope or USER_SCOPE
    scopes = home_scopes(session)
    try:
        found = viewer.search(query, mode="hybrid", limit=recall_decision.SEARCH_LIMIT, scopes=scopes)
    except CodedError as exc:
        return {"by_id": {}, "injected": [], "session": session,
                "problem": f"cannot show what a session of scope {session} would get: {exc}"}
    decision = recall_decision.shipped()
    candidates = decision.judge(query, found.hits)
    note = (f"as a session of scope {session} would decide, over its {recall_decision.SEARCH_LIMIT} best hits in "
            f"{' and '.join(scopes)}" + ("" if scope else "; give a scope to see a project session's decision"))
    return {"by_id": {c.hit.memory.id: c for c in candidates}, "note": note, "threshold": decision.threshold,
            "injected": [c.hit.memory.id for c in candidates if c.injected], "session": session,
            "chosen": [c for c in candidates if c.injected]}


def search(request: Request) -> Response:
    """GET /search?q=…&mode=hybrid|vector|keyword&limit=N&scope=S."""
    query = request.query_params.get("q", "").strip()
    mode = request.query_params.get("mode", "hybrid")
    scope = request.query_params.get("scope", "").strip()
    limit_text = request.query_params.get("limit", "10")
    limit = whole_number(limit_text)
    form = dict(q=query, mode=mode, limit=limit_text, scope=scope, modes=MODES)
    if not query:
        return no_store(page(request, "search.html", outcome=None, **form))
    if mode not in MODES:
        return error_page(request, 400, "Bad input", f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        return error_page(request, 400, "Bad input", f"limit must be a number from 1 to {MAX_LIMIT}, got "
                                                     f"{limit_text!r}")
    if len(query) > MAX_QUERY:
        return error_page(request, 400, "Bad input", f"the query is {len(query)} characters; the limit is {MAX_QUERY}")
    try:
        viewer = dashboard_of(request).viewer
        outcome = viewer.search(query, mode=mode, limit=limit, scopes=(scope,) if scope else ())
        recall = hook_decision(viewer, query, mode, scope)
    except CodedError as exc:
        return client_error_page(request, exc)
    widest = max((sum(abs(getattr(h, name)) for name, _ in STACKED) or h.final for h in outcome.hits), default=1.0)
    scored = list(zip(outcome.hits, recall_decision.relevance(query, outcome.hits, mode=mode), strict=True))
    floor = recall_decision.shipped().min_relevance
    shown = scored if request.query_params.get("all") == "1" else [(h, r) for h, r in scored if r is None or r >= floor]
    results = [(hit, relevance, score_parts(hit), relevance_bar(relevance, hit, widest), score_bar(hit, widest))
               for hit, relevance in shown]
    listed = {hit.memory.id for hit, _ in shown}
    return no_store(page(request, "search.html", outcome=outcome, results=results, recall=recall, listed=listed,
                         hidden=len(scored) - len(shown), floor=floor, **form))
