"""Health: the head, memories by layer and scope, writes and searches per minute, the chain's verification state,
and room for the lifecycle's archive and consolidation activity, as SVG plots (refreshed live)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mnemosync.agent.dashboard import plots
from mnemosync.agent.dashboard.web import dashboard_of, fragment, live, no_store, page
from mnemosync.kernel.errors import CodedError
from mnemosync.kernel.memory import LAYERS

MINUTES = 60
LIVE_SECONDS = 5.0
ARCHIVING_OPS = ("forget",)
"""Operations that archive memories today; the lifecycle's decay archive and consolidation entries will show in the
writes plot under their own names as soon as the server writes them."""


def _panel(request: Request) -> str:
    viewer = dashboard_of(request).viewer
    activity = viewer.activity(MINUTES)
    stats = viewer.stats()
    try:
        chain, chain_problem = viewer.chain(), ""
    except CodedError as exc:
        chain, chain_problem = None, f"{exc.code}: {exc}"
    starts = [b.start_ms for b in activity.buckets]
    ops = sorted({op for b in activity.buckets for op in b.writes})
    layers = [(name, activity.by_layer.get(name, 0)) for name in LAYERS.values()]
    return fragment(
        "_health_panel.html", activity=activity, stats=stats, chain=chain, chain_problem=chain_problem,
        writes_per_minute=sum(b.total_writes for b in activity.buckets[-5:]) / 5,
        searches_per_minute=sum(b.searches for b in activity.buckets[-5:]) / 5,
        by_layer=plots.bars(layers, title="live memories by layer"),
        by_scope=plots.bars(sorted(activity.by_scope.items(), key=lambda kv: -kv[1]), title="live memories by scope"),
        writes=plots.columns(starts, {op: [b.writes.get(op, 0) for b in activity.buckets] for op in ops},
                             title="changelog entries per minute, by operation"),
        searches=plots.columns(starts, {"searches": [b.searches for b in activity.buckets]},
                               title="searches per minute"),
        archiving=plots.columns(starts, {op: [b.writes.get(op, 0) for b in activity.buckets]
                                         for op in ARCHIVING_OPS},
                                title="memories archived per minute"),
        minutes=MINUTES,
    )


def health(request: Request) -> Response:
    """GET /health."""
    try:
        panel, problem = _panel(request), ""
    except CodedError as exc:
        panel, problem = "", f"{exc.code}: {exc}"
    return no_store(page(request, "health.html", panel=panel, problem=problem))


async def health_live(request: Request) -> Response:
    """GET /health/live: the panel again every few seconds and when the head moves."""
    return live(request, lambda: _panel(request), every=LIVE_SECONDS)
