"""What the shim's tool list costs a session: every request a session makes carries it.

For each tool set (`mnemosync.shim.app.TOOL_SETS`) a real `mnemosync-mcp` is
started and asked with the MCP client (`tools/list`, and the server
instructions from `initialize`). Measured per set:

* `model_chars`: the JSON of what a model is given per tool (name,
  description, input schema), which is what Claude Code turns each MCP tool
  into; `tokens` is that divided by `CHARS_PER_TOKEN`;
* `wire_chars`: the whole `tools/list` answer (output schemas, titles and
  annotations too), for comparison;
* `instructions_chars`: the server instructions (sent once, in the system prompt).

Tokens are estimated as characters / 4, the estimate the shim uses elsewhere
(`mnemosync.shim.core_memories`); JSON with many short keys often tokenizes denser,
so treat the figure as a comparison between sets rather than an exact count.

    python -m ops.bench.bench_tools                  # prints the figures as JSON
    python -m ops.bench.bench_tools --write-readme   # also rewrites mcp_shim/README.md's table of them

The table of tool sets in `mcp_shim/README.md` (the shim's page of the manual) is `readme_block(measure())`, between the
`README_MARKERS`; `tests/system/test_tool_costs.py` keeps the two equal.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHARS_PER_TOKEN = 4


def _free_port() -> int:
    with socket.socket() as s:  # nothing listens there: the shim starts offline, which the tool list does not care
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listing(tools: str) -> dict[str, Any]:
    from anyio.from_thread import start_blocking_portal
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from ops import local_agents

    with tempfile.TemporaryDirectory(prefix="mnemosync-tools-") as work, local_agents.private_runtime() as runtime:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("MNEMOSYNC_")},
               "XDG_RUNTIME_DIR": str(runtime), "MNEMOSYNC_SERVER": f"127.0.0.1:{_free_port()}",
               "MNEMOSYNC_INSECURE": "1",
               "MNEMOSYNC_AGENT_ID": "bench-tools", "MNEMOSYNC_CACHE_DIR": work, "MNEMOSYNC_TIMEOUT": "1",
               "MNEMOSYNC_TOOLS": tools, "MNEMOSYNC_HOOK_SOCKET": "0", "CLAUDE_PROJECT_DIR": "/home/bench/web"}
        params = StdioServerParameters(command=sys.executable, args=["-m", "mnemosync.shim"], env=env)

        async def ask():
            with open(Path(work) / "shim.err", "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as s:
                    init = await s.initialize()
                    listed = await s.list_tools()
                    return init, listed

        with start_blocking_portal() as portal:
            init, listed = portal.call(ask)
    model_view = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                  for t in listed.tools]
    wire = listed.model_dump(mode="json", by_alias=True, exclude_none=True)["tools"]
    model_chars = len(json.dumps(model_view, separators=(",", ":")))
    return {"tools": [t.name for t in listed.tools], "model_chars": model_chars,
            "tokens": round(model_chars / CHARS_PER_TOKEN),
            "wire_chars": len(json.dumps(wire, separators=(",", ":"))),
            "instructions_chars": len(init.instructions or "")}


def measure(log: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """The cost of each tool set (see the module docstring)."""
    from mnemosync.shim.app import TOOL_SETS

    out = {}
    for tools in TOOL_SETS:
        log(f"  tool list: {tools}")
        out[tools] = _listing(tools)
    return out


README = Path(__file__).resolve().parents[2] / "mcp_shim" / "README.md"
"""The manual's page that holds the tool-set table: the shim's README, where the tool sets are described."""

README_MARKERS = ("<!-- tool-sets: made by python -m ops.bench.bench_tools --write-readme -->",
                  "<!-- /tool-sets -->")
"""The lines around the README's block of tool-set figures."""


def readme_block(figures: dict[str, Any]) -> str:
    """The README's tool-set paragraph and table for `figures` (what `measure` returns)."""
    compact, every = figures["compact"], figures["all"]
    added = [t for t in every["tools"] if t not in compact["tools"]]
    rows = [f"| `{name}`{' (default)' if name == 'compact' else ''} | {len(f['tools'])} | {f['model_chars']:,} | "
            f"{f['tokens']:,} | {f['wire_chars']:,} |" for name, f in figures.items()]
    return "\n".join([
        f"The default (`MNEMOSYNC_TOOLS=compact`, `--tools`) is {', '.join(compact['tools'])}; `all` adds "
        f"{', '.join(added)}. Measured with the MCP client (`python -m ops.bench.bench_tools`): characters are the "
        "names, descriptions and input schemas as JSON, what a model is given; tokens are estimated as characters "
        "/ 4; the whole `tools/list` answer also carries output schemas, titles and annotations.",
        "",
        "| tool set | tools | characters | about tokens per request | whole `tools/list` answer, characters |",
        "| --- | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        f"The server instructions ({compact['instructions_chars']:,} characters) come once, in the system prompt.",
    ])


def readme_section(readme: str) -> str:
    """The text between the README's markers."""
    start, end = README_MARKERS
    return readme.split(start + "\n", 1)[1].split("\n" + end, 1)[0]


def main(argv: list[str] | None = None) -> int:
    """Prints the figures; with --write-readme also puts them into `README` (mcp_shim/README.md)."""
    figures = measure(lambda m: print(m, file=sys.stderr))
    print(json.dumps(figures, indent=2))
    if "--write-readme" in (sys.argv[1:] if argv is None else argv):
        text = README.read_text()
        README.write_text(text.replace(readme_section(text), readme_block(figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
