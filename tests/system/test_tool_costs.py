"""The README's table of what each MCP tool set costs a session is the benchmark's figures, measured now."""

from __future__ import annotations

from pathlib import Path

from ops.bench import bench_tools

ROOT = Path(__file__).resolve().parents[2]


def test_the_readmes_tool_set_table_is_what_the_benchmark_measures():
    figures = bench_tools.measure()
    assert len(figures["all"]["tools"]) > len(figures["compact"]["tools"]) == 6
    readme = (ROOT / "README.md").read_text()
    assert bench_tools.readme_section(readme) == bench_tools.readme_block(figures), (
        "the README's tool-set figures are stale: run `python -m ops.bench.bench_tools --write-readme`")
