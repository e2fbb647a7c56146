"""`mnemosync.agent.dashboard.plots`: SVG drawn on the server, labels escaped, bars to scale."""

from __future__ import annotations

import re

from mnemosync.agent.dashboard.plots import bars, columns


def test_labels_are_escaped_so_a_scope_name_cannot_inject_markup():
    drawn = str(bars([("<script>alert(1)</script>", 3)], title="by scope"))
    assert "<script>" not in drawn and "&lt;script&gt;" in drawn


def test_bars_are_drawn_to_scale_and_an_empty_plot_says_so():
    drawn = str(bars([("factual", 4), ("legislative", 2)], title="by layer"))
    widths = [float(w) for w in re.findall(r'<rect x="\d+" y="[\d.]+" width="([\d.]+)"', drawn)]
    assert widths[0] == 2 * widths[1]
    assert "nothing yet" in str(bars([], title="by layer"))


def test_columns_stack_the_series_of_each_minute_and_scale_to_the_busiest():
    drawn = str(columns([0, 60_000], {"add": [2, 4], "update": [2, 0]}, title="writes", height=122))
    heights = [float(h) for h in re.findall(r'height="([\d.]+)" fill=', drawn)[:3]]
    assert heights == [46.0, 46.0, 92.0]  # add 2 and update 2 in the first minute, add 4 (full height) in the second
    assert "add" in drawn and "update" in drawn
