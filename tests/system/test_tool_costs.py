"""The shim's README's table of what each MCP tool set costs a session is the benchmark's figures, measured now."""

from __future__ import annotations

from ops.bench import bench_tools


def test_the_readmes_tool_set_table_is_what_the_benchmark_measures():
    figures = bench_tools.measure()
    assert len(figures["all"]["tools"]) > len(figures["compact"]["tools"]) == 6
    readme = bench_tools.README.read_text()
    assert bench_tools.readme_section(readme) == bench_tools.readme_block(figures), (
        "mcp_shim/README.md's tool-set figures are stale: run `python -m ops.bench.bench_tools --write-readme`")
