"""Plots drawn on the server as SVG: horizontal bars for counts, columns per minute for rates.

Each function returns markup ready to place in a page (`markupsafe.Markup`),
with every label escaped; the drawing scales to its box (a viewBox, no fixed
size). Colours are presentation attributes, not styles, so the page's
Content-Security-Policy can forbid inline styles.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from markupsafe import Markup, escape

PALETTE = ("#3b6ea8", "#d08c2d", "#4f9a5b", "#b5475a", "#7d5ba6", "#2a9d9a", "#8a7a5c", "#c45ca8", "#666666")


def bars(items: Sequence[tuple[str, int]], *, title: str, width: int = 460) -> Markup:
    """Horizontal bars, one per (label, value), longest first as given."""
    if not items:
        return Markup('<p class="empty">{}: nothing yet</p>').format(title)
    row, label_w = 22, 150
    top = max(value for _, value in items) or 1
    height = row * len(items) + 8
    parts = [f'<svg class="plot" role="img" viewBox="0 0 {width} {height}">',
             f"<title>{escape(title)}</title>"]
    for i, (label, value) in enumerate(items):
        y = 4 + i * row
        length = max(1, round((width - label_w - 60) * value / top))
        parts.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" class="label">{escape(label)}</text>'
                     f'<rect x="{label_w}" y="{y + 3}" width="{length}" height="{row - 8}" fill="{PALETTE[0]}">'
                     f"<title>{escape(label)}: {value}</title></rect>"
                     f'<text x="{label_w + length + 4}" y="{y + 15}" class="value">{value}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def columns(starts_ms: Sequence[int], series: dict[str, Sequence[int]], *, title: str, width: int = 640,
            height: int = 160) -> Markup:
    """Stacked columns per minute: `series` maps a name to one value per start in `starts_ms`; with a legend."""
    n = len(starts_ms)
    left, bottom, top_pad = 40, 22, 8
    plot_w, plot_h = width - left - 8, height - bottom - top_pad
    totals = [sum(values[i] for values in series.values()) for i in range(n)]
    top = max(totals, default=0) or 1
    slot = plot_w / max(n, 1)
    parts = [f'<svg class="plot" role="img" viewBox="0 0 {width} {height + 18}">', f"<title>{escape(title)}</title>",
             f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{width - 8}" y2="{top_pad + plot_h}" class="axis"/>',
             f'<text x="{left - 4}" y="{top_pad + 8}" text-anchor="end" class="value">{top}</text>',
             f'<text x="{left - 4}" y="{top_pad + plot_h}" text-anchor="end" class="value">0</text>']
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    for i, start in enumerate(starts_ms):
        y: float = top_pad + plot_h
        for name, values in series.items():
            if not values[i]:
                continue
            h = plot_h * values[i] / top
            y -= h
            parts.append(f'<rect x="{left + i * slot + 1:.1f}" y="{y:.1f}" width="{max(slot - 2, 1):.1f}" '
                         f'height="{h:.1f}" fill="{colour[name]}"><title>{_minute(start)} {escape(name)}: '
                         f"{values[i]}</title></rect>")
    for i in (0, n - 1) if n else ():
        anchor = "start" if i == 0 else "end"
        x = left if i == 0 else width - 8
        parts.append(f'<text x="{x}" y="{height - 4}" text-anchor="{anchor}" class="value">'
                     f"{_minute(starts_ms[i])}</text>")
    x = left
    for name in series:
        parts.append(f'<rect x="{x}" y="{height + 6}" width="10" height="10" fill="{colour[name]}"/>'
                     f'<text x="{x + 14}" y="{height + 15}" class="label">{escape(name)}</text>')
        x += 24 + 7 * len(name)
    parts.append("</svg>")
    return Markup("".join(parts))


def _minute(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%H:%M")
