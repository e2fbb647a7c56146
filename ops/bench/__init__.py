"""mnemosync benchmarks: `python -m ops.bench [--quick]` (see ops/bench/__main__.py)."""
